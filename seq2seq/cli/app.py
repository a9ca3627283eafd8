"""The `seq2seq` command: the app, with each command registered from its own module.

A command is one function in a module of its own here (cli/base.py says why its job is
imported inside it); this file only lists them, in the order `seq2seq --help` shows them.
"""

from __future__ import annotations

from seq2seq.cli import (
    attention,
    average,
    clean,
    demo_data,
    distill,
    evaluate,
    export,
    import_model,
    info,
    plot,
    score,
    serve,
    shortlist,
    train,
    translate,
    translate_file,
)
from seq2seq.cli.base import app
from seq2seq.cli.train import tokens_per_update  # noqa: F401  (tests/test_multinode.py's)

COMMANDS = (
    clean.clean,
    distill.distill,
    score.score,
    shortlist.shortlist,
    train.train,
    evaluate.evaluate,
    translate.translate,
    translate_file.translate_file,
    serve.serve,
    average.average,
    plot.plot,
    info.info,
    export.export,
    attention.attention,
    demo_data.demo_data,
)
for command in COMMANDS:
    app.command()(command)
app.add_typer(import_model.import_app)


def main() -> None:
    """Console-script entry point (also `python -m seq2seq`)."""
    # One program name either way, so help, usage lines and shell completion say `seq2seq`.
    app(prog_name="seq2seq")
