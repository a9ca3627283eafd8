"""The process's memory while decoding: freed buffers are reused instead of mapped afresh."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Allocates a 64 MB buffer, frees it, allocates it again: the page faults of the second fill.
REFILL = """
import resource, sys, torch
from seq2seq.runtime import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults_of_a_fill():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(16 * 2**20).fill_(1.0)  # freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_a_fill()
print(faults_of_a_fill())
"""


def refill_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", REFILL, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_freed_buffer_is_filled_again_without_faulting_its_pages_in():
    kept = refill_faults("keep")
    assert kept < 100
    # glibc's default maps the 64 MB afresh: 16,384 pages fault again (fewer with huge pages)
    assert refill_faults("default") > kept
