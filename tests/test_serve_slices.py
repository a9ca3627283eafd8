"""Constrained and markup work is decoded in slices, plain batches taken between them: a fake
decoder that records its calls stands in for the model (the last test uses a real one)."""

from __future__ import annotations

import json
import threading

import pytest

from seq2seq.config import DecodeConfig, with_changes
from seq2seq.decode.annotate import translate_sources
from seq2seq.decode.translator import load_translator
from seq2seq.serve.app import line_tokens, request_checker, translator_decode, work_group
from seq2seq.serve.batcher import Batcher, BatchLimits, BatchReport
from seq2seq.serve.schema import RequestLimits, parse_translate_request
from tests.factories import untrained_run

BEAM = DecodeConfig(beam_size=4, nbest=1, length_penalty=0.6)
# Each line below costs 10 tokens × beam 4 = 40: a slice of this budget holds two lines.
TWO_LINES = 80


class Recorder:
    """Upper-cases lines and records each call's lines; `hold()` keeps calls waiting until
    `release()` (`hold(line)`: the call holding that line), so that tests can queue work
    behind them."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.started = threading.Semaphore(0)
        self._gate = threading.Event()
        self._gate.set()
        self._gates: dict[str, threading.Event] = {}
        self.polled: list[list[bool]] = []  # what `wanted` said of each call's lines, at its end

    def hold(self, line: str | None = None) -> None:
        if line is None:
            self._gate.clear()
        else:
            self._gates[line] = threading.Event()

    def release(self, line: str | None = None) -> None:
        (self._gate if line is None else self._gates[line]).set()

    def __call__(self, lines, options, wanted):
        self.calls.append(list(lines))
        self.started.release()
        assert self._gate.wait(10)
        for line in lines:
            if line in self._gates:
                assert self._gates[line].wait(10)
        self.polled.append([wanted(i) for i in range(len(lines))])
        return [[(line.upper(), 0.0)] for line in lines]

    def wait_for_call(self) -> None:
        assert self.started.acquire(timeout=10)


@pytest.fixture
def decoder():
    return Recorder()


def _batcher(decoder, reports=None, **limits) -> Batcher:
    limits = {"window_s": 0.0, "max_slice_beam_tokens": TWO_LINES, **limits}
    return Batcher(decoder, BatchLimits(**limits), reports.append if reports is not None else None)


def _terms(batcher: Batcher, lines: list[str], options: DecodeConfig = BEAM, group="terms"):
    """A constrained request of these lines, each 8 source + 2 term tokens."""
    n = len(lines)
    return batcher.submit(lines, options, 8 * n, terms=2 * n, group=group, line_tokens=[10] * n)


def test_a_long_glossary_request_is_answered_whole_and_in_order(decoder):
    batcher = _batcher(decoder).start()
    lines = [f"line {i}" for i in range(7)]
    future = _terms(batcher, lines)
    assert [hyps[0][0] for hyps in future.result(10)] == [line.upper() for line in lines]
    batcher.stop()
    assert decoder.calls == [lines[0:2], lines[2:4], lines[4:6], lines[6:7]]


def test_a_plain_request_is_answered_between_slices_of_a_long_glossary_request(decoder):
    batcher = _batcher(decoder).start()
    decoder.hold()
    terms = _terms(batcher, [f"term {i}" for i in range(6)])
    decoder.wait_for_call()  # its first slice decodes; a plain request comes meanwhile
    plain = batcher.submit(["plain"], BEAM, 8)
    decoder.release()
    assert plain.result(10) == [[("PLAIN", 0.0)]]
    assert not terms.done() or decoder.calls.index(["plain"]) < len(decoder.calls) - 1
    terms.result(10)
    batcher.stop()
    assert decoder.calls == [
        ["term 0", "term 1"],
        ["plain"],
        ["term 2", "term 3"],
        ["term 4", "term 5"],
    ]


def test_plain_and_sliced_work_take_turns_while_both_wait(decoder):
    batcher = _batcher(decoder).start()
    decoder.hold()
    first = batcher.submit(["first"], BEAM, 8)
    decoder.wait_for_call()
    terms = _terms(batcher, [f"term {i}" for i in range(4)])
    plain = [batcher.submit([f"plain {i}"], BEAM, 8, line_tokens=[8]) for i in range(2)]
    decoder.release()
    for future in [first, terms, *plain]:
        future.result(10)
    batcher.stop()
    # The two plain requests queued together are one batch, after one slice: never behind two.
    assert decoder.calls == [
        ["first"],
        ["term 0", "term 1"],
        ["plain 0", "plain 1"],
        ["term 2", "term 3"],
    ]


def test_an_abandoned_glossary_request_stops_at_the_next_slice(decoder):
    reports: list[BatchReport] = []
    batcher = _batcher(decoder, reports).start()
    decoder.hold()
    gone = _terms(batcher, [f"gone {i}" for i in range(6)])
    decoder.wait_for_call()
    gone.abandon()  # while its first slice decodes: that slice is told, the rest never starts
    kept = _terms(batcher, ["kept"])
    decoder.release()
    assert kept.result(10) == [[("KEPT", 0.0)]]
    batcher.stop()
    assert decoder.calls == [["gone 0", "gone 1"], ["kept"]]
    assert decoder.polled[0] == [False, False]  # `wanted` let the slice stop early too
    assert gone.result(1)[2:] == [[]] * 4  # never decoded (nobody reads it)
    assert [len(r.abandoned_s) for r in reports] == [1, 0]
    assert batcher.queued_lines == 0 and batcher.queued_requests == 0


def test_a_request_abandoned_between_its_slices_is_decoded_no_further(decoder):
    reports: list[BatchReport] = []
    batcher = _batcher(decoder, reports).start()
    decoder.hold()
    gone = _terms(batcher, [f"gone {i}" for i in range(6)])
    decoder.wait_for_call()
    decoder.hold("plain")
    plain = batcher.submit(["plain"], BEAM, 8)
    decoder.release()
    decoder.wait_for_call()  # its first slice is done; the plain batch is decoding
    gone.abandon()
    kept = _terms(batcher, ["kept"])
    decoder.release("plain")
    assert plain.result(10) and kept.result(10) == [[("KEPT", 0.0)]]
    batcher.stop()
    assert decoder.calls == [["gone 0", "gone 1"], ["plain"], ["kept"]]
    # Its decoding went on 0 s after the hang-up: told with the group's next report.
    assert [r.abandoned_s for r in reports if r.group == "terms"] == [(), (0.0,)]


def test_small_glossary_requests_share_a_slice_and_a_line_over_the_budget_goes_alone(decoder):
    batcher = _batcher(decoder).start()
    decoder.hold()
    first = batcher.submit(["first"], BEAM, 8)
    decoder.wait_for_call()
    small = [_terms(batcher, [f"small {i}"]) for i in range(3)]
    huge = batcher.submit(["huge", "after"], BEAM, 60, group="terms", line_tokens=[50, 10])
    decoder.release()
    for future in [first, *small, huge]:
        future.result(10)
    batcher.stop()
    assert decoder.calls[1:] == [["small 0", "small 1"], ["small 2"], ["huge"], ["after"]]


def test_markup_and_glossary_work_and_other_beam_sizes_never_share_a_slice(decoder):
    batcher = _batcher(decoder).start()
    decoder.hold()
    first = batcher.submit(["first"], BEAM, 8)
    decoder.wait_for_call()
    greedy = with_changes(BEAM, {"beam_size": 1})
    futures = [
        _terms(batcher, ["terms"]),
        _terms(batcher, ["markup"], group="markup"),
        _terms(batcher, ["greedy"], greedy),
        _terms(batcher, ["terms again"]),
    ]
    decoder.release()
    for future in [first, *futures]:
        future.result(10)
    batcher.stop()
    assert decoder.calls[1:] == [["terms", "terms again"], ["markup"], ["greedy"]]


def test_a_slice_that_fails_fails_its_request_and_its_other_slices_are_not_decoded():
    calls = []

    def failing(lines, options, wanted):
        calls.append(list(lines))
        if "bad" in lines:
            raise ValueError("NaN")
        return [[(line, 0.0)] for line in lines]

    batcher = _batcher(failing).start()
    bad = _terms(batcher, ["bad", "x", "y", "z"])
    with pytest.raises(ValueError, match="NaN"):
        bad.result(10)
    good = _terms(batcher, ["good"])
    assert good.result(10) == [[("good", 0.0)]]
    batcher.stop()
    assert calls == [["bad", "x"], ["good"]]  # "y", "z" never decoded
    assert batcher.queued_requests == 0


def test_the_rest_of_a_sliced_request_counts_against_the_queue_bound(decoder):
    batcher = _batcher(decoder, max_queue_lines=8).start()
    decoder.hold()
    terms = _terms(batcher, [f"term {i}" for i in range(8)])
    decoder.wait_for_call()
    assert batcher.queued_requests == 1 and batcher.queued_lines == 8  # six still to decode
    decoder.release()
    terms.result(10)
    batcher.stop()
    assert batcher.queued_lines == 0


@pytest.mark.slow
def test_a_glossary_request_in_html_decoded_in_slices_is_what_it_is_decoded_whole(
    tmp_path, demo_pairs
):
    # One sentence a search batch, so that only the slicing differs between the two.
    decode = {"beam_size": 3, "batch_size": 1, "max_len_a": 1.0, "max_len_b": 4}
    run = untrained_run(tmp_path, demo_pairs[:300], decode=decode)
    translator, _ = load_translator(run, device="cpu")
    sources_en = [a for a, _ in demo_pairs[:6]]
    words = [max(a.split(), key=len).strip(".,") for a in sources_en]
    body = {
        "texts": [a.replace(w, f"<b>{w}</b>", 1) for a, w in zip(sources_en, words)],
        "format": "html",
        "glossary": [[w.lower(), "maison"] for w in words],
    }
    limits = RequestLimits()
    req = parse_translate_request(json.dumps(body).encode(), limits, translator.options)
    req, sources = request_checker(translator, limits)(req)
    assert work_group(sources) == "markup" and all(s.constraints for s in sources)
    whole = translate_sources(translator, sources, options=req.options)

    seen: list[int] = []

    def decode(lines, options, wanted):
        seen.append(len(lines))
        return translator_decode(translator)(lines, options, wanted)

    cost = max(line_tokens(sources)) * req.options.beam_size
    batcher = Batcher(decode, BatchLimits(window_s=0.0, max_slice_beam_tokens=cost)).start()
    future = batcher.submit(
        sources,
        req.options,
        sum(s.tokens for s in sources),
        group="markup",
        line_tokens=line_tokens(sources),
    )
    sliced = future.result(120)
    batcher.stop()
    assert len(seen) >= 2 and sum(seen) == 6  # six lines, the longest a slice on its own
    assert sliced == whole
    assert any("<b>" in hyps[0][0] for hyps in sliced)
