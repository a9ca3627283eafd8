"""`seq2seq clean` and data.clean: OpusCleaner's rule filters, language ID, the two dedups;
every input pair kept or rejected under one filter; bad input refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest

from seq2seq.config import CleanConfig, load_config
from seq2seq.data import clean, filters
from seq2seq.data.clean import clean_dataset, judge, verdict_of
from seq2seq.data.corpus import prepare_data
from seq2seq.decode.dual_xent import dual_xent
from seq2seq.decode.translator import load_translator
from seq2seq.errors import ConfigError
from tests.factories import untrained_run
from tests.runs import cli, write_parallel, write_tiny_config

GOOD = [
    ("The file could not be opened because it does not exist.",
     "Le fichier n'a pas pu être ouvert car il n'existe pas."),
    ("Click the button to save your changes before closing the window.",
     "Cliquez sur le bouton pour enregistrer vos modifications avant de fermer la fenêtre."),
    ("The printer is out of paper, please add some more sheets.",
     "L'imprimante n'a plus de papier, veuillez ajouter quelques feuilles."),
]  # fmt: skip
NOISY = {
    "empty": ("An empty translation is no translation at all.", ""),
    "length": ("word " * 151, "mot " * 151),
    "alpha_ratio": ("12 34 56 78 = 90 + 11", "12 34 56 78 = 90 + 11 ..."),
    "token_ratio": (
        "The document has been printed on both sides of every sheet of paper.",
        "Imprimé.",
    ),
    "numbers": (
        "You have 3 new messages in your inbox this morning.",
        "Vous avez 5 nouveaux messages dans votre boîte de réception ce matin.",
    ),
    "urls": (
        "Read the manual at https://example.org/manual before you start.",
        "Lisez le manuel sur https://example.com/manuel avant de commencer.",
    ),
    "copy": (
        "Open the settings dialog and choose a printer.",
        "open the Settings dialog, and choose a printer!",
    ),
    "langid": (
        "The file could not be opened because it does not exist.",
        "Die Datei konnte nicht geöffnet werden, weil sie nicht existiert.",
    ),
}


def judged(pairs: list[tuple[str, str]], **settings) -> list[str]:
    verdicts = judge(
        [([s for s, _ in pairs], [t for _, t in pairs])], CleanConfig(**settings), ("en", "fr")
    )
    names = {verdict_of(n): n for n in CleanConfig().active()}
    return [names.get(int(v), "kept") for v in verdicts]


def test_white_space_runs_become_one_space_and_invisible_characters_go():
    assert filters.normalise_whitespace(" a\t\tb \u200bc\u00a0 d\ufeff ") == "a b c d"


@pytest.mark.parametrize(
    "separator", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f"], ids=ascii
)
def test_carriage_returns_and_other_white_space_controls_separate_words(separator):
    assert filters.normalise_whitespace(f"lone{separator}carriage") == "lone carriage"


@pytest.mark.parametrize(
    "text",
    [
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian mi-khaham: ZWNJ is spelling
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # one family emoji joined by ZWJ
    ],
    ids=["persian-zwnj", "emoji-zwj"],
)
def test_zero_width_joiners_and_non_joiners_are_kept(text):
    assert filters.normalise_whitespace(text) == text


def test_other_control_characters_still_go():
    assert filters.normalise_whitespace("a\x00b\x07c\x0e\x1bd\x7f") == "abcd"


@pytest.mark.parametrize("name", sorted(NOISY))
def test_each_kind_of_noise_is_rejected_by_its_own_filter(name):
    assert judged([*GOOD, NOISY[name]]) == ["kept"] * 3 + [name]


@pytest.mark.parametrize("name", sorted(NOISY))
def test_a_filter_switched_off_keeps_what_it_would_reject(name):
    pair = NOISY[name]
    assert judged([pair], skip=[name])[0] != name


def test_filters_are_tunable():
    pair = ("One two three four five.", "Un deux trois quatre cinq six sept huit neuf dix onze.")
    assert judged([pair]) == ["token_ratio"]
    assert judged([pair], min_word_ratio=0.4) == ["kept"]
    assert judged([pair], max_words=8) == ["length"]


def test_numbers_are_compared_whatever_their_grouping():
    assert filters.number_overlap("It costs 1,000.50 euros", "Il coûte 1 000,50 euros") == 1.0
    assert filters.number_overlap("Page 3 of 10", "Page 3 sur 12") == pytest.approx(1 / 3)


def test_a_pair_of_the_same_numbers_is_no_copy():
    assert not filters.copied("3.14", "3,14")
    assert filters.copied("Version 2: PDF", "version 3 - pdf")


def test_repeated_pairs_keep_the_first_and_repeated_targets_keep_the_surest_source():
    pair = GOOD[0]
    weak = ("Not there.", pair[1])  # short: its language is told with less confidence
    assert judged([pair, GOOD[1], pair], skip=["token_ratio"]) == ["kept", "kept", "dedup"]
    assert judged([weak, pair], skip=["token_ratio"]) == ["dedup_target", "kept"]
    # Without language ID there is no surer pair: the first stays.
    assert judged([weak, pair], skip=["token_ratio", "langid"]) == ["kept", "dedup_target"]


def test_among_equal_keys_the_highest_rank_then_the_earliest_kept_pair_stays():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 40, 500).astype(np.uint64)
    ranks = rng.integers(0, 3, 500).astype(np.float32)  # ties of key and rank: the first stays
    start = np.where(rng.random(500) < 0.2, 1, clean.KEPT).astype(np.uint8)  # already rejected
    for rank in (None, ranks):
        verdicts = start.copy()
        clean._keep_first(verdicts, keys, 9, rank)
        best: dict[int, int] = {}
        for i in np.flatnonzero(start == clean.KEPT):
            k, r = int(keys[i]), 0.0 if rank is None else rank[i]
            if k not in best or r > (0.0 if rank is None else rank[best[k]]):
                best[k] = i
        expected = start.copy()
        expected[[i for i in np.flatnonzero(start == clean.KEPT) if best[int(keys[i])] != i]] = 9
        assert verdicts.tolist() == expected.tolist()


def test_worker_processes_judge_blocks_as_one_process_does(monkeypatch):
    monkeypatch.setattr(clean, "BLOCK", 2)  # blocks this size or more go to the workers
    pairs = [*GOOD, *NOISY.values(), GOOD[1]]
    blocks = [
        ([s for s, _ in pairs[i : i + 3]], [t for _, t in pairs[i : i + 3]])
        for i in range(0, len(pairs), 3)
    ]
    alone = judge(blocks, CleanConfig(processes=1), ("en", "fr"))
    assert list(judge(blocks, CleanConfig(processes=2), ("en", "fr"))) == list(alone)
    assert list(alone).count(verdict_of("dedup")) == 1


def test_an_unknown_filter_or_a_value_out_of_range_is_one_clear_error(tmp_path):
    config = write_tiny_config(tmp_path, GOOD, data={"clean": {"skip": ["typos"]}})
    with pytest.raises(ConfigError, match="unknown filter 'typos'; the filters are whitespace"):
        load_config(config)
    for key, value, message in [
        ("min_alpha_words", 1.5, "less than or equal to 1"),
        ("max_words", 0, "greater than 0"),
        ("min_word_ratio", 3.0, "min_word_ratio .3.0. exceeds max_word_ratio"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(config, ["data.clean.skip=[]", f"data.clean.{key}={value}"])


def clean_cli(tmp_path: Path, pairs, *options, code: int = 0):
    src, tgt = write_parallel(tmp_path, "corpus", pairs)
    out = tmp_path / "out"
    result = cli(
        "clean", "--src", src, "--tgt", tgt, "--src-lang", "en", "--tgt-lang", "fr",
        "--out", out, *options, code=code,
    )  # fmt: skip
    return out, result


@pytest.mark.parametrize("processes", ["1", "2"])
def test_every_input_pair_is_kept_or_rejected_with_its_filter(tmp_path, processes):
    pairs = [*GOOD, *NOISY.values(), GOOD[0]]
    out, _ = clean_cli(tmp_path, pairs, "--processes", processes)
    kept = list(
        zip((out / "kept.en").read_text().splitlines(), (out / "kept.fr").read_text().splitlines())
    )
    rejected = [line.split("\t") for line in (out / "rejected.tsv").read_text().splitlines()]
    assert kept == GOOD
    assert sorted(r[0] for r in rejected) == sorted([*NOISY, "dedup"])
    assert len(kept) + len(rejected) == len(pairs)
    report = json.loads((out / "report.json").read_text())
    assert (report["read"], report["kept"]) == (len(pairs), 3)
    assert report["rejected"]["numbers"] == 1 and report["rejected"]["dedup_target"] == 0
    assert report["examples"]["urls"] == [list(NOISY["urls"])]


def test_options_switch_filters_off_and_tune_them(tmp_path):
    pairs = [NOISY["numbers"], NOISY["token_ratio"]]
    out, _ = clean_cli(
        tmp_path,
        pairs,
        "--skip",
        "numbers",
        "--set",
        "min_word_ratio=0.1",
        "--set",
        "max_word_ratio=20",
    )
    assert (out / "kept.en").read_text().splitlines() == [s for s, _ in pairs]
    assert json.loads((out / "report.json").read_text())["rejected"]["numbers"] is None


@pytest.mark.parametrize(
    "options, message",
    [
        (["--skip", "typos"], "unknown filter 'typos'"),
        (["--set", "max_words=-1"], "max_words: Input should be greater than 0"),
        (["--set", "colour=blue"], "colour: unknown key"),
    ],
)
def test_an_unknown_filter_or_setting_is_refused(tmp_path, options, message):
    out, result = clean_cli(tmp_path, GOOD, *options, code=2)
    assert message in result.output
    assert not out.exists()


def test_files_of_different_lengths_are_refused_before_anything_is_written(tmp_path):
    src, tgt = write_parallel(tmp_path, "corpus", GOOD)
    tgt.write_text("".join(t + "\n" for _, t in GOOD[:2]), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.en").write_text("an earlier run's output\n")
    result = cli(
        "clean", "--src", src, "--tgt", tgt, "--src-lang", "en", "--tgt-lang", "fr", "--out", out,
        code=1,
    )  # fmt: skip
    assert f"{src} has 3 lines, {tgt} has 2 lines" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["kept.en"]
    assert (out / "kept.en").read_text() == "an earlier run's output\n"


def test_invalid_utf8_names_the_file_and_line_and_writes_nothing(tmp_path):
    src, tgt = write_parallel(tmp_path, "corpus", GOOD)
    tgt.write_bytes(tgt.read_bytes().replace(b"Cliquez", b"Cliqu\xe9z"))
    out = tmp_path / "out"
    result = cli(
        "clean", "--src", src, "--tgt", tgt, "--src-lang", "en", "--tgt-lang", "fr", "--out", out,
        code=1,
    )  # fmt: skip
    assert f"{tgt}, line 2: invalid UTF-8" in result.output
    assert not out.exists()


def test_training_data_is_cleaned_by_the_same_filters_when_enabled():
    pairs = [*GOOD, *NOISY.values()]
    ds = datasets.Dataset.from_dict({"src": [s for s, _ in pairs], "tgt": [t for _, t in pairs]})
    kept = clean_dataset(ds, CleanConfig(enabled=True, processes=1), ("en", "fr"))
    assert list(zip(kept["src"], kept["tgt"])) == GOOD


def test_a_run_enabling_data_clean_trains_on_the_kept_pairs_only(tmp_path, demo_pairs):
    pairs = [*demo_pairs[:200], *NOISY.values()]
    clean = {"enabled": True, "processes": 1}
    cfg = load_config(write_tiny_config(tmp_path, pairs, data={"clean": clean}))
    data = prepare_data(cfg, reuse_tokenizer=False)
    noisy_targets = {t for _, t in NOISY.values()}
    assert not noisy_targets & set(data.train["tgt"])
    assert 190 <= data.reports["train"].read <= 200  # the demo pairs are clean: few of them go


def test_cleaning_is_off_by_default(tmp_path):
    assert load_config(write_tiny_config(tmp_path, GOOD)).data.clean.enabled is False


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, demo_pairs) -> tuple[Path, Path]:
    """A forward and a backward run, random (what is tested is the plumbing, not the scores)."""
    fwd = untrained_run(tmp_path_factory.mktemp("fwd"), demo_pairs[:300])
    bwd = untrained_run(tmp_path_factory.mktemp("bwd"), [(b, a) for a, b in demo_pairs[:300]])
    return fwd, bwd


def test_dual_cross_entropy_is_finite_and_infinite_past_the_models_positions(two_runs):
    fwd, bwd = (load_translator(run, None, "cpu")[0] for run in two_runs)
    src, tgt = ["I have three cats.", "word " * 100], ["J'ai trois chats.", "mot " * 100]
    scores = dual_xent(fwd, bwd, src, tgt)
    assert 0 < scores[0] < float("inf") and scores[1] == float("inf")


@pytest.mark.parametrize("most, kept", [("1000", 3), ("0", 0)])
def test_forward_and_backward_runs_add_the_dual_xent_filter_after_the_rules(
    tmp_path, two_runs, demo_pairs, most, kept
):
    clean = [p for p in demo_pairs[:40] if judged([p]) == ["kept"]][:3]  # the runs' own words
    out, _ = clean_cli(
        tmp_path, [*clean, NOISY["numbers"]], "--forward", two_runs[0], "--backward", two_runs[1],
        "--max-dual-xent", most, "--device", "cpu",
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["kept"] == kept
    assert report["rejected"]["dual_xent"] == 3 - kept and report["rejected"]["numbers"] == 1


def test_a_forward_run_needs_a_backward_one(tmp_path, two_runs):
    _, result = clean_cli(tmp_path, GOOD, "--forward", two_runs[0], code=2)
    assert "give --forward and --backward together" in result.output
