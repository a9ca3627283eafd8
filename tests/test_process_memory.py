"""The process's memory while decoding: freed buffers are reused instead of mapped afresh."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Twelve decoder-like batches: six cache buffers of 20-40 MB each, lengths varying from batch to
# batch, freed when the batch ends. Prints the page faults of batches 3-12 (after warm-up).
# One thread: the OpenMP pool's own allocations would otherwise land in the heap at random.
BATCHES = """
import resource, sys, torch
from seq2seq.runtime import keep_freed_memory
torch.set_num_threads(1)
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults_of_a_batch(k):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    length = 5 + (k * 7) % 6
    cache = [torch.empty(length * 2**20).fill_(1.0) for _ in range(6)]
    torch.cat([c[:1000] for c in cache])
    del cache
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults = [faults_of_a_batch(k) for k in range(12)]
print(sum(faults[2:]))
"""


def batch_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", BATCHES, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_batch_buffers_are_mostly_refilled_without_faulting_their_pages_in():
    # glibc's default maps blocks over 32 MB afresh and trims the heap's free top, so each batch
    # faults its 120-240 MB in again (~310K-390K pages here). Kept memory reuses most of it; an
    # exact fit is not promised, as memalign's padding and small chunks between the blocks split
    # the heap (~25K-33K pages here).
    kept, default = batch_faults("keep"), batch_faults("default")
    assert kept * 4 < default
