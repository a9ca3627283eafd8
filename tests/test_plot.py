"""Training curves as a PNG, and TensorBoard scalars beside the JSON-lines log."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from seq2seq.errors import UserError
from seq2seq.report.plot import plot_curves


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return width, height


@pytest.fixture
def run_with_metrics(tmp_path):
    lines = [
        {"step": s, "split": "train", "loss": 8 / s, "lr": 1e-3 * min(s / 10, 1)}
        for s in range(1, 41)
    ]
    lines += [{"step": s, "split": "valid", "loss": 9 / s, "bleu": 2.0 * s} for s in (10, 20, 40)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


def test_curves_are_written_as_a_png_of_the_expected_size(run_with_metrics):
    out = plot_curves(run_with_metrics)
    assert out == run_with_metrics / "curves.png"
    assert _png_size(out) == (1500, 420)


def test_plot_without_matplotlib_says_how_to_install_it(run_with_metrics, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(UserError, match=r"pip install 'seq2seq\[plot\]'"):
        plot_curves(run_with_metrics)


def test_a_folder_without_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no metrics.jsonl"):
        plot_curves(tmp_path)
