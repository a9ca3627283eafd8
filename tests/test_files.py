"""Atomic writes: a failure part-way leaves the previous file as it was."""

from __future__ import annotations

import pytest

from seq2seq.files import atomic_write, atomic_write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "report.json"
    atomic_write_text(path, "old\n")

    def half_then_crash(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("new, but only ha")
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, half_then_crash)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_successful_write_replaces_the_file(tmp_path):
    path = tmp_path / "a.txt"
    atomic_write_text(path, "one\n")
    atomic_write_text(path, "two\n")
    assert path.read_text() == "two\n"
