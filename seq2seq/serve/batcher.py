"""Dynamic batching: requests that arrive close together are decoded together.

Callers on any thread `submit` their lines and get a `concurrent.futures.Future`; one worker
thread waits a short window after the first waiting request, takes requests in arrival order up
to a token budget, groups them by decode settings (one search call cannot mix beam sizes) and by
the group the caller names (serve keeps constrained and markup work apart from plain work),
hands each group to the decode function in one call, and gives every caller exactly its own results
back, in its order. Nothing here knows about HTTP or torch, so it is tested on its own.

Work of a named group (serve's constrained and markup requests, whose search costs many times
plain search's per token) is decoded in slices: a few lines at a time, up to a small compute
budget, its results gathered in order, and between two slices the plain batch that waits, if
any (plain work never waits behind more than one slice). A request abandoned between its slices
is decoded no further.
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
    # The same, for one slice of a named group's work (constrained, markup): bounds how long
    # plain work may wait behind it, and its peak memory. A line over it goes alone.
    max_slice_beam_tokens: int = 512


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
    line_costs: tuple[int, ...] = ()  # each line's (source + term tokens) × beam: slice sizes
    taken: int = 0  # lines handed to the decoder so far (a named group's job goes in slices)
    done: list = field(default_factory=list)  # their results, in order
    decoded_at: float = 0.0  # time.perf_counter() when its last slice ended


@dataclass(frozen=True)
class _Piece:
    """Lines start:end of one job, in one decode call."""

    job: _Job
    start: int
    end: int

    @property
    def lines(self) -> list:
        return self.job.lines[self.start : self.end]

    @property
    def last(self) -> bool:
        """Whether it ends its job."""
        return self.end == len(self.job.lines)

    def share(self, whole: int) -> int:
        """Its part of a count of the whole job (tokens, sentences): the pieces' add up."""
        n = len(self.job.lines)
        return whole * self.end // n - whole * self.start // n


# lines, their options, and `wanted(i)`: whether line i's caller still waits (a decode function
# may stop early on the lines it does not and give them any result).
Decode = Callable[[list, DecodeConfig, Callable[[int], bool]], list[Hypotheses]]


class _WorkQueue:
    """The requests waiting (whole, or the rest of one decoded in slices), what the queue's
    bounds count of them, and the next decode call's lines taken from them. Used under the
    batcher's lock."""

    def __init__(self, limits: BatchLimits):
        self.limits = limits
        self.jobs: deque[_Job] = deque()
        self.lines = self.tokens = 0  # sentences and source tokens waiting
        self._sliced_last = False  # the last decode call was a slice: plain work goes next
        # Per group: requests abandoned between their slices (their decoding went on 0 s),
        # told with the group's next report.
        self._stopped: dict[str, list[float]] = {}

    def add(self, job: _Job) -> None:
        """Queue the job, counted."""
        self.jobs.append(job)
        self.lines += job.segments
        self.tokens += job.tokens

    def remove(self, job: _Job) -> None:
        """Take the job out of the queue and its counts (unless taken already)."""
        try:
            self.jobs.remove(job)
        except ValueError:
            return  # taken already, and counted out there
        self.lines -= job.segments
        self.tokens -= job.tokens

    def full(self) -> bool:
        """Whether a batch's worth waits (no use waiting for company)."""
        return self.tokens >= self.limits.max_tokens or len(self.jobs) >= self.limits.max_requests

    def stopped(self, group: str) -> tuple[float, ...]:
        """The group's requests abandoned between slices since its last report: 0 s each."""
        return tuple(self._stopped.pop(group, ()))

    def next(self) -> list[_Piece]:
        """What the next decode call holds: plain requests or one slice of a named group's
        work, in turns while both wait."""
        plain = any(not job.group for job in self.jobs)
        named = any(job.group for job in self.jobs)
        self._sliced_last = named and not (plain and self._sliced_last)
        return self._take_slice() if self._sliced_last else self._take()

    def _take(self) -> list[_Piece]:
        """Plain requests in arrival order up to the budgets (always at least one: a request
        over the token budget goes alone; none is over the compute budget, `submit` saw to
        that); cancelled ones are dropped."""
        pieces: list[_Piece] = []
        tokens = cost = 0
        for job in [job for job in self.jobs if not job.group]:
            if pieces and (
                tokens + job.tokens > self.limits.max_tokens
                or cost + job.cost > self.limits.max_beam_tokens
                or len(pieces) >= self.limits.max_requests
            ):
                break
            self.remove(job)
            # A caller that went away before its batch began is not decoded; once running,
            # a future can no longer be cancelled, so a late disconnect cannot break a batch.
            if job.future.set_running_or_notify_cancel():
                pieces.append(_Piece(job, 0, len(job.lines)))
                tokens += job.tokens
                cost += job.cost
        return pieces

    def _take_slice(self) -> list[_Piece]:
        """The next lines of the oldest named group's requests (its options alike), in
        arrival order, up to the slice budget (always one line at least). A request abandoned
        since its last slice is answered with what it has (its caller is gone) and dropped."""
        first = next(job for job in self.jobs if job.group)
        pieces: list[_Piece] = []
        cost = 0
        for job in [j for j in self.jobs if (j.group, j.options) == (first.group, first.options)]:
            if job.taken and (job.future.abandoned or job.future.done()):
                self.remove(job)  # gone, or failed in an earlier slice
                if not job.future.done():
                    if job.future.abandoned_at > job.decoded_at:  # else told with that slice
                        self._stopped.setdefault(job.group, []).append(0.0)
                    job.future.set_result(job.done + [[] for _ in job.lines[job.taken :]])
                continue
            end, spent = _slice_end(job, cost, self.limits.max_slice_beam_tokens, bool(pieces))
            if end == job.taken:
                break  # the budget is spent
            if not job.taken and not job.future.set_running_or_notify_cancel():
                self.remove(job)  # went away before its first slice
                continue
            cost = spent
            pieces.append(_Piece(job, job.taken, end))
            job.taken = end
            if end == len(job.lines):
                self.remove(job)
            else:
                break  # the budget is spent
        return pieces


