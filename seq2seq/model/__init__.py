"""The model: the Transformer, its factory, int8 at load time, FLOPs."""
