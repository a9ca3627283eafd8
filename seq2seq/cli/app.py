"""The `seq2seq` command: thin wrappers that parse options and call one job each.

Each command imports its job inside its function (why: cli/base.py). Newer jobs keep their
commands in their own modules beside this one; importing them here registers them.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from seq2seq.cli import (
    clean,  # noqa: F401  (registers the clean command)
    distill,  # noqa: F401  (registers the distill command)
    score,  # noqa: F401  (registers the score command)
    shortlist,  # noqa: F401  (registers the shortlist command)
    translate_file,
)
from seq2seq.cli.base import (
    BatchSize,
    BeamSize,
    Checkpoint,
    Device,
    LengthPenalty,
    MaxTokens,
    Quantize,
    SplitSentences,
    SrcLang,
    TgtLang,
    UseShortlist,
    app,
    decode_settings,
    global_options,
    log,
    user_errors,
)
from seq2seq.errors import UserError

if TYPE_CHECKING:
    pass

app.command()(translate_file.translate_file)


@app.command()
@user_errors
def train(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML config file.")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config key: --set train.max_steps=100 (repeatable)."
        ),
    ] = None,
    run: Annotated[
        Path | None, typer.Option("--run", help="Run directory (overrides run_dir).")
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue from the run directory's latest checkpoint.")
    ] = False,
    reset_dataloader: Annotated[
        bool,
        typer.Option(
            help="With --resume: restart the current epoch's batches (allows changing "
            "train.max_tokens, update_freq, seed or the training data)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Validate the config, build the model, print its size; no data.")
    ] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            help="Start from this run's weights and tokenizer (an imported model, say) with a "
            "fresh optimizer; its model and tokenizer sections apply."
        ),
    ] = None,
) -> None:
    """Train a model as a config describes.

    Examples:\n
      seq2seq train --config configs/demo.yaml\n
      seq2seq train -c configs/en-fr.yaml --set train.max_steps=1000 --run runs/try\n
      seq2seq train -c configs/demo.yaml --resume\n
      seq2seq train -c ft.yaml --init-from runs/opus-mt-en-fr   # fine-tune
    """
    from seq2seq.config import check_files, load_config

    overrides = list(set_ or [])
    if run is not None:
        overrides.append(f"run_dir={run}")
    cfg = load_config(config, overrides)
    init = None
    if init_from is not None:
        from seq2seq.run.rundir import config_for_init

        cfg, init = config_for_init(cfg, init_from)
    if dry_run:
        _dry_run(cfg)
        return
    check_files(cfg, str(config))

    from seq2seq.train.trainer import train as run_training

    if reset_dataloader and not resume:
        raise UserError("--reset-dataloader only applies with --resume")
    state = run_training(
        cfg,
        resume=resume,
        progress=not global_options(ctx).get("quiet"),
        reset_dataloader=reset_dataloader,
        init=init,
    )
    best = f", best valid BLEU {state.best_bleu:.2f}" if state.best_bleu is not None else ""
    if state.stopped_by is not None:
        print(f"stopped by {state.stopped_by} at step {state.step}; resume with --resume")
        raise typer.Exit(128 + signal.Signals[state.stopped_by].value)
    print(f"trained {state.step} steps into {cfg.run_dir}{best}")


def _dry_run(cfg) -> None:
    from seq2seq.model.transformer import Vocabulary, build_model, count_parameters, describe

    vocab = cfg.tokenizer.vocab_size
    shape = Vocabulary(vocab, vocab, cfg.tokenizer.joint, pad_id=cfg.tokenizer.pad_id)
    model = build_model(cfg.model, shape)
    m = cfg.model
    print(
        f"config OK. model: {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, "
        f"{m.heads} heads, FFN {m.ffn_dim}, vocabulary {vocab}"
        f"{' (joint, tied)' if cfg.tokenizer.joint and m.tie_embeddings else ''}"
    )
    print(f"parameters: {count_parameters(model):,}")
    for line in describe(model):
        print("  " + line)
    print(tokens_per_update(cfg.train.max_tokens, cfg.train.update_freq, _world_size()))


PAPER_TOKENS = 25_000


def _world_size() -> int:
    """The number of training processes: torchrun's WORLD_SIZE, else one."""
    from seq2seq.train.distributed import from_env

    return from_env().world_size