class Batcher:
    """A queue of translation requests drained by one worker thread in dynamic batches."""

    def __init__(
        self,
        decode: Decode,
        limits: BatchLimits = BatchLimits(),
        on_batch: Callable[[BatchReport], None] | None = None,
    ):
        self._decode, self.limits, self._on_batch = decode, limits, on_batch
        self._queue = _WorkQueue(limits)
        self._cond = threading.Condition()
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
        """Sentences waiting for a batch (not those being decoded), the rest of a request
        decoded in slices included."""
        return self._queue.lines

    @property
    def queued_requests(self) -> int:
        """Requests waiting for a batch (or for their next slice)."""
        return len(self._queue.jobs)

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
        line_tokens: list[int] | None = None,
    ) -> JobFuture:
        """Queue lines for decoding; the future's result is one hypothesis list per line.

        `segments`: the sentences they hold once split (default: one a line), which is what
        the queue's bound counts; `terms`: the target-term tokens they must hold, which the
        compute budget counts with `tokens`; `group`: requests of different groups are never
        decoded in one call, and a named group's are decoded in slices; `line_tokens`: each
        line's (source + term) tokens, which size the slices (default: all alike)."""
        if not lines:
            raise ValueError("nothing to translate")
        segments = len(lines) if segments is None else segments
        cost = (tokens + terms) * options.beam_size
        if cost > self.limits.max_beam_tokens:
            raise OverBudget(cost, self.limits.max_beam_tokens, terms)
        if line_tokens is None:
            line_tokens = [-(-(tokens + terms) // len(lines))] * len(lines)
        costs = tuple(n * options.beam_size for n in line_tokens)
        with self._cond:
            if self._stopping:
                raise Stopped("the server is shutting down")
            queue = self._queue
            if queue.jobs and queue.lines + segments > self.limits.max_queue_lines:
                raise QueueFull(queue.lines, self._retry_after())
            job = _Job(lines, options, tokens, segments, cost, group, line_costs=costs)
            queue.add(job)
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
            self._queue.remove(job)

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
        return max(1.0, self._queue.lines / self._segments_per_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                queue = self._queue
                while not queue.jobs and not self._stopping:
                    self._cond.wait()
                if not queue.jobs:
                    return  # stopping, and nothing left
                # Wait for company: until the window after the oldest request closes, or the
                # budget is full. Requests that queued while a batch decoded go at once.
                deadline = queue.jobs[0].arrived + self.limits.window_s
                while not queue.full() and not self._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                pieces = queue.next()
                self._busy = bool(pieces)
            try:
                self._decode_call(pieces)
            finally:
                self._busy = False

    def _decode_call(self, pieces: list[_Piece]) -> None:
        groups: dict[tuple[str, DecodeConfig], list[_Piece]] = {}
        for piece in pieces:
            groups.setdefault((piece.job.group, piece.job.options), []).append(piece)
        for (name, options), group in groups.items():
            self._decode_group(options, group, name)

    def _decode_group(self, options: DecodeConfig, group: list[_Piece], name: str = "") -> None:
        """Decode the group in one call; should that fail, each piece on its own, so that
        one request's bad input (a NaN, an error) fails that request alone."""
        lines = [line for piece in group for line in piece.lines]
        owners = [piece.job for piece in group for _ in piece.lines]
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
                for piece in group:
                    self._decode_group(options, [piece], name)
                return
            log.exception("decoding a request of %d lines failed", len(lines))
            if not group[0].job.future.done():
                group[0].job.future.set_exception(e)  # its caller hears; the worker goes on
            return
        end = time.perf_counter()
        self._report(group, options, name, start, end, len(lines))
        at = 0
        for piece in group:
            piece.job.decoded_at = end
            piece.job.done.extend(results[at : at + len(piece.lines)])
            at += len(piece.lines)
            if piece.last and not piece.job.future.done():
                piece.job.future.set_result(piece.job.done)

    def _report(self, group: list[_Piece], options, name: str, start, end, lines: int) -> None:
        """The decoding speed updated, and the call reported (before the answers, so metrics
        never lag them)."""
        seconds = end - start
        speed = sum(piece.share(piece.job.segments) for piece in group) / max(seconds, 1e-9)
        self._segments_per_s = (
            speed if self._segments_per_s == 0 else 0.8 * self._segments_per_s + (0.2 * speed)
        )
        if self._on_batch is not None:
            tokens = sum(piece.share(piece.job.tokens) for piece in group)
            late = _decoded_after_abandon([piece.job for piece in group], end)
            late += self._queue.stopped(name)
            report = BatchReport(len(group), lines, tokens, seconds, options, late, name)
            self._on_batch(report)


def _slice_end(job: _Job, cost: int, budget: int, started: bool) -> tuple[int, int]:
    """Where a slice that has spent `cost` of `budget` stops in the job's lines, and its cost
    then (a slice not `started` takes one line whatever its cost)."""
    end = job.taken
    while end < len(job.lines):
        more = job.line_costs[end]
        if (started or end > job.taken) and cost + more > budget:
            break
        cost, end = cost + more, end + 1
    return end, cost


def _decoded_after_abandon(group: list[_Job], end: float) -> tuple[float, ...]:
    """Seconds the group's decoding went on after each request abandoned during it."""
    times = (job.future.abandoned_at for job in group)
    return tuple(end - at for at in times if at is not None and at <= end)
