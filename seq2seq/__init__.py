"""seq2seq: train, evaluate and run encoder-decoder Transformer translation models."""

__version__ = "0.1.0"
