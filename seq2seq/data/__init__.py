"""Data: corpora through `datasets`, tokenizers and their layouts, token-budget batches."""
