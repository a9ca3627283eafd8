"""Device and precision, decided once at the top of a job; the process's mapped memory."""

from __future__ import annotations

import ctypes
import os
import sys

import torch

from seq2seq.errors import UserError


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present, else CPU; an unavailable device is the user's error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r} (use auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available")
    return device


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for a precision setting, or None for plain float32 (or TF32)."""
    if precision in ("fp32", "tf32") or (precision == "auto" and device.type != "cuda"):
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device.type != "cuda":
        raise UserError("fp16 autocast needs CUDA; use bf16 or fp32 on CPU")
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def fast_math(device: torch.device, precision: str) -> None:
    """TF32 tensor cores for float32 matmuls on CUDA only when `precision` asks for them:
    `tf32`, or autocast (`auto`, `bf16`, `fp16`) for what stays outside it; `fp32` is exact."""
    if device.type == "cuda":
        allow = precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow


def set_threads(threads: int | None) -> None:
    """Limit torch's CPU threads when asked to."""
    if threads:
        torch.set_num_threads(threads)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Let freed memory stay in the heap for the next allocation (glibc only; False elsewhere).

    By default glibc maps each large block afresh (and a block over 32 MB always) and unmaps it
    when freed, so a decoder's per-batch buffers, the self-attention cache alone tens of MB at
    beam 4, fault in and zero every page again each batch: 6% of int8 beam-4 time on one core.
    A caching allocator (CTranslate2's, Marian's arena) reuses them; this makes glibc do so,
    mostly: memalign's padding and small chunks between the blocks fragment the heap, so it can
    hold more than the busiest batch (enfr-small int8, beam 4: peak 171 → 212 MB);
    `malloc_trim` still hands free pages back.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_DONTNEED = 4


def shared_resident_bytes() -> int:
    """File-backed (and shared) resident memory of this process; 0 where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[2]) * _PAGE_SIZE
    except OSError:
        return 0


def release_arrow_pages() -> int:
    """Unmap this process's resident pages of read-only memory-mapped Arrow files.

    Random access over a memory-mapped corpus faults its pages into the process, so resident
    memory would grow with the corpus. MADV_DONTNEED on a read-only file mapping only drops the
    process's references: the pages stay in the page cache (shared with other ranks) and the
    next read maps them back without touching the disk. Linux only; returns the bytes released.
    """
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    released = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or "w" in fields[1] or not fields[5].rstrip().endswith(".arrow"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if (
                libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)
                == 0
            ):
                released += end - start
    return released
