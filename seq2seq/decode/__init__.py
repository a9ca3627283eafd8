"""Decoding: the beam engine and its strategies, the translator, terms, markup, jobs."""
