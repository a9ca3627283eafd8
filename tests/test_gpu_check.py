"""`make gpu-check` on a machine without CUDA: one line, exit 0, nothing measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_without_cuda_says_so_in_one_line_and_exits_0(tmp_path):
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1 and "no CUDA device" in proc.stdout
    assert not (tmp_path / "out").exists()
