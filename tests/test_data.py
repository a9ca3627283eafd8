"""Corpus loading through `datasets` from files, TSV, JSON lines and hub-style datasets."""

from __future__ import annotations

import json

import pytest

from seq2seq.config import CorpusConfig, TokenizerConfig
from seq2seq.data import load_corpus, tokenize
from seq2seq.errors import UserError
from seq2seq.tokenizer import train_tokenizer

from .conftest import write_parallel


def _load(**spec):
    return load_corpus(CorpusConfig(**spec), "en", "fr")


def test_line_aligned_files_become_a_dataset(tmp_path):
    src, tgt = write_parallel(tmp_path, "a", [("Hello .", "Bonjour ."), (" Two ", "Deux")])
    ds = _load(src=src, tgt=tgt)
    assert ds["src"] == ["Hello .", "Two"]
    assert ds["tgt"] == ["Bonjour .", "Deux"]


def test_parallel_files_of_different_lengths_name_both_files_and_counts(tmp_path):
    src, _ = write_parallel(tmp_path, "a", [("a", "b")] * 5)
    tgt = tmp_path / "short.fr"
    tgt.write_text("b\n" * 3)
    with pytest.raises(UserError) as e:
        _load(src=src, tgt=tgt)
    assert f"{src} has 5 lines" in str(e.value)
    assert f"{tgt} has 3" in str(e.value)


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    src, tgt = write_parallel(tmp_path, "a", [("ok", "ok"), ("ok", "ok")])
    tgt.write_bytes(b"ok\n\xff\xfe bad\n")
    with pytest.raises(UserError, match=rf"{tgt}, line 2: invalid UTF-8"):
        _load(src=src, tgt=tgt)


def test_tsv_with_a_wrong_field_count_names_the_line(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("one\tun\ntwo\tdeux\tzwei\n")
    with pytest.raises(UserError, match=r"line 2: expected 2 tab-separated fields, found 3"):
        _load(tsv=path)


def test_tsv_pairs(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text("one\tun\ntwo\tdeux\n")
    assert _load(tsv=path)["tgt"] == ["un", "deux"]


def test_jsonl_accepts_flat_and_translation_layouts(tmp_path):
    path = tmp_path / "a.jsonl"
    rows = [{"translation": {"en": "one", "fr": "un"}}, {"en": "two", "fr": "deux"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = _load(jsonl=path)
    assert ds["src"] == ["one", "two"] and ds["tgt"] == ["un", "deux"]


def test_jsonl_without_the_languages_names_the_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"en": "one", "fr": "un"}\n{"en": "two", "de": "zwei"}\n')
    with pytest.raises(UserError, match="line 2: expected an object with keys 'en' and 'fr'"):
        _load(jsonl=path)


def test_hub_dataset_with_translation_column(tmp_path):
    # A local folder loads through the same `datasets.load_dataset(name, …)` call as a hub name.
    folder = tmp_path / "my_wmt"
    folder.mkdir()
    rows = [{"translation": {"en": f"n{i}", "fr": f"m{i}"}} for i in range(4)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = _load(hub=str(folder), split="train", max_pairs=3)
    assert ds["src"] == ["n0", "n1", "n2"]
    assert ds["tgt"] == ["m0", "m1", "m2"]


def test_unreachable_hub_dataset_is_a_user_error():
    with pytest.raises(UserError, match="cannot load hub dataset"):
        _load(hub="surely-not/a-dataset-here", split="train")


def test_empty_and_too_long_pairs_are_dropped_and_counted(tmp_path, demo_pairs):
    short = [(a, b) for a, b in demo_pairs if len(a) < 40 and len(b) < 40][:300]
    pairs = short + [("", "vide"), ("empty", ""), ("word " * 80, "mot " * 80)]
    src, tgt = write_parallel(tmp_path, "a", pairs)
    ds = _load(src=src, tgt=tgt)
    train_tokenizer(TokenizerConfig(vocab_size=200), ds["src"], ds["tgt"], tmp_path / "run")
    tokenized, report = tokenize(ds, tmp_path / "run", joint=True, max_len=60)
    assert (report.read, report.empty, report.too_long) == (303, 2, 1)
    assert len(tokenized) == report.kept == 300
    assert max(tokenized["src_len"]) <= 60 and max(tokenized["tgt_len"]) <= 60
    assert "2 empty, 1 longer than the maximum" in str(report)
