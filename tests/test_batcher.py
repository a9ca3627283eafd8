"""The dynamic batcher on its own: a fake decoder stands in for the model."""

from __future__ import annotations

import threading
import time

import pytest

from seq2seq.config import DecodeConfig
from seq2seq.serve.batcher import Batcher, BatchLimits, OverBudget, QueueFull, Stopped

GREEDY = DecodeConfig(beam_size=1, nbest=1, length_penalty=0.6)
BEAM = DecodeConfig(beam_size=4, nbest=2, length_penalty=0.6)


class FakeDecoder:
    """Upper-cases lines; records every call; can be held to keep the worker busy."""

    def __init__(self):
        self.calls: list[tuple[list[str], DecodeConfig]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()

    def __call__(self, lines, options, wanted=None):
        self.calls.append((list(lines), options))
        self.started.set()
        assert self.release.wait(10)
        return [[(line.upper(), -float(i)) for i in range(options.nbest)] for line in lines]


@pytest.fixture
def decoder():
    return FakeDecoder()


def _batcher(decoder, **limits) -> Batcher:
    return Batcher(decoder, BatchLimits(**{"window_s": 0.05, **limits})).start()


def test_requests_within_the_window_are_decoded_in_one_call(decoder):
    batcher = _batcher(decoder)
    futures = [batcher.submit([f"a{i}", f"b{i}"], GREEDY, tokens=4) for i in range(5)]
    assert [len(f.result(5)) for f in futures] == [2] * 5
    batcher.stop()
    assert len(decoder.calls) == 1
    assert len(decoder.calls[0][0]) == 10


def test_each_caller_gets_exactly_its_own_lines_back_in_order(decoder):
    batcher = _batcher(decoder)
    futures = [
        batcher.submit([f"r{i} l{j}" for j in range(i + 1)], GREEDY, i + 1) for i in range(6)
    ]
    for i, future in enumerate(futures):
        assert [hyps[0][0] for hyps in future.result(5)] == [f"R{i} L{j}" for j in range(i + 1)]
    batcher.stop()


def test_requests_with_different_options_are_decoded_in_separate_calls(decoder):
    batcher = _batcher(decoder)
    a = batcher.submit(["one"], GREEDY, 1)
    b = batcher.submit(["two"], BEAM, 1)
    c = batcher.submit(["three"], GREEDY, 1)
    assert a.result(5) == [[("ONE", 0.0)]]
    assert b.result(5) == [[("TWO", 0.0), ("TWO", -1.0)]]
    assert c.result(5) == [[("THREE", 0.0)]]
    batcher.stop()
    assert sorted((tuple(lines), opts.beam_size) for lines, opts in decoder.calls) == [
        (("one", "three"), 1),
        (("two",), 4),
    ]


def test_a_batch_holds_no_more_than_the_token_budget(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder, max_tokens=10)
    first = batcher.submit(["hold"], GREEDY, 1)
    assert decoder.started.wait(5)  # the worker is busy; the rest queue up
    futures = [batcher.submit([f"x{i}"], GREEDY, tokens=4) for i in range(5)]
    decoder.release.set()
    for f in [first, *futures]:
        f.result(5)
    batcher.stop()
    assert [len(lines) for lines, _ in decoder.calls] == [1, 2, 2, 1]


def test_a_request_over_the_token_budget_is_decoded_alone_not_refused(decoder):
    batcher = _batcher(decoder, max_tokens=10)
    assert len(batcher.submit(["long"] * 3, GREEDY, tokens=50).result(5)) == 3
    batcher.stop()


def test_a_batch_holds_no_more_source_tokens_times_beam_than_its_budget(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder, max_beam_tokens=40)
    first = batcher.submit(["hold"], GREEDY, 1)
    assert decoder.started.wait(5)  # the worker is busy; the rest queue up
    futures = [batcher.submit([f"x{i}"], BEAM, tokens=5) for i in range(5)]  # 20 each
    decoder.release.set()
    for f in [first, *futures]:
        f.result(5)
    batcher.stop()
    assert [len(lines) for lines, _ in decoder.calls] == [1, 2, 2, 1]


def test_a_request_over_the_compute_budget_on_its_own_is_refused_not_taken(decoder):
    batcher = _batcher(decoder, max_beam_tokens=40)
    with pytest.raises(OverBudget, match="is 44; at most 40"):
        batcher.submit(["long"], BEAM, tokens=11)  # 11 tokens × beam 4
    assert batcher.queued_requests == 0
    assert batcher.submit(["short"], BEAM, tokens=10).result(5)  # 40: within it
    batcher.stop()
    assert [lines for lines, _ in decoder.calls] == [["short"]]


def test_max_requests_one_decodes_each_request_on_its_own(decoder):
    batcher = _batcher(decoder, max_requests=1, window_s=0.0)
    futures = [batcher.submit([f"s{i}", "t"], GREEDY, 2) for i in range(4)]
    for f in futures:
        f.result(5)
    batcher.stop()
    assert [lines for lines, _ in decoder.calls] == [[f"s{i}", "t"] for i in range(4)]


def test_a_lone_request_waits_no_longer_than_the_window(decoder):
    batcher = _batcher(decoder, window_s=0.02)
    start = time.monotonic()
    batcher.submit(["alone"], GREEDY, 1).result(5)
    assert time.monotonic() - start < 2.0
    batcher.stop()


def test_a_full_queue_refuses_with_a_retry_delay(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder, max_queue_lines=4)
    batcher.submit(["busy"], GREEDY, 1)
    assert decoder.started.wait(5)
    batcher.submit(["a", "b", "c"], GREEDY, 3)
    with pytest.raises(QueueFull) as refused:
        batcher.submit(["d", "e"], GREEDY, 2)
    assert refused.value.retry_after_s >= 1
    assert batcher.queued_lines == 3
    decoder.release.set()
    batcher.stop()


def test_the_queue_bound_counts_sentences_not_lines(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder, max_queue_lines=4)
    batcher.submit(["busy"], GREEDY, 1)
    assert decoder.started.wait(5)
    batcher.submit(["One. Two. Three."], GREEDY, 9, segments=3)
    assert batcher.queued_lines == 3
    with pytest.raises(QueueFull, match="3 sentences waiting"):
        batcher.submit(["Four. Five."], GREEDY, 6, segments=2)
    decoder.release.set()
    batcher.stop()


def test_a_cancelled_request_is_not_decoded_and_its_batch_still_is(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder)
    batcher.submit(["busy"], GREEDY, 1)
    assert decoder.started.wait(5)
    gone = batcher.submit(["gone"], GREEDY, 1)
    kept = batcher.submit(["kept"], GREEDY, 1)
    assert gone.cancel()
    decoder.release.set()
    assert kept.result(5) == [[("KEPT", 0.0)]]
    batcher.stop()
    assert ["gone"] not in [lines for lines, _ in decoder.calls]


def test_a_cancelled_request_leaves_the_queue_bound_at_once(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder, max_queue_lines=4)
    batcher.submit(["busy"], GREEDY, 1)
    assert decoder.started.wait(5)
    gone = batcher.submit(["One. Two. Three."], GREEDY, 9, segments=3)
    with pytest.raises(QueueFull):
        batcher.submit(["Four. Five."], GREEDY, 6, segments=2)
    assert gone.cancel()
    assert batcher.queued_lines == 0  # while the worker is still busy with the first batch
    kept = batcher.submit(["Four. Five."], GREEDY, 6, segments=2)
    decoder.release.set()
    assert kept.result(5) == [[("FOUR. FIVE.", 0.0)]]
    batcher.stop()


def test_an_abandoned_request_being_decoded_is_no_longer_wanted_by_the_decoder():
    started, release, asked = threading.Event(), threading.Event(), []

    def decode(lines, options, wanted):
        started.set()
        assert release.wait(5)
        asked.extend(wanted(i) for i in range(len(lines)))  # what a search poll sees
        return [[(line, 0.0)] for line in lines]

    batcher = Batcher(decode, BatchLimits(window_s=0.05)).start()
    gone = batcher.submit(["a", "b"], GREEDY, 2)
    kept = batcher.submit(["c"], GREEDY, 1)
    assert started.wait(5)
    gone.abandon()  # too late to cancel: it is being decoded
    assert not gone.cancelled() and gone.abandoned
    release.set()
    assert kept.result(5) == [[("c", 0.0)]]
    assert asked == [False, False, True]
    batcher.stop()


def test_a_decoder_error_reaches_its_callers_and_the_worker_goes_on():
    def flaky(lines, options, wanted=None):
        if "boom" in lines:
            raise RuntimeError("decoder broke")
        return [[(line, 0.0)] for line in lines]

    batcher = Batcher(flaky, BatchLimits(window_s=0.0, max_requests=1)).start()
    with pytest.raises(RuntimeError, match="decoder broke"):
        batcher.submit(["boom"], GREEDY, 1).result(5)
    assert batcher.submit(["fine"], GREEDY, 1).result(5) == [[("fine", 0.0)]]
    batcher.stop()


def test_when_a_batch_fails_its_requests_are_retried_one_by_one_and_only_the_bad_one_fails():
    calls = []

    def flaky(lines, options, wanted=None):
        calls.append(list(lines))
        if "boom" in lines:
            raise RuntimeError("the model's scores are not finite for input line(s) 2")
        return [[(line.upper(), 0.0)] for line in lines]

    batcher = Batcher(flaky, BatchLimits(window_s=0.05)).start()
    good = batcher.submit(["a"], GREEDY, 1)
    bad = batcher.submit(["boom"], GREEDY, 1)
    other = batcher.submit(["b", "c"], GREEDY, 2)
    assert good.result(5) == [[("A", 0.0)]]
    assert other.result(5) == [[("B", 0.0)], [("C", 0.0)]]
    with pytest.raises(RuntimeError, match="not finite"):
        bad.result(5)
    batcher.stop()
    assert calls == [["a", "boom", "b", "c"], ["a"], ["boom"], ["b", "c"]]


def test_stop_decodes_what_is_queued_then_refuses_more(decoder):
    decoder.release.clear()
    batcher = _batcher(decoder)
    first = batcher.submit(["busy"], GREEDY, 1)
    assert decoder.started.wait(5)
    queued = batcher.submit(["queued"], GREEDY, 1)
    stopper = threading.Thread(target=batcher.stop)
    stopper.start()
    time.sleep(0.05)
    with pytest.raises(Stopped):
        batcher.submit(["late"], GREEDY, 1)
    decoder.release.set()
    stopper.join(5)
    assert first.result(0) == [[("BUSY", 0.0)]]
    assert queued.result(0) == [[("QUEUED", 0.0)]]


def test_batch_reports_count_requests_lines_and_tokens(decoder):
    reports = []
    batcher = Batcher(decoder, BatchLimits(window_s=0.05), reports.append).start()
    futures = [batcher.submit(["a", "b"], GREEDY, 5), batcher.submit(["c"], GREEDY, 2)]
    for f in futures:
        f.result(5)
    batcher.stop()
    assert [(r.requests, r.lines, r.tokens) for r in reports] == [(2, 3, 7)]


def test_a_batch_report_says_how_long_decoding_went_on_after_a_request_was_abandoned(decoder):
    reports = []
    decoder.release.clear()
    batcher = Batcher(decoder, BatchLimits(window_s=0.05), reports.append).start()
    gone, kept = batcher.submit(["a"], GREEDY, 1), batcher.submit(["b"], GREEDY, 1)
    assert decoder.started.wait(5)
    gone.abandon()
    time.sleep(0.2)  # the decoder goes on for 0.2 s after the client left
    decoder.release.set()
    kept.result(5)
    batcher.stop()
    ((late,),) = [r.abandoned_s for r in reports]
    assert 0.2 <= late < 2


def test_a_batch_report_names_its_requests_group(decoder):
    reports = []
    batcher = Batcher(decoder, BatchLimits(window_s=0.05), reports.append).start()
    plain, terms = batcher.submit(["a"], GREEDY, 1), batcher.submit(["b"], GREEDY, 1, group="terms")
    plain.result(5), terms.result(5)
    batcher.stop()
    assert sorted(r.group for r in reports) == ["", "terms"]
