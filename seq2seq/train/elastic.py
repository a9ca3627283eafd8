"""What a training process does when the job around it fails or restarts (torchrun, elastic).

`torchrun --max-restarts N` restarts the whole worker group when one worker dies; it sets
TORCHELASTIC_RESTART_COUNT, so a restarted process knows to resume from the run directory's
latest checkpoint instead of refusing to overwrite it. When one process fails, the others see
their next collective break; they stop with one line that points at the real error instead of
each printing the transport's traceback. What rank 0 does alone (`on_main`) stops them all
when it fails.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import torch
import torch.distributed as dist

from seq2seq.errors import UserError
from seq2seq.train import distributed

log = logging.getLogger(__name__)

T = TypeVar("T")

# How gloo and NCCL report a collective whose peer process has gone (crashed, killed, or
# stopped by its agent); the exception types vary across torch versions, the texts less so.
_PEER_GONE = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote worker",
    "remote process exited",
    "communicator was aborted",
    "socket timeout",
)


def restart_count() -> int:
    """How many times this node's torchrun agent has restarted its workers (0 at first)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def resuming(resume: bool, info: distributed.Dist, device: torch.device) -> bool:
    """Resume when asked to, or when torchrun restarts the group after a failure: the run
    directory is this job's own, and its latest checkpoint is where the group left off.

    The restart count is the agent's own: a node whose workers were healthy restarts them with
    its count unchanged (pytorch#108158), so the processes agree on it (one collective) rather
    than half resuming and half refusing the run directory.
    """
    (restarts,) = distributed.all_sum([float(restart_count())], info, device)
    if restarts and not resume and info.is_main:
        log.info("torchrun restarted the workers: resuming from the run's latest checkpoint")
    return resume or restarts > 0


def warn_if_restarts_share_the_store() -> None:
    """With --max-restarts, torchrun's default of sharing its rendezvous store with the workers
    lets a restarted group read the last attempt's addresses and fail to connect
    (pytorch#135712); `python -m seq2seq.launch` turns the sharing off."""
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if restarts and shared and restart_count() == 0:
        log.warning(
            "torchrun --max-restarts %d with a shared rendezvous store: a restart may fail to "
            "connect (pytorch#135712); launch with `python -m seq2seq.launch` or set "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            restarts,
        )


def peer_gone(error: BaseException) -> bool:
    """Whether a collective failed because another process of the job stopped."""
    if isinstance(error, getattr(dist, "DistNetworkError", ())):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(p in text for p in _PEER_GONE)


@contextmanager
def one_error_per_job(info: distributed.Dist) -> Iterator[None]:
    """Let the process that failed report why; the others, whose collectives broke because it
    stopped, say so in one line (a UserError) rather than with the transport's traceback."""
    try:
        yield
    except Exception as e:
        if not info.enabled or not peer_gone(e):
            raise
        # gloo prefixes its source location: "[…/pair.cc:553] Connection closed by peer …".
        why = re.sub(r"^\[[^\]]*\]\s*", "", str(e).splitlines()[0]).split(". ")[0]
        raise UserError(
            f"rank {info.rank}: stopping, another process of the job stopped ({why[:120]}); "
            "its error is reported by that process"
        ) from None


def on_main(job: Callable[[], T], info: distributed.Dist, *, long: bool = False) -> T | None:
    """Rank 0's result of `job`, run on rank 0 alone; a UserError there (a full disk) stops every
    process, which would otherwise wait for rank 0 at the next collective forever. A `long` job
    is waited for up to distributed.LONG_WAIT rather than the process group's timeout."""
    # The ranks wait in a barrier of a gloo group made for it, rather than all running the job
    # (the final choice): each GPU would decode the same candidates for the result rank 0 alone
    # writes, and nothing checks that they would choose alike.
    group = distributed.new_waiting_group(info) if long else None
    result = failure = None
    if info.is_main:
        try:
            result = job()
        except UserError as e:
            failure = e
    distributed.wait_in(group, info)
    result, message = distributed.broadcast(
        (result, None if failure is None else str(failure)), info
    )
    if failure is not None:
        raise failure
    if message is not None:  # said once, by rank 0; the others say why they stop
        raise UserError(
            f"rank {info.rank}: stopping with rank 0, which failed (its error is reported by "
            "rank 0)"
        )
    return result
