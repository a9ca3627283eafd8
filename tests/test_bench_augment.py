"""scripts/bench_augment.py: augmented copies of a test set made by the augment module's own
functions, a run × set table of BLEU, and runs still being written refused before decoding."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.factories import untrained_run
from tests.runs import cli, write_parallel

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bench_augment.py"
_SPEC = importlib.util.spec_from_file_location("bench_augment", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

SRC = ["Open the file.", "Click Save", "The window is closed!"]
REF = ["Ouvrez le fichier.", "Cliquez sur Enregistrer", "La fenêtre est fermée !"]


def test_each_copy_changes_the_pairs_as_its_modifier_does():
    sets = bench.augmented_sets(SRC, REF, seed=3)
    assert list(sets) == list(bench.SETS)
    assert sets["plain"] == (SRC, REF)
    assert sets["upper"] == ([s.upper() for s in SRC], [r.upper() for r in REF])
    assert sets["title"][0] == ["Open The File.", "Click Save", "The Window Is Closed!"]
    # Only pairs ending in punctuation on both sides lose it.
    assert sets["no_punct"] == (
        ["Open the file", "Click Save", "The window is closed"],
        ["Ouvrez le fichier", "Cliquez sur Enregistrer", "La fenêtre est fermée"],
    )
    typos, refs = sets["typos"]
    assert refs == REF and all(t != s for t, s in zip(typos, SRC))
    assert [len(t.split()) for t in typos] == [len(s.split()) for s in SRC]
    tagged_src, tagged_ref = sets["tags"]
    assert all(t.startswith("<") and t.endswith(">") and s in t for t, s in zip(tagged_src, SRC))
    assert all(r in t for t, r in zip(tagged_ref, REF))
    assert bench.augmented_sets(SRC, REF, seed=3) == sets  # seeded


def test_aligned_words_carry_the_tag_when_alignments_are_given():
    sets = bench.augmented_sets(["Open the file."], ["Ouvrez le fichier."], [[(2, 2)]], seed=3)
    (src,), (ref,) = sets["tags"]
    assert src.split()[:2] == ["Open", "the"] and ref.split()[:2] == ["Ouvrez", "le"]
    assert src.split()[2].startswith("<") and "file." in src and "fichier." in ref


def test_a_run_a_live_process_names_is_refused_before_anything_is_written(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("run_dir: run\n")
    src, ref = write_parallel(tmp_path, "test", list(zip(SRC, REF)))
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--set", "run_dir=run"],
        cwd=tmp_path,
    )
    try:
        _wait_for_exec(trainer.pid, b"time.sleep")
        args = ["--run", str(run), "--src", str(src), "--ref", str(ref), "--skip", "0"]
        assert bench.main([*args, "--out", str(tmp_path / "out")]) == 2
    finally:
        trainer.kill()
        trainer.wait()
    err = capsys.readouterr().err
    assert f"still being written: process {trainer.pid} names it" in err
    assert not (tmp_path / "out").exists()
    assert bench.main(args) == 2  # the process gone, there is still no checkpoint
    assert "has no checkpoint yet" in capsys.readouterr().err


def _wait_for_exec(pid: int, marker: bytes) -> None:
    # Until the child has exec'd, its command line is still pytest's.
    cmdline = Path(f"/proc/{pid}/cmdline")
    deadline = time.monotonic() + 30
    while marker not in cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.slow
def test_the_table_has_a_row_per_run_and_a_column_per_set(tmp_path, demo_pairs, capsys):
    (tmp_path / "a").mkdir()
    run = untrained_run(tmp_path / "a", demo_pairs[:300])
    other = Path(shutil.copytree(run, tmp_path / "other"))
    src, ref = write_parallel(tmp_path, "valid", demo_pairs[300:310])
    out = tmp_path / "out"
    args = ["--src", src, "--ref", ref, "--skip", 2, "--out", out, "--run", run, "--run", other]
    assert bench.main([str(a) for a in args]) == 0
    table = capsys.readouterr().out.splitlines()[1:]
    assert len(table) == 2 + 2  # header, rule, one row per run
    assert [len(line.split("|")) - 2 for line in table] == [2 + len(bench.SETS)] * 4
    assert table[2].startswith(f"| {run} |") and table[3].startswith(f"| {other} |")
    assert table[0].split("|")[3].strip() == "upper (8)"
    plain = (out / "plain.src").read_text().splitlines()
    assert plain == [s for s, _ in demo_pairs[302:310]]
    upper = (out / "upper.src").read_text().splitlines()
    assert upper == [s.upper() for s in plain] and upper != plain
    for name in bench.SETS:
        assert len((out / f"run.{name}.hyp").read_text().splitlines()) == 8
        assert (out / f"other.{name}.hyp").is_file()
    # The plain column is what `seq2seq evaluate` gives on the same files.
    report = tmp_path / "evaluate.json"
    cli("--quiet", "evaluate", "--run", other, "--src", out / "plain.src", "--ref",
        out / "plain.ref", "--output-dir", tmp_path / "eval", "--json", report)  # fmt: skip
    evaluated = json.loads(report.read_text())
    assert evaluated["hypotheses"] == (out / "other.plain.hyp").read_text().splitlines()
    assert table[3].split("|")[2].strip() == f"{evaluated['bleu']:.2f}"
