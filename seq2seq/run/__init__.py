"""Run directories: atomic checkpoints, opening a trained run, the metrics log."""
