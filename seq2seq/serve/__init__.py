"""`seq2seq serve`: a trained model behind HTTP, concurrent requests decoded in dynamic batches."""

from .app import ServeConfig
from .batcher import BatchLimits
from .schema import RequestLimits
from .server import serve

__all__ = ["BatchLimits", "RequestLimits", "ServeConfig", "serve"]