def tokens_per_update(max_tokens: int, update_freq: int, world_size: int) -> str:
    """The effective batch beside the paper's (§5.1: ~25,000 source and 25,000 target tokens)."""
    total = max_tokens * update_freq * world_size
    line = (
        f"tokens per update: {total:,} = max_tokens {max_tokens:,} × update_freq {update_freq} "
        f"× world size {world_size} (padding included)"
    )
    # Said where it is easy to get wrong: scaling a one-process config out under torchrun.
    if world_size > 1 and not 0.8 <= total / PAPER_TOKENS <= 1.25:
        per_process = -(-PAPER_TOKENS // (update_freq * world_size))
        line += (
            f"; {total / PAPER_TOKENS:.2g}× the paper's ~25,000: train.max_tokens {per_process:,} "
            "would keep it at this world size and update_freq"
        )
    return line


# `evaluate`'s own options.
EvalSplit = Annotated[str, typer.Option(help="Split of the run's data: valid or test.")]
EvalSrc = Annotated[Path | None, typer.Option(help="Source file (instead of --split).")]
EvalRef = Annotated[Path | None, typer.Option(help="Reference file, line-aligned with --src.")]
Hub = Annotated[str | None, typer.Option(help="A hub test set instead, e.g. wmt/wmt14.")]
HubConfig = Annotated[str | None, typer.Option(help="Its configuration, e.g. fr-en.")]
HubSplit = Annotated[str, typer.Option(help="Its split.")]
EvalOutputDir = Annotated[
    Path | None, typer.Option(help="Where hypotheses and the report go (RUN/eval).")
]
JsonReport = Annotated[
    Path | None, typer.Option("--json", help="Write the JSON report to this file.")
]
MinBleu = Annotated[float | None, typer.Option(help="Exit with status 1 when BLEU is below this.")]
Baseline = Annotated[
    Path | None,
    typer.Option(help="An earlier JSON report on the same references to compare with."),
]
FailOnRegression = Annotated[
    bool, typer.Option(help="With --baseline: exit 1 when BLEU dropped significantly.")
]


@app.command()
@user_errors
def evaluate(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    split: EvalSplit = "test",
    src: EvalSrc = None,
    ref: EvalRef = None,
    hub: Hub = None,
    hub_config: HubConfig = None,
    hub_split: HubSplit = "test",
    checkpoint: Checkpoint = None,
    beam_size: BeamSize = None,
    length_penalty: LengthPenalty = None,
    batch_size: BatchSize = None,
    max_tokens: MaxTokens = None,
    split_sentences: SplitSentences = None,
    device: Device = "auto",
    quantize: Quantize = None,
    use_shortlist: UseShortlist = False,
    glossary: GlossaryFile = None,
    term_mode: TermMode = None,
    constraints: ConstraintsFile = None,
    src_lang: SrcLang = None,
    tgt_lang: TgtLang = None,
    output_dir: EvalOutputDir = None,
    json_path: JsonReport = None,
    min_bleu: MinBleu = None,
    baseline: Baseline = None,
    fail_on_regression: FailOnRegression = False,
) -> None:
    """Translate a test set (beam search) and score it: BLEU, chrF, TER with signatures.

    Examples:\n
      seq2seq evaluate --run runs/demo --split test\n
      seq2seq evaluate --run runs/demo --src newstest.en --ref newstest.fr --min-bleu 30\n
      seq2seq evaluate --run runs/new --json new.json --baseline old.json --fail-on-regression
    """
    from seq2seq.config import CorpusConfig
    from seq2seq.decode.evaluate import evaluate as run_evaluation

    if fail_on_regression and baseline is None:
        raise UserError("--fail-on-regression needs --baseline OLD_REPORT.json")
    hub_spec = CorpusConfig(hub=hub, hub_config=hub_config, split=hub_split) if hub else None
    terms, given = _terminology(glossary, constraints)
    decode = decode_settings(
        run,
        beam_size=beam_size,
        length_penalty=length_penalty,
        batch_size=batch_size,
        max_tokens=max_tokens,
        split_sentences=split_sentences,
        quantize=quantize,
        term_mode=term_mode,
    )
    report = run_evaluation(
        run,
        split=split,
        src_file=src,
        ref_file=ref,
        hub=hub_spec,
        checkpoint=checkpoint,
        output_dir=output_dir,
        report_path=json_path,
        device=device,
        decode=decode,
        baseline=baseline,
        glossary=terms,
        constraints=given,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        shortlist=use_shortlist,
    )
    _print_report(report)
    failed = _regressed(report.get("comparison"), fail_on_regression)
    if min_bleu is not None and report["bleu"] < min_bleu:
        print(f"error: BLEU {report['bleu']:.2f} is below --min-bleu {min_bleu}", file=sys.stderr)
        failed = True
    if failed:
        raise typer.Exit(1)


def _print_report(report: dict[str, Any]) -> None:
    """The scores with their signatures and the length report, as `evaluate` prints them."""
    from seq2seq.decode.evaluate import describe_lengths

    print(f"BLEU = {report['bleu']:.2f}  {report['bleu_signature']}")
    print(f"  {report['bleu_detail']}")
    print(f"chrF2 = {report['chrf']:.2f}  {report['chrf_signature']}")
    print(f"TER = {report['ter']:.2f}  {report['ter_signature']}")
    print(describe_lengths(report["length"]))
    if "terminology" in report:
        t = report["terminology"]
        print(f"terms used: {t['used']} of {t['terms']} ({100 * t['rate']:.1f}%)")
    log.info(
        "%d sentences; hypotheses in %s, report in %s",
        report["sentences"],
        report["hypotheses_file"],
        report["report"],
    )


def _regressed(comparison: dict[str, Any] | None, fail_on_regression: bool) -> bool:
    """Print the comparison with the baseline; True when it should fail the job."""
    if comparison is None:
        return False
    verdict = "significant" if comparison["significant"] else "not significant"
    if comparison["delta"] == 0:
        verdict = "no difference"
    print(
        f"BLEU vs baseline: {comparison['baseline']:.2f} → {comparison['candidate']:.2f}, "
        f"Δ = {comparison['delta']:+.2f} (95% interval {comparison['ci_low']:+.2f} to "
        f"{comparison['ci_high']:+.2f}), p = {comparison['p_value']:.4f} ({verdict}; "
        f"paired bootstrap, {comparison['samples']} resamples)"
    )
    if fail_on_regression and comparison["delta"] < 0 and comparison["significant"]:
        print("error: BLEU dropped significantly against the baseline", file=sys.stderr)
        return True
    return False


# `translate`'s own options.
InputFile = Annotated[Path | None, typer.Option("--input", "-i", help="Input file (stdin).")]
OutputFile = Annotated[Path | None, typer.Option("--output", "-o", help="Output file (stdout).")]
NBest = Annotated[
    int | None, typer.Option(help="Print the N best as `line ||| translation ||| score` lines.")
]
InputErrors = Annotated[
    str,
    typer.Option(
        help="Invalid UTF-8 input: `strict` stops naming the line, `replace` decodes it "
        "as U+FFFD and goes on."
    ),
]
Alignments = Annotated[
    bool, typer.Option(help="Add ` ||| ` and Pharaoh `src-tgt` word pairs to each line.")
]
AlignmentLayer = Annotated[
    int | None,
    typer.Option(
        help="Decoder layer whose cross-attention aligns (negative: from the top); "
        "default: every layer's, averaged."
    ),
]
Scores = Annotated[
    bool,
    typer.Option(help="Add ` ||| ` and the length-normalised log-probability (what beam ranks)."),
]
WordScores = Annotated[
    bool, typer.Option(help="Add ` ||| ` and each output token's probability (EOS included).")
]
Tags = Annotated[
    bool,
    typer.Option(
        help="Lines carry inline tags/placeholders: put them back around the aligned words."
    ),
]
TagFormat = Annotated[
    str, typer.Option(help="Markup of --tags: `html` (void elements such as <br>) or `xml`.")
]
Sampling = Annotated[
    str | None,
    typer.Option(
        help="Sample outputs instead of searching (back-translation): topk:K, temperature:T or "
        "nucleus:P; implies --beam-size 1."
    ),
]
Seed = Annotated[
    int | None, typer.Option(help="Seed of --sampling: the same seed, the same output.")
]


@app.command()
@user_errors
def translate(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    input: InputFile = None,
    output: OutputFile = None,
    checkpoint: Checkpoint = None,
    beam_size: BeamSize = None,
    nbest: NBest = None,
    length_penalty: LengthPenalty = None,
    batch_size: BatchSize = None,
    max_tokens: MaxTokens = None,
    split_sentences: SplitSentences = None,
    device: Device = "auto",
    quantize: Quantize = None,
    use_shortlist: UseShortlist = False,
    glossary: GlossaryFile = None,
    term_mode: TermMode = None,
    constraints: ConstraintsFile = None,
    src_lang: SrcLang = None,
    tgt_lang: TgtLang = None,
    errors: InputErrors = "strict",
    alignments: Alignments = False,
    alignment_layer: AlignmentLayer = None,
    scores: Scores = False,
    word_scores: WordScores = False,
    tags: Tags = False,
    tag_format: TagFormat = "html",
    sampling: Sampling = None,
    seed: Seed = None,
) -> None:
    """Translate lines from stdin (or --input) to stdout (or --output), one line per line.

    Examples:\n
      echo "I have three cats." | seq2seq translate --run runs/demo\n
      seq2seq translate --run runs/demo --input in.en --output out.fr --beam-size 5\n
      seq2seq translate --run runs/demo --nbest 4 < in.en | head\n
      seq2seq translate --run runs/demo --glossary terms.tsv < in.en\n
      seq2seq translate --run runs/nllb --src-lang eng_Latn --tgt-lang fra_Latn < in.en\n
      seq2seq translate --run runs/demo --alignments --scores < in.en\n
      echo 'Click <b>Save</b> now.' | seq2seq translate --run runs/demo --tags
      seq2seq translate --run runs/fr-en --sampling topk:10 --seed 1 < mono.fr   # BT
    """
    from seq2seq.decode.streams import translate_files
    from seq2seq.decode.translator import load_translator

    # A closed pipe (`| head`) ends the process quietly, as it does any Unix filter.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if errors not in ("strict", "replace"):
        raise UserError(f"--errors must be strict or replace, not {errors!r}")
    if sampling is not None and sampling != "none" and beam_size is None:
        beam_size = 1  # sampling replaces search
    decode = decode_settings(
        run,
        beam_size=beam_size,
        nbest=nbest,
        length_penalty=length_penalty,
        batch_size=batch_size,
        max_tokens=max_tokens,
        split_sentences=split_sentences,
        quantize=quantize,
        sampling=sampling,
        seed=seed,
        term_mode=term_mode,
    )
    fields = _output_fields(
        alignments=alignments,
        layer=alignment_layer,
        scores=scores,
        word_scores=word_scores,
        tags=tag_format if tags else None,
        nbest=decode.nbest,
    )
    terms, given = _terminology(glossary, constraints)
    translator, _ = load_translator(
        run,
        checkpoint,
        device,
        decode=decode,
        glossary=terms,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        shortlist=use_shortlist,
    )
    translate_files(translator, input, output, errors=errors, constraints=given, fields=fields)


# Terminology (issue 32): what the glossary and constraints files hold is in seq2seq/glossary.py.
GlossaryFile = Annotated[
    Path | None,
    typer.Option(
        "--glossary",
        help="TSV of `source term<TAB>target term`: where a source term occurs (whole words, "
        "any case), its target term appears once in the translation (needs beam ≥ 2).",
    ),
]
TermMode = Annotated[
    str | None,
    typer.Option(
        help="How --glossary terms reach the translation: constrain (constrained beam search), "
        "annotate (the source annotated inline with them, plain beam: a run trained with "
        "data.augment.terms) or both (default: the run's decode.term_mode, constrain).",
    ),
]
ConstraintsFile = Annotated[
    Path | None,
    typer.Option(
        "--constraints",
        help="JSON lines, one list of target terms per input line, each kept once in its "
        "translation (such lines are not split into sentences).",
    ),
]


def _terminology(glossary: Path | None, constraints: Path | None):
    """The glossary and per-line constraints files read (or None), or one clear error."""
    from seq2seq.decode.glossary import read_constraints, read_glossary

    if glossary is not None and constraints is not None:
        raise UserError("give --glossary or --constraints, not both")
    return (
        read_glossary(glossary) if glossary is not None else None,
        read_constraints(constraints) if constraints is not None else None,
    )


def _output_fields(
    *, alignments: bool, layer: int | None, scores: bool, word_scores: bool, tags, nbest: int
):
    """translate's extra output, checked: not with --nbest (its lines are scored already)."""
    from seq2seq.decode.annotate import DEFAULT_LAYER, OutputFields

    if tags is not None and tags not in ("html", "xml"):
        raise UserError(f"--tag-format must be html or xml, not {tags!r}")
    fields = OutputFields(
        alignments=alignments,
        scores=scores,
        token_probs=word_scores,
        layer=DEFAULT_LAYER if layer is None else layer,
        tags=tags,
    )
    if nbest > 1 and not fields.plain:
        raise UserError("--alignments, --scores, --word-scores and --tags need --nbest 1")
    return fields


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
Threads = Annotated[
    int | None, typer.Option(min=1, help="CPU threads for decoding (default: all cores).")
]


@app.command()
@user_errors
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
    checkpoint: Checkpoint = None,
    beam_size: BeamSize = None,
    length_penalty: LengthPenalty = None,
    batch_size: BatchSize = None,
    max_tokens: MaxTokens = None,
    device: Device = "auto",
    quantize: Quantize = None,
    use_shortlist: UseShortlist = False,
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
    threads: Threads = None,
    glossary: GlossaryFile = None,
    term_mode: TermMode = None,
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
            "usage, DeepL glossaries), one SQLite file each; created on start. Default: "
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
    )
    settings = {"beam_size": beam_size, "length_penalty": length_penalty, "quantize": quantize}
    settings["term_mode"] = term_mode
    decode = decode_settings(run[0], batch_size=batch_size, max_tokens=max_tokens, **settings)
    run_server(
        run[0],
        cfg,
        checkpoint=checkpoint,
        device=device,
        decode=decode,
        threads=threads,
        quiet=bool(global_options(ctx).get("quiet")),
        glossary=glossary,
        shortlist=use_shortlist,
        extra_runs=run[1:],
    )


