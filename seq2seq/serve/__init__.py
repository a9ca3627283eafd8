"""`seq2seq serve`: a trained model behind HTTP, concurrent requests decoded in dynamic batches."""

from .app import ServeConfig, serve
from .batcher import BatchLimits
from .schema import RequestLimits

__all__ = ["BatchLimits", "RequestLimits", "ServeConfig", "serve"]
