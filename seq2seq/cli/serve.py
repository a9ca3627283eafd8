"""`seq2seq serve`: the HTTP server (serve/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import global_options, user_errors
from seq2seq.cli.decode_options import DECODE_DEFAULTS, DecodeOptions, decode_options

# `seq2seq serve`'s own options.
Host = Annotated[
    str,
    typer.Option(help="Address to listen on; 0.0.0.0 opens it to other machines (see --api-keys)."),
]
Port = Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")]
BatchWindowMs = Annotated[
    float, typer.Option(min=0, help="Wait this long after a request for others to join it.")
]
MaxBatchTokens = Annotated[
    int, typer.Option(min=1, help="Source tokens of the requests taken into one batch.")
]
MaxBatchBeamTokens = Annotated[
    int,
    typer.Option(min=1, help="(Source + term) tokens × beam size of the requests in one batch."),
]
MaxSliceBeamTokens = Annotated[
    int,
    typer.Option(
        min=1,
        help="(Source + term) tokens × beam size of one slice of glossary or markup work, "
        "which is decoded a slice at a time with plain batches in between.",
    ),
]
MaxBatchRequests = Annotated[
    int, typer.Option(min=1, help="Requests taken into one batch (1: no batching).")
]
NoBatching = Annotated[
    bool, typer.Option(help="Decode requests one at a time (window 0, one request a batch).")
]
MaxQueue = Annotated[
    int, typer.Option(min=1, help="Sentences waiting at most; beyond, 503 with Retry-After.")
]
MaxRequestLines = Annotated[int, typer.Option(min=1, help="Texts in one request.")]
MaxRequestBytes = Annotated[int, typer.Option(min=1, help="Bytes of one request body.")]
MaxRequestTokens = Annotated[
    int, typer.Option(min=1, help="Source tokens of one request, its texts split into sentences.")
]
MaxRequestBeamTokens = Annotated[
    int,
    typer.Option(min=1, help="(Source + term) tokens × beam size of one request; beyond, 413."),
]
MaxBeamSize = Annotated[int, typer.Option(min=1, help="Largest beam_size a request may ask.")]
RequestTimeout = Annotated[
    float,
    typer.Option(min=0.001, help="Seconds from a request's arrival to its answer; past it, 504."),
]
BodyTimeout = Annotated[
    float,
    typer.Option(min=0.001, help="Seconds to receive a request's body; past it, 408."),
]
DocumentTtl = Annotated[
    float,
    typer.Option(
        min=1,
        help="Seconds a translated document (/translate_file, /v2/document) is kept after it "
        "is done; then it is removed and its links answer 404.",
    ),
]
MaxUploadMb = Annotated[
    float,
    typer.Option(min=0.001, help="Megabytes of one uploaded document; beyond, 413."),
]
Threads = Annotated[
    int | None, typer.Option(min=1, help="CPU threads for decoding (default: all cores).")
]


@user_errors
@decode_options(omit=("split_sentences", "constraints", "src_lang", "tgt_lang"))
def serve(
    ctx: typer.Context,
    run: Annotated[
        list[Path],
        typer.Option(
            "--run",
            "-r",
            help="Run directory of a trained model; give it again to serve several models "
            "(requests go to the one serving their language pair).",
        ),
    ],
    host: Host = "127.0.0.1",
    port: Port = 8080,
    options: DecodeOptions = DECODE_DEFAULTS,  # the shared ones: cli/decode_options.py
    batch_window_ms: BatchWindowMs = 5.0,
    max_batch_tokens: MaxBatchTokens = 8192,
    max_batch_requests: MaxBatchRequests = 256,
    max_batch_beam_tokens: MaxBatchBeamTokens = 131_072,
    max_slice_beam_tokens: MaxSliceBeamTokens = 512,
    no_batching: NoBatching = False,
    max_queue: MaxQueue = 2048,
    max_request_lines: MaxRequestLines = 256,
    max_request_bytes: MaxRequestBytes = 1_000_000,
    max_request_tokens: MaxRequestTokens = 16_384,
    max_request_beam_tokens: MaxRequestBeamTokens = 65_536,
    max_beam_size: MaxBeamSize = 16,
    request_timeout: RequestTimeout = 60.0,
    body_timeout: BodyTimeout = 30.0,
    document_ttl: DocumentTtl = 3600.0,
    max_upload_mb: MaxUploadMb = 10.0,
    threads: Threads = None,
    api_keys: Annotated[
        Path | None,
        typer.Option(
            "--api-keys",
            help="Keys file: one key a line, optionally "
            "followed by its requests a minute and characters=N (its character limit, as "
            "/v2/usage reports it). With it, every translating route needs a key; without "
            "it, none does.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Folder where what clients made outlives a restart (each key's character "
            "usage, DeepL glossaries), one SQLite file each, and documents until they expire; "
            "created on start. Default: "
            "$XDG_STATE_HOME/seq2seq/serve (~/.local/state/seq2seq/serve).",
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis-url",
            help="A Redis server (redis://host:6379/0) that keeps what several replicas "
            "share (each key's character usage) instead of the state dir.",
        ),
    ] = None,
) -> None:
    """Serve a trained model over HTTP: POST /translate, GET /health /ready /metrics /info /docs.

    Concurrent requests are decoded together in dynamic batches; SIGTERM or Ctrl-C stops
    accepting, answers the requests in flight, and exits. Listens on loopback by default.

    Examples:\n
      seq2seq serve --run runs/demo --port 8080\n
      curl -s localhost:8080/translate -d '{"text": "I have three cats."}'\n
      seq2seq serve --run runs/demo --host 0.0.0.0 --beam-size 1 --batch-window-ms 10\n
      seq2seq serve --run runs/en-fr --run runs/m2m100   # several models, routed by pair
    """
    from seq2seq.serve import BatchLimits, RequestLimits, ServeConfig
    from seq2seq.serve import serve as run_server
    from seq2seq.serve.documents import DocumentLimits
    from seq2seq.serve.server import default_state_dir

    if no_batching:  # one request a batch, at once
        batch_window_ms, max_batch_requests = 0.0, 1
    cfg = ServeConfig(
        host=host,
        port=port,
        batch=BatchLimits(
            window_s=batch_window_ms / 1000,
            max_tokens=max_batch_tokens,
            max_requests=max_batch_requests,
            max_queue_lines=max_queue,
            max_beam_tokens=max_batch_beam_tokens,
            max_slice_beam_tokens=max_slice_beam_tokens,
        ),
        request=RequestLimits(
            max_lines=max_request_lines,
            max_bytes=max_request_bytes,
            max_beam_size=max_beam_size,
            max_tokens=max_request_tokens,
            max_beam_tokens=max_request_beam_tokens,
            timeout_s=request_timeout,
            body_timeout_s=body_timeout,
        ),
        api_keys=api_keys,
        state_dir=state_dir or default_state_dir(),
        redis_url=redis_url,
        documents=DocumentLimits(
            max_upload_bytes=int(max_upload_mb * 2**20), ttl_s=document_ttl
        ),
    )
    run_server(
        run[0],
        cfg,
        checkpoint=options.checkpoint,
        device=options.device,
        decode=options.settings(run[0]),
        threads=threads,
        quiet=bool(global_options(ctx).get("quiet")),
        glossary=options.glossary,
        shortlist=options.use_shortlist,
        extra_runs=run[1:],
    )
