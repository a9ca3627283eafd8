"""`seq2seq translate`: lines in, translations out (decode/streams.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from seq2seq.cli.base import TrainedRun, user_errors
from seq2seq.cli.decode_options import DECODE_DEFAULTS, DecodeOptions, decode_options
from seq2seq.errors import UserError

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


@user_errors
@decode_options()
def translate(
    ctx: typer.Context,
    run: TrainedRun,
    input: InputFile = None,
    output: OutputFile = None,
    nbest: NBest = None,
    options: DecodeOptions = DECODE_DEFAULTS,  # the shared ones: cli/decode_options.py
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
    beam_size = options.beam_size
    if sampling is not None and sampling != "none" and beam_size is None:
        beam_size = 1  # sampling replaces search
    decode = options.settings(run, beam_size=beam_size, nbest=nbest, sampling=sampling, seed=seed)
    fields = _output_fields(
        alignments=alignments,
        layer=alignment_layer,
        scores=scores,
        word_scores=word_scores,
        tags=tag_format if tags else None,
        nbest=decode.nbest,
    )
    terms, given = options.terms()
    translator, _ = load_translator(
        run,
        options.checkpoint,
        options.device,
        decode=decode,
        glossary=terms,
        src_lang=options.src_lang,
        tgt_lang=options.tgt_lang,
        shortlist=options.use_shortlist,
    )
    translate_files(translator, input, output, errors=errors, constraints=given, fields=fields)


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
