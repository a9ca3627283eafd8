"""Corpus loading through `datasets` from files, TSV, JSON lines and hub-style datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import CorpusConfig, TokenizerConfig, validate_config
from seq2seq.data import corpus as data
from seq2seq.data.corpus import load_corpus, tokenize
from seq2seq.data.tokenizer import train_tokenizer
from seq2seq.errors import ConfigError, UserError
from tests.runs import write_parallel


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


def test_skip_and_max_pairs_cut_one_file_into_two_disjoint_splits(tmp_path):
    pairs = [(f"s{i}", f"t{i}") for i in range(10)]
    src, tgt = write_parallel(tmp_path, "v", pairs)
    choose = _load(src=src, tgt=tgt, max_pairs=4)
    report = _load(src=src, tgt=tgt, skip_pairs=4)
    assert list(choose["src"]) == ["s0", "s1", "s2", "s3"]
    assert list(report["src"]) == [f"s{i}" for i in range(4, 10)]
    assert list(_load(src=src, tgt=tgt, skip_pairs=8, max_pairs=5)["tgt"]) == ["t8", "t9"]


def test_unreachable_hub_dataset_is_a_user_error():
    with pytest.raises(UserError, match="cannot load hub dataset"):
        _load(hub="surely-not/a-dataset-here", split="train")


def test_empty_and_too_long_pairs_are_dropped_and_counted(tmp_path, demo_pairs):
    short = [(a, b) for a, b in demo_pairs if len(a) < 40 and len(b) < 40][:300]
    pairs = short + [("", "vide"), ("empty", ""), ("word " * 80, "mot " * 80)]
    src, tgt = write_parallel(tmp_path, "a", pairs)
    ds = _load(src=src, tgt=tgt)
    train_tokenizer(TokenizerConfig(vocab_size=200), ds["src"], ds["tgt"], tmp_path / "run")
    tokenized, report = tokenize(ds, tmp_path / "run", tokenizer=True, max_len=60)
    assert (report.read, report.empty, report.too_long) == (303, 2, 1)
    assert len(tokenized) == report.kept == 300
    assert max(tokenized["src_len"]) <= 60 and max(tokenized["tgt_len"]) <= 60
    assert str(report) == "300 pairs kept, 3 dropped (empty 2, too long 1)"


def test_a_pair_of_exactly_max_len_pieces_is_kept_and_one_piece_more_is_dropped(
    tmp_path, demo_pairs
):
    pairs = demo_pairs[:200]
    src, tgt = write_parallel(tmp_path, "a", pairs)
    ds = _load(src=src, tgt=tgt)
    tok = train_tokenizer(TokenizerConfig(vocab_size=200), ds["src"], ds["tgt"], tmp_path / "run")
    longest = max(
        max(len(s), len(t))
        for s, t in zip(tok.src.encode(list(ds["src"])), tok.tgt.encode(list(ds["tgt"])))
    )
    kept, report = tokenize(ds, tmp_path / "run", tokenizer=True, max_len=longest)
    assert report.too_long == 0 and len(kept) == 200
    assert max(max(kept["src_len"]), max(kept["tgt_len"])) == longest + 1  # + EOS
    _, report = tokenize(ds, tmp_path / "run", tokenizer=True, max_len=longest - 1)
    assert report.too_long >= 1


# Pairs each check drops, whatever the tokenizer: 300 pieces > max_len 200; a word or two
# (at most 4 pieces) against 40+ words (at least a piece each) > 9x.
def _words(word, n):
    return " ".join([word] * n)


TOO_LONG = (_words("word", 300), _words("mot", 300))
LOPSIDED = [("Yes", _words("mot", 40)), ("No", _words("non", 45)), (_words("word", 40), "Oui")]


def _messy(base):
    """`base` (distinct, clean pairs) with 3 empty, 1 too long, 3 lopsided and 4 repeated pairs.

    Repeats of base[0] and base[1] come near their first occurrence and at the very end, so
    that `num_proc` workers, which take contiguous shards, see repeats across shards.
    """
    a, b = base[0], base[1]
    middle = len(base) // 2
    return (
        [("", "vide")]
        + base[:middle]
        + [a, ("empty", ""), LOPSIDED[0], TOO_LONG, LOPSIDED[1]]
        + base[middle:]
        + [b, ("", "vide"), LOPSIDED[2], a, a]
    )


def _corpus_and_tokenizer(tmp_path, demo_pairs, offset):
    # Each test its own slice of pairs: the datasets cache is shared by the whole session.
    base = list(dict.fromkeys(demo_pairs))[offset : offset + 200]
    src, tgt = write_parallel(tmp_path, "messy", _messy(base))
    ds = _load(src=src, tgt=tgt)
    train_tokenizer(TokenizerConfig(vocab_size=200), ds["src"], ds["tgt"], tmp_path / "run")
    return base, src, tgt


def _pairs(tokenized):
    return list(zip(tokenized["src"], tokenized["tgt"]))


@pytest.mark.parametrize("num_proc", [1, 2])
def test_each_drop_reason_is_counted_once_and_a_cached_second_run_reports_the_same(
    tmp_path, demo_pairs, monkeypatch, num_proc
):
    base, src, tgt = _corpus_and_tokenizer(tmp_path, demo_pairs, offset=num_proc * 200)
    run = tmp_path / "run"
    options = {"max_len": 200, "num_proc": num_proc, "max_len_ratio": 9.0, "dedup": True}

    first, report = tokenize(_load(src=src, tgt=tgt), run, True, **options)
    expected = {"empty": 3, "too_long": 1, "length_ratio": 3, "duplicates": 4}
    assert (report.read, report.kept, report.dropped()) == (211, 200, expected)
    assert str(report) == (
        "200 pairs kept, 11 dropped (empty 3, too long 1, length ratio 3, duplicates 4)"
    )
    assert _pairs(first) == base  # first occurrences kept, in corpus order

    def tokenize_again(*args, **kwargs):
        raise AssertionError("the second run must load the tokenized corpus from the cache")

    monkeypatch.setattr(data._EncodeAndFilter, "__call__", tokenize_again)
    second, cached = tokenize(_load(src=src, tgt=tgt), run, True, **options)
    assert cached == report
    assert _pairs(second) == base


def test_a_cache_that_lost_its_counts_is_tokenized_again(tmp_path, demo_pairs):
    base, src, tgt = _corpus_and_tokenizer(tmp_path, demo_pairs, offset=600)
    options = {"max_len": 200, "max_len_ratio": 9.0, "dedup": True}
    tokenized, report = tokenize(_load(src=src, tgt=tgt), tmp_path / "run", True, **options)
    saved = list(Path(tokenized.cache_files[0]["filename"]).parent.glob("seq2seq-filter-*.json"))
    assert saved, "the counts are stored beside the cached corpus"
    for path in saved:
        path.unlink()
    again, recounted = tokenize(_load(src=src, tgt=tgt), tmp_path / "run", True, **options)
    assert recounted == report and _pairs(again) == base


def test_filters_that_are_off_keep_their_pairs_and_settings_key_the_cache(tmp_path, demo_pairs):
    base, src, tgt = _corpus_and_tokenizer(tmp_path, demo_pairs, offset=800)
    run = tmp_path / "run"
    ds = _load(src=src, tgt=tgt)
    _, deduped = tokenize(ds, run, True, max_len=200, max_len_ratio=9.0, dedup=True)
    assert deduped.duplicates == 4

    # Same corpus and tokenizer, other settings: counted afresh, not taken from the cache.
    kept, report = tokenize(ds, run, True, max_len=200, max_len_ratio=None, dedup=False)
    assert report.dropped() == {
        "empty": 3,
        "too_long": 1,
        "length_ratio": None,
        "duplicates": None,
    }
    assert str(report) == "207 pairs kept, 4 dropped (empty 3, too long 1)"
    pairs = _pairs(kept)
    a, b = base[0], base[1]
    assert (pairs.count(a), pairs.count(b)) == (4, 2)
    assert all(p in pairs for p in LOPSIDED)


def test_max_len_ratio_defaults_to_mosess_9_may_be_null_and_must_be_at_least_1():
    def config(**values):
        return validate_config({"data": {"train": {"tsv": "a.tsv"}, **values}}, source="test")

    assert config().data.max_len_ratio == 9.0 and config().data.dedup is False
    assert config(max_len_ratio=None).data.max_len_ratio is None
    with pytest.raises(ConfigError, match=r"data\.max_len_ratio: .*greater than or equal to 1"):
        config(max_len_ratio=0.5)


@pytest.mark.slow
def test_training_logs_the_cleaning_report_on_stderr_and_in_metrics(tmp_path, demo_pairs):
    base, src, tgt = _corpus_and_tokenizer(tmp_path, demo_pairs, offset=1000)
    vsrc, vtgt = write_parallel(tmp_path, "valid", [base[0], base[0], ("", "vide"), LOPSIDED[0]])
    config = tmp_path / "config.yaml"
    config.write_text(
        f"run_dir: {tmp_path / 'run'}\n"
        f"data: {{train: {{src: {src}, tgt: {tgt}}}, valid: {{src: {vsrc}, tgt: {vtgt}}}, "
        "max_len: 200, dedup: true}\n"
        "tokenizer: {vocab_size: 200}\n"
        "model: {d_model: 32, heads: 4, encoder_layers: 1, decoder_layers: 1, ffn_dim: 64, "
        "max_positions: 256}\n"
        "train: {max_tokens: 2000, max_steps: 1, valid_bleu_sentences: 0, threads: 1}\n"
    )
    result = CliRunner().invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 0, result.stderr
    assert (
        "train: 200 pairs kept, 11 dropped "
        "(empty 3, too long 1, length ratio 3, duplicates 4)" in result.stderr.splitlines()
    )
    # Validation loses only what the model cannot take: its repeat and lopsided pair stay.
    assert "valid: 3 pairs kept, 1 dropped (empty 1, too long 0)" in result.stderr.splitlines()
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and first["split"] == "data"
    assert first["train"] == {
        "read": 211,
        "kept": 200,
        "dropped": {"empty": 3, "too_long": 1, "length_ratio": 3, "duplicates": 4},
    }
    assert first["valid"]["dropped"] == {
        "empty": 1,
        "too_long": 0,
        "length_ratio": None,
        "duplicates": None,
    }
