"""Dynamic batching: requests that arrive close together are decoded together.

Callers on any thread `submit` their lines and get a `concurrent.futures.Future`; one worker
thread waits a short window after the first waiting request, takes requests in arrival order up
to a token budget, groups them by decode settings (one search call cannot mix beam sizes) and by
the group the caller names (serve keeps constrained and markup work apart from plain work),
hands each group to the decode function in one call, and gives every caller exactly its own results
back, in its order. Nothing here knows about HTTP or torch, so it is tested on its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from seq2seq.config import DecodeConfig

log = logging.getLogger(__name__)

Hypotheses = list[tuple[str, float]]  # (text, score) pairs of one line, best first


@dataclass(frozen=True)
class BatchLimits:
    """How long to wait for company and how much one batch may hold."""

    window_s: float = 0.005  # after the first waiting request
    max_tokens: int = 8192  # source tokens of the requests in one batch
    max_requests: int = 256
    max_queue_lines: int = 2048  # sentences waiting; beyond this `submit` refuses
    # (Source + target term tokens) × beam size of the requests in one batch: what bounds its
    # compute. A request over it on its own is refused.
    max_beam_tokens: int = 131_072


@dataclass
class BatchReport:
    """What one decoded group was: for metrics."""

    requests: int
    lines: int
    tokens: int
    seconds: float
    options: DecodeConfig
    # For each request abandoned while the batch decoded: seconds the decoding went on after.
    abandoned_s: tuple[float, ...] = ()
    group: str = ""  # the callers' group (serve: "", "terms" or "markup")


class QueueFull(Exception):
    """The queue holds as many sentences as it may; the caller should come back later."""

    def __init__(self, queued_lines: int, retry_after_s: float):
        super().__init__(f"the queue is full ({queued_lines} sentences waiting)")
        self.queued_lines, self.retry_after_s = queued_lines, retry_after_s


class OverBudget(Exception):
    """A request whose (source + term tokens) × beam size alone exceed a batch's budget."""

    def __init__(self, cost: int, budget: int, terms: int = 0):
        counted = "(source + term tokens)" if terms else "source tokens"
        super().__init__(
            f"{counted} × beam size is {cost}; at most {budget} a batch (and so a request)"
        )
        self.cost, self.budget = cost, budget


class Stopped(Exception):
    """The batcher no longer takes requests (the server is shutting down)."""


class JobFuture(Future):
    """A request's future; `abandon()` when nobody waits for it any more."""

    abandoned = False
    abandoned_at: float | None = None  # time.perf_counter() when abandoned while running

    def abandon(self) -> None:
        """Cancel it if still queued, else let its decoding stop at the next poll."""
        if not self.cancel():
            self.abandoned_at = time.perf_counter()
            self.abandoned = True


@dataclass(eq=False)  # jobs are told apart by identity (queue removal)
class _Job:
    lines: list  # what the decode function takes: text, or lines prepared for it
    options: DecodeConfig  # requests decoded together share these
    tokens: int
    segments: int  # sentences, what the queue's bound and the decoding speed count
    cost: int  # (tokens + term tokens) × beam size, what the batch's compute budget counts
    group: str = ""  # jobs of different groups never share a decode call
    future: JobFuture = field(default_factory=JobFuture)
    arrived: float = field(default_factory=time.monotonic)


# lines, their options, and `wanted(i)`: whether line i's caller still waits (a decode function
# may stop early on the lines it does not and give them any result).
Decode = Callable[[list, DecodeConfig, Callable[[int], bool]], list[Hypotheses]]


