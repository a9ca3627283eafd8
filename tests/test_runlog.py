"""The metrics log read back and cut back on resume."""

from __future__ import annotations

import json

from seq2seq.run.runlog import METRICS_NAME, MetricsLog, read_records

LINES = [
    {"step": 1, "split": "train", "loss": 2.5, "epoch": 0, "batch_in_epoch": 1},
    {"step": 2, "split": "valid", "bleu": float("nan"), "note": "é"},
    {"step": 2, "split": "train", "loss": 2.0, "epoch": 0, "batch_in_epoch": 2},
    {"step": 3, "split": "train", "loss": 1.5, "epoch": 0, "batch_in_epoch": 3},
]


def _log(tmp_path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in LINES[:2]) + '{"step": 2, "spl\n'
    text += "".join(json.dumps(r) + "\n" for r in LINES[2:])
    (tmp_path / METRICS_NAME).write_text(text, encoding="utf-8")


def test_records_leave_out_a_line_cut_short_and_a_missing_log_has_none(tmp_path):
    assert read_records(tmp_path) == []
    _log(tmp_path)
    assert [(r["step"], r["split"]) for r in read_records(tmp_path)] == [
        (1, "train"), (2, "valid"), (2, "train"), (3, "train")
    ]  # fmt: skip


def test_truncate_keeps_the_lines_up_to_the_checkpoint_as_they_were_written(tmp_path):
    _log(tmp_path)
    MetricsLog(tmp_path, tensorboard=False).truncate((2, 0, 2))
    kept = (tmp_path / METRICS_NAME).read_text(encoding="utf-8")
    assert kept == "".join(json.dumps(r) + "\n" for r in LINES[:3])
