"""What a user sees for each kind of bad input: one `error:` line, an exit code, no traceback.

Each row of the table is a case a fairseq or OpenNMT-py user has met as a stack trace: the command
line, what is wrong, the exit code and the words the message must contain. Config errors exit 2,
other user errors 1; `seq2seq --debug …` shows the traceback for any of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.run.checkpoint import save_checkpoint
from tests.factories import tiny_model, tiny_shape
from tests.runs import copy_run


@pytest.fixture
def run_dir(trained_tiny_run) -> Path:
    """A real (two-step) run directory: config, tokenizer, checkpoints."""
    return trained_tiny_run


@dataclass
class Case:
    """A bad input: `make(tmp, run_dir, tiny_config)` writes it and returns (argv, stdin)."""

    make: Callable[[Path, Path | None, Callable[..., Path]], tuple[list[str], bytes | None]]
    exit_code: int
    message: tuple[str, ...]  # fragments of the one error line (formatted with tmp=…)
    needs_run: bool = False  # reads or copies the trained run (else run_dir is None)


def _train(config: Path) -> tuple[list[str], None]:
    return ["train", "--config", str(config)], None


def _yaml(tmp: Path, text: str) -> Path:
    config = tmp / "bad.yaml"
    config.write_text(text)
    return config


def _raw_pair(tmp: Path, name: str, src: bytes, tgt: bytes) -> dict:
    """Line-aligned files with these exact bytes, as a `data:` section."""
    (tmp / f"{name}.en").write_bytes(src)
    (tmp / f"{name}.fr").write_bytes(tgt)
    return {"train": {"src": f"{tmp / name}.en", "tgt": f"{tmp / name}.fr"}}


def _tsv(tmp: Path, content: bytes) -> dict:
    (tmp / "c.tsv").write_bytes(content)
    return {"train": {"tsv": str(tmp / "c.tsv")}}


def _best_weights(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("step_*.safetensors"))[-1]


def _other_shape_checkpoint(tmp: Path, run: Path, _) -> tuple[list[str], bytes]:
    other = tiny_model(tiny_shape(encoder_layers=1, decoder_layers=1), 90)
    ckpt = save_checkpoint(tmp, 1, other, {})
    return ["translate", "--run", str(run), "--checkpoint", str(ckpt.weights)], b"hello\n"


def _truncated_checkpoint(tmp: Path, run: Path, _) -> tuple[list[str], bytes]:
    copy = copy_run(run, tmp)
    for weights in (copy / "checkpoints").glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[:1000])
    return ["translate", "--run", str(copy)], b"hello\n"


def _no_tokenizer(tmp: Path, run: Path, _) -> tuple[list[str], bytes]:
    copy = copy_run(run, tmp)
    (copy / "tokenizer" / "spm.model").unlink()
    return ["translate", "--run", str(copy)], b"hello\n"


def _nan_checkpoint(tmp: Path, run: Path, _) -> tuple[list[str], bytes]:
    copy = copy_run(run, tmp)
    for weights in (copy / "checkpoints").glob("*.safetensors"):
        tensors = load_file(str(weights))
        tensors = {
            k: torch.full_like(v, math.nan) if v.is_floating_point() else v
            for k, v in tensors.items()
        }
        save_file(tensors, str(weights))
    return ["translate", "--run", str(copy)], b"hello\n\nworld\n"


CASES = {
    "malformed YAML": Case(
        lambda t, r, config: _train(_yaml(t, "data:\n  train: {src: a.en\nmodel: [\n")),
        2,
        ("bad.yaml", "line"),
    ),
    "unknown key": Case(
        lambda t, r, config: _train(_yaml(t, "model:\n  d_modle: 64\n")),
        2,
        ("model.d_modle: unknown key",),
    ),
    "wrong type": Case(
        lambda t, r, config: _train(_yaml(t, "model:\n  d_model: wide\n")),
        2,
        ("model.d_model", "wide"),
    ),
    "zero size": Case(
        lambda t, r, config: _train(_yaml(t, "train:\n  max_tokens: 0\n")), 2, ("train.max_tokens",)
    ),
    "negative size": Case(
        lambda t, r, config: _train(_yaml(t, "model:\n  ffn_dim: -4\n")), 2, ("model.ffn_dim",)
    ),
    "d_model not divisible by heads": Case(
        lambda t, r, config: _train(_yaml(t, "model:\n  d_model: 30\n  heads: 4\n")),
        2,
        ("divisible", "heads"),
    ),
    "missing corpus file": Case(
        lambda t, r, config: _train(
            config(t, data={"train": {"src": "nope.en", "tgt": "nope.fr"}})
        ),
        2,
        ("data.train.src: file not found: nope.en",),
    ),
    "parallel files of different lengths": Case(
        lambda t, r, config: _train(
            config(t, data=_raw_pair(t, "a", b"one\ntwo\nthree\n", b"un\ndeux\n"))
        ),
        1,
        ("a.en", "a.fr", "3", "2"),
    ),
    "TSV line with the wrong number of fields": Case(
        lambda t, r, config: _train(config(t, data=_tsv(t, b"a\tb\nc\td\te\n"))),
        1,
        ("c.tsv", "line 2"),
    ),
    "invalid UTF-8 in a corpus": Case(
        lambda t, r, config: _train(
            config(t, data=_raw_pair(t, "u", b"fine\n\xc3\x28 bad\n", b"ok\nmal\n"))
        ),
        1,
        ("u.en", "line 2", "invalid UTF-8"),
    ),
    "empty training set after filtering": Case(
        lambda t, r, config: _train(config(t, pairs=[("", "x"), ("y", "   ")])),
        1,
        ("training set is empty after filtering", "empty 2"),
    ),
    "invalid UTF-8 on stdin": Case(
        lambda t, r, config: (["translate", "--run", str(r)], b"good line\n\xff\xfe\n"),
        1,
        ("stdin, line 2: invalid UTF-8", "--errors replace"),
        needs_run=True,
    ),
    "a run directory that is not one": Case(
        lambda t, r, config: (["translate", "--run", str(t)], b"hello\n"),
        1,
        ("is not a run directory",),
    ),
    "a checkpoint from another vocabulary or shape": Case(
        _other_shape_checkpoint,
        1,
        ("does not fit this model", "another vocabulary or shape"),
        needs_run=True,
    ),
    "a truncated checkpoint": Case(
        _truncated_checkpoint,
        1,
        ("not a readable checkpoint", "truncated or corrupt"),
        needs_run=True,
    ),
    "a checkpoint whose weights are NaN": Case(
        _nan_checkpoint, 1, ("not finite", "input line(s) 1, 3", "damaged"), needs_run=True
    ),
    "a tokenizer model missing from the run directory": Case(
        _no_tokenizer, 1, ("tokenizer model missing", "spm.model"), needs_run=True
    ),
}


def _invoke(argv: list[str], stdin: bytes | None, debug: bool = False):
    options = ["--debug"] if debug else []
    return CliRunner().invoke(app, [*options, *argv], input=stdin, catch_exceptions=True)


@pytest.mark.parametrize(
    "name",
    # Cases of a trained run decode it: slow, as every test that does.
    [pytest.param(n, marks=pytest.mark.slow) if c.needs_run else n for n, c in CASES.items()],
)
def test_bad_input_gets_one_clear_message_and_an_exit_code(name, tmp_path, tiny_config, request):
    case = CASES[name]
    run_dir = request.getfixturevalue("run_dir") if case.needs_run else None
    argv, stdin = case.make(tmp_path, run_dir, tiny_config)
    result = _invoke(argv, stdin)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == case.exit_code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no uncaught exception
    assert len(errors) == 1, result.stderr
    message = result.stderr[result.stderr.index("error: ") :]
    for fragment in case.message:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert "Traceback" not in result.output


def test_debug_shows_the_traceback_behind_the_message(tmp_path):
    result = _invoke(["translate", "--run", str(tmp_path)], b"hello\n", debug=True)
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "is not a run directory" in result.stderr


@pytest.mark.slow
def test_errors_replace_translates_invalid_utf8_instead_of_stopping(run_dir):
    result = _invoke(
        ["translate", "--run", str(run_dir), "--errors", "replace"], b"good line\n\xff\xfe\nend\n"
    )
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3