class Batcher:
    """A queue of translation requests drained by one worker thread in dynamic batches."""

    def __init__(
        self,
        decode: Decode,
        limits: BatchLimits = BatchLimits(),
        on_batch: Callable[[BatchReport], None] | None = None,
    ):
        self._decode, self.limits, self._on_batch = decode, limits, on_batch
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._queued_lines = self._queued_tokens = 0
        self._stopping = False
        self._busy = False
        self._segments_per_s = 0.0  # smoothed decoding speed, for Retry-After
        self._thread = threading.Thread(target=self._run, name="seq2seq-decoder", daemon=True)

    def start(self) -> Batcher:
        """Start the worker thread."""
        self._thread.start()
        return self

    @property
    def queued_lines(self) -> int:
        """Sentences waiting for a batch (not those being decoded)."""
        return self._queued_lines

    @property
    def queued_requests(self) -> int:
        """Requests waiting for a batch."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether a batch is being decoded right now."""
        return self._busy

    def submit(
        self,
        lines: list,
        options: DecodeConfig,
        tokens: int,
        *,
        segments: int | None = None,
        terms: int = 0,
        group: str = "",
    ) -> JobFuture:
        """Queue lines for decoding; the future's result is one hypothesis list per line.

        `segments`: the sentences they hold once split (default: one a line), which is what
        the queue's bound counts; `terms`: the target-term tokens they must hold, which the
        compute budget counts with `tokens`; `group`: requests of different groups are never
        decoded in one call."""
        if not lines:
            raise ValueError("nothing to translate")
        segments = len(lines) if segments is None else segments
        cost = (tokens + terms) * options.beam_size
        if cost > self.limits.max_beam_tokens:
            raise OverBudget(cost, self.limits.max_beam_tokens, terms)
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            if self._queue and self._queued_lines + segments > self.limits.max_queue_lines:
                raise QueueFull(self._queued_lines, self._retry_after())
            job = _Job(lines, options, tokens, segments, cost, group)
            self._queue.append(job)
            self._queued_lines += segments
            self._queued_tokens += tokens
            self._cond.notify()
        job.future.add_done_callback(lambda future: self._forget(job))
        return job.future

    def _forget(self, job: _Job) -> None:
        # A cancelled request leaves the queue at once: waiting for the worker to reach it
        # would let clients that hang up fill the queue's bound (503 for everyone) with work
        # nobody will decode.
        if not job.future.cancelled():
            return
        with self._cond:
            try:
                self._queue.remove(job)
            except ValueError:
                return  # taken already, and counted out there
            self._queued_lines -= job.segments
            self._queued_tokens -= job.tokens

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new requests, decode those already queued, and end the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _retry_after(self) -> float:
        # Seconds until the queue as it is now would be drained at the recent speed.
        if self._segments_per_s <= 0:
            return 1.0
        return max(1.0, self._queued_lines / self._segments_per_s)

    def _full(self) -> bool:
        return (
            self._queued_tokens >= self.limits.max_tokens
            or len(self._queue) >= self.limits.max_requests
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return  # stopping, and nothing left
                # Wait for company: until the window after the oldest request closes, or the
                # budget is full. Requests that queued while a batch decoded go at once.
                deadline = self._queue[0].arrived + self.limits.window_s
                while not self._full() and not self._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                jobs = self._take()
                self._busy = bool(jobs)
            try:
                self._decode_jobs(jobs)
            finally:
                self._busy = False

    def _take(self) -> list[_Job]:
        """Requests in arrival order up to the budgets (always at least one: a request over the
        token budget goes alone; none is over the compute budget, `submit` saw to that);
        cancelled ones are dropped."""
        jobs: list[_Job] = []
        tokens = cost = 0
        while self._queue:
            job = self._queue[0]
            if jobs and (
                tokens + job.tokens > self.limits.max_tokens
                or cost + job.cost > self.limits.max_beam_tokens
                or len(jobs) >= self.limits.max_requests
            ):
                break
            self._queue.popleft()
            self._queued_lines -= job.segments
            self._queued_tokens -= job.tokens
            # A caller that went away before its batch began is not decoded; once running,
            # a future can no longer be cancelled, so a late disconnect cannot break a batch.
            if job.future.set_running_or_notify_cancel():
                jobs.append(job)
                tokens += job.tokens
                cost += job.cost
        return jobs

    def _decode_jobs(self, jobs: list[_Job]) -> None:
        groups: dict[tuple[str, DecodeConfig], list[_Job]] = {}
        for job in jobs:
            groups.setdefault((job.group, job.options), []).append(job)
        for (name, options), group in groups.items():
            self._decode_group(options, group, name)

    def _decode_group(self, options: DecodeConfig, group: list[_Job], name: str = "") -> None:
        """Decode the group in one call; should that fail, each request on its own, so that
        one request's bad input (a NaN, an error) fails that request alone."""
        lines = [line for job in group for line in job.lines]
        owners = [job for job in group for _ in job.lines]
        start = time.perf_counter()
        try:
            results = self._decode(lines, options, lambda i: not owners[i].future.abandoned)
            if len(results) != len(lines):
                raise RuntimeError(f"decoder gave {len(results)} results for {len(lines)}")
        except Exception as e:
            if len(group) > 1:
                log.warning(
                    "decoding a batch of %d requests failed (%s); decoding them one by one",
                    len(group),
                    e,
                )
                for job in group:
                    self._decode_group(options, [job], name)
                return
            log.exception("decoding a request of %d lines failed", len(lines))
            group[0].future.set_exception(e)  # its caller hears of it; the worker goes on
            return
        end = time.perf_counter()
        seconds = end - start
        speed = sum(job.segments for job in group) / max(seconds, 1e-9)
        self._segments_per_s = (
            speed if self._segments_per_s == 0 else 0.8 * self._segments_per_s + (0.2 * speed)
        )
        if self._on_batch is not None:  # before the answers, so metrics never lag them
            tokens = sum(job.tokens for job in group)
            late = _decoded_after_abandon(group, end)
            report = BatchReport(len(group), len(lines), tokens, seconds, options, late, name)
            self._on_batch(report)
        at = 0
        for job in group:
            job.future.set_result(results[at : at + len(job.lines)])
            at += len(job.lines)


def _decoded_after_abandon(group: list[_Job], end: float) -> tuple[float, ...]:
    """Seconds the group's decoding went on after each request abandoned during it."""
    times = (job.future.abandoned_at for job in group)
    return tuple(end - at for at in times if at is not None and at <= end)
