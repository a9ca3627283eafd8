"""The server's Prometheus metrics, in a registry of its own (no process-wide globals), and the
middleware that counts answered requests."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401 (re-exported)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from seq2seq.serve.batcher import Batcher, BatchReport

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Request counts are labelled by path; any other path counts as "other", so that clients
# probing random URLs cannot grow the label set without bound.
KNOWN_PATHS = (
    *("/translate", "/health", "/ready", "/metrics", "/info", "/docs", "/openapi.json"),
    *("/", "/models", "/languages", "/detect", "/frontend/settings"),  # the page, LibreTranslate
    *("/v2/translate", "/v2/languages", "/v2/glossaries", "/v2/usage"),  # DeepL
)


class ServerMetrics:
    """Requests, sentences, tokens, batch sizes, queue depth and latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "seq2seq_requests", "HTTP requests answered.", ["path", "status"], registry=r
        )
        self.latency = Histogram(
            "seq2seq_translate_latency_seconds",
            "Time from a /translate request's arrival to its answer.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.sentences = Counter("seq2seq_sentences", "Lines translated.", registry=r)
        self.tokens = Counter(
            "seq2seq_source_tokens", "Source subword tokens translated.", registry=r
        )
        self.batch_sentences = Histogram(
            "seq2seq_batch_sentences",
            "Lines in one decoded batch.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "seq2seq_batch_requests",
            "Requests in one decoded batch.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_seconds = Histogram(
            "seq2seq_batch_decode_seconds",
            "Time to decode one batch.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.abandoned_decoding = Histogram(
            "seq2seq_abandoned_decode_seconds",
            "Seconds a batch went on decoding after a request in it was abandoned (its client "
            "gone or its timeout passed), by the batch's work: plain, terms or markup.",
            ["work"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rejected = Counter(
            "seq2seq_queue_full", "Requests refused because the queue was full.", registry=r
        )
        self.queue_lines = Gauge(
            "seq2seq_queue_sentences", "Lines waiting for a batch.", registry=r
        )
        self.queue_requests = Gauge(
            "seq2seq_queue_requests", "Requests waiting for a batch.", registry=r
        )
        self.decoding = Gauge(
            "seq2seq_decoder_busy", "1 while a batch is being decoded.", registry=r
        )

    def watch(self, batcher: Batcher) -> None:
        """Read the queue gauges from the batcher at each scrape."""
        self.queue_lines.set_function(lambda: batcher.queued_lines)
        self.queue_requests.set_function(lambda: batcher.queued_requests)
        self.decoding.set_function(lambda: int(batcher.busy))

    def on_batch(self, report: BatchReport) -> None:
        """Record one decoded batch (called from the decoder thread)."""
        self.sentences.inc(report.lines)
        self.tokens.inc(report.tokens)
        self.batch_sentences.observe(report.lines)
        self.batch_requests.observe(report.requests)
        self.batch_seconds.observe(report.seconds)
        for seconds in report.abandoned_s:
            self.abandoned_decoding.labels(report.group or "plain").observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class CountRequests:
    """ASGI middleware counting answered requests by path and status."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope["path"] if scope["path"] in KNOWN_PATHS else "other"
            self.metrics.requests.labels(path, str(status)).inc()
