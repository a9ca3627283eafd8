"""Looking at a run: its summary, curves and attention pictures."""
