"""`seq2seq serve`: a trained model behind HTTP, concurrent requests decoded in dynamic batches."""

from seq2seq.serve.app import ServeConfig
from seq2seq.serve.batcher import BatchLimits
from seq2seq.serve.schema import RequestLimits
from seq2seq.serve.server import serve

__all__ = ["BatchLimits", "RequestLimits", "ServeConfig", "serve"]
