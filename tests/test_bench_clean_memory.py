"""scripts/bench_clean_memory.py: a big corpus of distinct pairs made from a small one, and the
memory of a whole process tree sampled while it runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.runs import write_parallel

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "bench_clean_memory.py"
_SPEC = importlib.util.spec_from_file_location("bench_clean_memory", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_code_words_are_distinct_words_of_four_consonants_or_more():
    words = [bench.code_word(k) for k in range(30_000)]
    assert len(set(words)) == len(words)
    assert all(len(w) >= 4 and set(w) <= set(bench.CONSONANTS) for w in words)


def test_the_corpus_repeats_the_train_split_each_pair_with_its_own_word(tmp_path):
    pairs = [("One.", "Un."), ("Two.", "Deux."), ("Three.", "Trois.")]
    write_parallel(tmp_path, "train", pairs)
    src, tgt = bench.write_corpus(tmp_path, 7, tmp_path)
    en, fr = src.read_text().splitlines(), tgt.read_text().splitlines()
    words = [bench.code_word(k) for k in range(7)]
    assert en == [f"{pairs[k % 3][0]} {words[k]}" for k in range(7)]
    assert fr == [f"{pairs[k % 3][1]} {words[k]}" for k in range(7)]


def test_the_sampler_adds_up_a_process_and_its_children():
    child = "import time; x = bytearray(50 << 20); time.sleep(3)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    process = subprocess.Popen([sys.executable, "-c", parent])
    sampler = bench.TreeSampler(process.pid)
    sampler.start()
    process.wait()
    sampler.stopped.set()
    sampler.join()
    assert sampler.most == 2
    assert sampler.peak_rss > 50 << 10  # kB: the child's 50 MB and both interpreters