@app.command()
@user_errors
def average(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory with checkpoints.")],
    last: Annotated[int, typer.Option(min=1, help="How many of the newest checkpoints.")] = 5,
    output: Annotated[
        Path | None,
        typer.Option(help="Where to write (default RUN/checkpoints/average_lastN.safetensors)."),
    ] = None,
) -> None:
    """Average the weights of the last N checkpoints into one (the paper averages the last 5).

    Examples:\n
      seq2seq average --run runs/en-fr-base --last 5\n
      seq2seq evaluate -r runs/demo --checkpoint runs/demo/checkpoints/average_last5.safetensors
    """
    from seq2seq.run.checkpoint import average_last

    out, steps = average_last(run, last, output)
    print(f"averaged steps {', '.join(map(str, steps))} into {out}")


@app.command()
@user_errors
def plot(
    ctx: typer.Context,
    what: Annotated[
        str, typer.Argument(help="`curves` (of a run) or `positional` (§3.5 encodings).")
    ] = "curves",
    run: Annotated[
        Path | None, typer.Option("--run", "-r", help="Run directory with a metrics log.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="PNG to write (RUN/curves.png, positional.png)."),
    ] = None,
    d_model: Annotated[int, typer.Option(help="positional: model width.")] = 64,
    length: Annotated[int, typer.Option(help="positional: number of positions.")] = 50,
) -> None:
    """Draw training and validation curves (loss, BLEU, learning rate), or the sinusoidal
    positional encodings, as a PNG.

    Examples:\n
      seq2seq plot --run runs/demo\n
      seq2seq plot positional --d-model 64 --length 50 --output pe.png
    """
    from seq2seq.report.plot import plot_curves, plot_positions

    if what == "positional":
        print(plot_positions(output or Path("positional.png"), d_model, length))
    elif what == "curves":
        if run is None:
            raise UserError("plot curves needs --run DIR")
        print(plot_curves(run, output))
    else:
        raise UserError(f"plot draws `curves` or `positional`, not {what!r}")


@app.command()
@user_errors
def info(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Summarise a run: model shape, parameters, tokenizer, steps trained, best BLEU.

    Examples:\n
      seq2seq info --run runs/demo\n
      seq2seq info --run runs/demo --json | jq .best_bleu
    """
    import json

    from seq2seq.report.info import format_summary, run_summary

    summary = run_summary(run)
    print(json.dumps(summary) if as_json else format_summary(summary))


@app.command()
@user_errors
def export(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="Folder to write (must not exist or be empty).")],
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="ctranslate2, hf-marian, hf (M2M100/NLLB runs as such), or int8 (a run "
            "directory of int8 weights for CPU decoding).",
        ),
    ] = "ctranslate2",
    checkpoint: Checkpoint = None,
    quantization: Annotated[
        str | None,
        typer.Option(help="ctranslate2: store the weights as int8 (or int16, float16, …)."),
    ] = None,
) -> None:
    """Write a trained model for a fast inference runtime (CTranslate2), as a Hugging Face
    MarianMTModel folder with its tokenizer (hf-marian), or as a run directory of int8 weights
    that translate, evaluate and serve --run decode on CPU (int8).

    Examples:\n
      seq2seq export --run runs/demo --format ctranslate2 runs/demo-ct2\n
      seq2seq export --run runs/demo --quantization int8 runs/demo-ct2-int8\n
      seq2seq export --run runs/demo --format hf-marian runs/demo-hf\n
      seq2seq export --run runs/demo --format int8 runs/demo-int8\n
      python -c "import ctranslate2; t = ctranslate2.Translator('runs/demo-ct2'); ..."
    """
    if quantization is not None and format != "ctranslate2":
        raise UserError("--quantization applies to --format ctranslate2 only")
    if format == "ctranslate2":
        from seq2seq.interop.ctranslate2 import export_ctranslate2

        written = export_ctranslate2(run, out, checkpoint, quantization=quantization)
        weights = f"{quantization} weights; " if quantization else ""
        print(f"wrote {written} (CTranslate2; {weights}source pieces only: it adds </s> itself)")
    elif format == "hf-marian":
        from seq2seq.interop.hf_marian import export_hf_marian

        written = export_hf_marian(run, out, checkpoint)
        print(f"wrote {written} (MarianMTModel and MarianTokenizer files)")
    elif format == "hf":
        from seq2seq.interop.hf import export_hf

        written = export_hf(run, out, checkpoint)
        print(f"wrote {written} (a Hugging Face model folder with its tokenizer files)")
    elif format == "int8":
        from seq2seq.interop.int8_run import export_int8

        written = export_int8(run, out, checkpoint)
        print(f"wrote {written} (a run directory of int8 weights: --run it to decode on CPU)")
    else:
        raise UserError(
            f"unknown export format {format!r}; available: ctranslate2, hf-marian, hf, int8"
        )


@app.command()
@user_errors
def attention(
    ctx: typer.Context,
    sentence: Annotated[str, typer.Argument(help="Source sentence to translate.")],
    run: Annotated[Path, typer.Option("--run", "-r", help="Run directory of a trained model.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="PNG to write (attention.png).")
    ] = None,
    checkpoint: Checkpoint = None,
    device: Device = "auto",
    quantize: Quantize = None,
) -> None:
    """Greedy-translate a sentence and draw each decoder layer's cross-attention as a PNG.

    Example:\n
      seq2seq attention --run runs/demo "I have three cats." --output cats.png
    """
    from seq2seq.report.attention_plot import attention_of_translation, load_for_attention
    from seq2seq.report.plot import _pyplot, plot_attention

    _pyplot()  # fail before loading a model when matplotlib is missing
    quantize = decode_settings(run, quantize=quantize).quantize  # checked as translate does
    model, tokenizer, decode, _ = load_for_attention(run, checkpoint, device, quantize=quantize)
    src, out, weights = attention_of_translation(model, tokenizer, decode, sentence)
    log.info("translation: %s", tokenizer.tgt.decode_pieces(out[:-1]))
    print(plot_attention(src, out, weights, output or Path("attention.png")))


import_app = typer.Typer(
    name="import",
    help="Turn a pretrained model into a run directory.\n\n"
    "Example:\n\n"
    "  seq2seq import hf-marian Helsinki-NLP/opus-mt-en-fr runs/opus-mt-en-fr\n\n"
    "  seq2seq import hf ~/models/nllb-200-distilled-600M runs/nllb",
    no_args_is_help=True,
)
app.add_typer(import_app)


@import_app.command("hf")
@user_errors
def import_hf(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(help="A saved Hugging Face model folder, or a hub name (offline: cache)."),
    ],
    run: Annotated[Path, typer.Argument(help="Run directory to create (new or empty).")],
) -> None:
    """Import a Hugging Face translation model, recognised from its config.json: MarianMTModel
    (OPUS-MT) or M2M100ForConditionalGeneration (M2M100, NLLB-200, with their languages).

    Examples:\n
      seq2seq import hf ~/models/m2m100_418M runs/m2m100\n
      seq2seq import hf ~/models/nllb-200-distilled-600M runs/nllb
    """
    from seq2seq.interop.hf import import_hf as run_import

    cfg = run_import(source, run)
    m, t = cfg.model, cfg.tokenizer
    langs = f", {len(t.languages)} languages" if t.languages else ""
    print(
        f"imported {source} into {run}: {m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.activation}, vocabulary {t.vocab_size}{langs}"
    )


@import_app.command("hf-marian")
@user_errors
def import_hf_marian(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="A saved MarianMTModel folder, or a hub name (offline: from the cache)."
        ),
    ],
    run: Annotated[Path, typer.Argument(help="Run directory to create (new or empty).")],
) -> None:
    """Import a Hugging Face MarianMTModel (OPUS-MT) as a run directory that translate,
    evaluate, info, attention, average and export use, and train --init-from fine-tunes.

    Examples:\n
      seq2seq import hf-marian Helsinki-NLP/opus-mt-en-fr runs/opus-mt-en-fr\n
      seq2seq import hf-marian ~/models/opus-mt-en-de runs/en-de
    """
    from seq2seq.interop.hf_marian import import_hf_marian as run_import

    cfg = run_import(source, run)
    m, t = cfg.model, cfg.tokenizer
    print(
        f"imported {source} into {run}: {m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.activation}, vocabulary {t.vocab_size}"
        f"{'' if t.joint else ' (separate target vocabulary)'}"
    )


@app.command("demo-data")
@user_errors
def demo_data(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="Folder for the corpus files.")] = Path("data/demo"),
    train: Annotated[int, typer.Option(help="Training pairs.")] = 40000,
    valid: Annotated[int, typer.Option(help="Validation pairs.")] = 500,
    test: Annotated[int, typer.Option(help="Test pairs.")] = 1000,
    seed: Annotated[int, typer.Option(help="Generator seed.")] = 1234,
) -> None:
    """Write the built-in English→French demo corpus (numbers, dates, prices, counting).

    Example:\n
      seq2seq demo-data data/demo
    """
    from seq2seq.data.demo_corpus import write_demo_corpus

    counts = write_demo_corpus(out, n_train=train, n_valid=valid, n_test=test, seed=seed)
    print(f"wrote {', '.join(f'{n} {split}' for split, n in counts.items())} pairs to {out}")


def main() -> None:
    """Console-script entry point (also `python -m seq2seq`)."""
    # One program name either way, so help, usage lines and shell completion say `seq2seq`.
    app(prog_name="seq2seq")
