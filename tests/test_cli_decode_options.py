"""The decode options evaluate, translate and serve share: declared once, listed in the place of
a command's DecodeOptions parameter, handed to the command as one object."""

from __future__ import annotations

from dataclasses import fields

import typer
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.cli.decode_options import DECODE_DEFAULTS, DecodeOptions, decode_options


def _probe(omit: tuple[str, ...] = ()) -> tuple[typer.Typer, list]:
    """A one-command app whose command records what it was given."""
    probe, seen = typer.Typer(add_completion=False), []

    @probe.command()
    @decode_options(omit=omit)
    def show(first: int = 1, options: DecodeOptions = DECODE_DEFAULTS, last: str = "x") -> None:
        seen.append((first, options, last))

    return probe, seen


def test_the_shared_options_arrive_as_one_decode_options():
    probe, seen = _probe()
    args = ["--first", "2", "--beam-size", "5", "--shortlist", "--src-lang", "en", "--last", "y"]
    result = CliRunner().invoke(probe, args)
    assert result.exit_code == 0, result.output
    [(first, options, last)] = seen
    assert (first, last) == (2, "y")
    assert options == DecodeOptions(beam_size=5, use_shortlist=True, src_lang="en")


def test_the_shared_options_stand_where_the_parameter_stands():
    probe, _ = _probe()
    command = typer.main.get_command(probe)
    names = [p.name for p in command.params]
    assert names == ["first", *(f.name for f in fields(DecodeOptions)), "last"]


def test_an_omitted_option_is_not_offered_and_keeps_its_default():
    probe, seen = _probe(omit=("src_lang", "tgt_lang"))
    result = CliRunner().invoke(probe, ["--src-lang", "en"])
    assert result.exit_code == 2 and "No such option: --src-lang" in result.output
    assert CliRunner().invoke(probe, []).exit_code == 0
    assert seen[-1][1] == DECODE_DEFAULTS


def test_evaluate_translate_and_serve_offer_the_shared_options():
    runner = CliRunner()
    for command in ("evaluate", "translate", "serve"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        for option in ("--checkpoint", "--beam-size", "--length-penalty", "--shortlist"):
            assert option in result.output, (command, option)
    translate_help = runner.invoke(app, ["translate", "--help"], env={"COLUMNS": "200"}).output
    assert "--split-sentences" in translate_help and "--constraints" in translate_help
