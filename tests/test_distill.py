"""`seq2seq distill`: a teacher's n-best closest to the reference, chunks a killed or sharded
run continues from, the cross-entropy filter, provenance, and the student trained on it all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from seq2seq.config import load_config
from seq2seq.data.layouts import tokenizer_files
from seq2seq.distill.chunks import Chunk, Part, parse_shard, plan
from seq2seq.distill.join import _filter
from seq2seq.distill.select import closest_to_reference
from seq2seq.errors import UserError
from seq2seq.run.checkpoint import best_or_latest
from tests.factories import untrained_run
from tests.hf_models import LAYOUTS, bpe_model, save_m2m100, save_marian
from tests.runs import cli, write_parallel, write_tiny_config


def test_the_hypothesis_closest_to_the_reference_by_chrf_is_kept():
    nbest = ["le chat noir", "le chien noir dort", "un chien"]
    rank, kept, first = closest_to_reference(nbest, "le chien noir dort")
    assert rank == 1 and kept == 100.0 and first < kept


def test_ties_keep_the_better_ranked_hypothesis():
    assert closest_to_reference(["a b", "a b"], "c d")[0] == 0


def test_the_filter_drops_the_worst_scored_percent_and_keeps_the_order():
    part = Part("train", "t", [str(i) for i in range(20)], None)
    rows = [(part, {"i": i, "bw": -float(i % 7)}) for i in range(20)]
    kept, dropped = _filter(rows, 10.0)
    assert [r["bw"] for _, r in dropped] == [-6.0, -6.0]
    assert [r["i"] for _, r in kept] == [i for i in range(20) if i % 7 != 6]


def test_shards_split_the_chunks_every_nth():
    part = Part("train", "t", ["x"] * 25, None)
    chunks = plan([part], 10)
    assert [(c.start, c.stop) for c in chunks] == [(0, 10), (10, 20), (20, 25)]
    assert isinstance(chunks[0], Chunk) and chunks[2].name == "train-000002"
    assert parse_shard("1/4") == (1, 4)


@pytest.mark.parametrize("text", ["4/4", "-1/2", "1", "a/b", "0/0"])
def test_a_shard_out_of_range_is_one_clear_error(text):
    with pytest.raises(UserError, match="--shard"):
        parse_shard(text)


@pytest.fixture
def teacher_and_student(tmp_path, demo_pairs):
    """An untrained tiny teacher (real pieces and search) and a tiny student config on 23 pairs."""
    (tmp_path / "teacher").mkdir()
    teacher = untrained_run(tmp_path / "teacher", demo_pairs[:200])
    student = tmp_path / "student"
    student.mkdir()
    src, tgt = write_parallel(student, "corpus", demo_pairs[200:223])
    config = write_tiny_config(student, [], data={"train": {"src": str(src), "tgt": str(tgt)}})
    return teacher, config


def _distill(teacher: Path, config: Path, *extra: str, code: int = 0):
    args = ["distill", "--teacher", str(teacher), "-c", str(config), "--chunk-lines", "5"]
    return cli(*args, "--beam", "3", "--nbest", "2", "--data-only", *extra, code=code)


def _outputs(directory: Path) -> dict[str, str]:
    names = ("train.en", "train.fr", "provenance.tsv")
    return {n: (directory / n).read_text(encoding="utf-8") for n in names}


def test_distill_writes_the_corpus_its_provenance_and_a_report(teacher_and_student):
    teacher, config = teacher_and_student
    result = _distill(teacher, config)
    directory = load_config(config).run_dir / "distill"
    out = _outputs(directory)
    report = json.loads((directory / "report.json").read_text())
    assert report["pairs_in"] == 23
    assert report["pairs_out"] + report["dropped_empty"] == 23
    assert len(out["train.en"].splitlines()) == len(out["train.fr"].splitlines())
    provenance = [line.split("\t") for line in out["provenance.tsv"].splitlines()]
    assert len(provenance) == report["pairs_out"]
    assert all(p[0] == "train" and int(p[2]) in (0, 1) for p in provenance)
    assert report["chrf_kept"] >= report["chrf_1best"]
    assert f"distilled {report['pairs_out']}" in result.output
    assert not list((load_config(config).run_dir).glob("checkpoints/*"))  # --data-only


def test_a_killed_distillation_redoes_only_the_missing_chunks(teacher_and_student):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    directory = load_config(config).run_dir / "distill"
    whole = _outputs(directory)
    chunks = sorted((directory / "chunks").glob("*.jsonl"))
    assert len(chunks) == 5  # 23 lines in chunks of 5
    stamps = {c: c.stat().st_mtime_ns for c in chunks}
    chunks[2].unlink()  # killed while making the third chunk
    _distill(teacher, config)
    assert _outputs(directory) == whole
    assert [c.stat().st_mtime_ns == stamps[c] for c in chunks] == [True, True, False, True, True]


def test_shards_made_apart_join_into_the_same_corpus(teacher_and_student, tmp_path):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    whole = _outputs(load_config(config).run_dir / "distill")
    other = tmp_path / "sharded.yaml"
    sharded_run = tmp_path / "sharded-run"
    overrides = ("--set", f"run_dir={sharded_run}")
    first = _distill(teacher, config, "--shard", "0/2", *overrides)
    assert "shard 0/2 done; 2 chunks of other shards still to make" in first.output
    assert not (sharded_run / "distill" / "train.en").exists()
    _distill(teacher, config, "--shard", "1/2", *overrides)
    _distill(teacher, config, *overrides)  # joins without decoding anything
    assert _outputs(sharded_run / "distill") == whole
    assert not other.exists()


def test_the_backward_filter_drops_the_worst_pairs_and_says_which(
    teacher_and_student, tmp_path, demo_pairs
):
    teacher, config = teacher_and_student
    fr_en = [(b, a) for a, b in demo_pairs[:200]]
    (tmp_path / "backward").mkdir()
    backward = untrained_run(
        tmp_path / "backward", fr_en, data={"src_lang": "fr", "tgt_lang": "en"}
    )
    _distill(teacher, config, "--backward", str(backward), "--filter-percent", "20")
    report = json.loads((load_config(config).run_dir / "distill" / "report.json").read_text())
    assert report["dropped_by_filter"] == (23 - report["dropped_empty"]) * 20 // 100
    worst = report["filter_examples"][0]["backward_per_token"]
    provenance = (load_config(config).run_dir / "distill" / "provenance.tsv").read_text()
    assert all(float(line.split("\t")[5]) >= worst for line in provenance.splitlines())


def test_a_backward_run_in_the_wrong_direction_is_refused(teacher_and_student):
    teacher, config = teacher_and_student
    result = _distill(teacher, config, "--backward", str(teacher), code=1)
    assert "backward run" in result.output and "fr → en" in result.output


def test_a_teacher_of_other_languages_is_refused_before_anything_is_written(teacher_and_student):
    teacher, config = teacher_and_student
    result = _distill(teacher, config, "--set", "data.tgt_lang=de", code=1)
    assert "teacher" in result.output and "en → de" in result.output
    assert not (load_config(config).run_dir / "distill" / "chunks").exists()


def test_a_monolingual_file_with_invalid_utf8_names_its_line(teacher_and_student, tmp_path):
    teacher, config = teacher_and_student
    mono = tmp_path / "mono.en"
    mono.write_bytes(b"a fine line\nbad \xff byte\n")
    result = _distill(teacher, config, "--mono", str(mono), code=1)
    assert "mono.en, line 2: invalid UTF-8" in result.output


def test_monolingual_lines_are_distilled_with_the_one_best(teacher_and_student, tmp_path):
    teacher, config = teacher_and_student
    mono = tmp_path / "mono.en"
    mono.write_text("one cat\ntwo dogs\nthree birds\n", encoding="utf-8")
    _distill(teacher, config, "--mono", str(mono))
    provenance = (load_config(config).run_dir / "distill" / "provenance.tsv").read_text()
    mono_rows = [r.split("\t") for r in provenance.splitlines() if r.startswith("mono1")]
    assert [(r[1], r[2], r[3]) for r in mono_rows] == [
        ("1", "0", ""),
        ("2", "0", ""),
        ("3", "0", ""),
    ]


def test_other_settings_than_the_chunks_on_disk_are_refused(teacher_and_student):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    result = _distill(teacher, config, "--beam", "4", code=1)
    assert "other settings (beam differ)" in result.output


@pytest.mark.slow
def test_distill_then_trains_the_student_on_the_teachers_translations(teacher_and_student):
    teacher, config = teacher_and_student
    args = ["distill", "--teacher", str(teacher), "-c", str(config), "--beam", "2", "--nbest", "2"]
    result = cli(*args)
    run = load_config(config).run_dir
    assert "trained the student 2 steps" in result.output
    assert (run / "shortlist.safetensors").is_file()
    saved = load_config(run / "config.yaml")
    assert saved.data.train.src == (run / "distill" / "train.en").resolve()


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory, demo_pairs) -> Path:
    return bpe_model(tmp_path_factory.mktemp("distill-spm"), demo_pairs[:600])


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, languages", [("marian", ()), ("m2m100", ()), ("nllb", ("eng_Latn", "fra_Latn"))]
)
def test_teachers_we_did_not_train_distil_the_students_data(
    family, languages, teacher_and_student, tmp_path, request, sentencepiece_model
):
    _, config = teacher_and_student
    hf = tmp_path / "hf"
    if family == "marian":
        save_marian(
            hf, request.getfixturevalue("marian_tokenizer"), LAYOUTS["tied-swish-bias-safetensors"]
        )
    else:
        save_m2m100(hf, family, sentencepiece_model)
    cli("--quiet", "import", "hf", hf, tmp_path / "teacher-run")
    codes = ["--src-lang", languages[0], "--tgt-lang", languages[1]] if languages else []
    _distill(tmp_path / "teacher-run", config, *codes)
    report = json.loads((load_config(config).run_dir / "distill" / "report.json").read_text())
    assert report["pairs_in"] == 23 and report["teacher"].endswith("teacher-run")


def _chunk_stamps(directory: Path) -> dict[Path, int]:
    return {c: c.stat().st_mtime_ns for c in sorted((directory / "chunks").glob("*.jsonl"))}


def test_a_corpus_changed_in_place_is_refused_naming_it(teacher_and_student):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    directory = load_config(config).run_dir / "distill"
    whole, stamps = _outputs(directory), _chunk_stamps(directory)
    (directory / "chunks" / "train-000002.jsonl").unlink()  # killed while making chunk 3
    src = load_config(config).data.train.src
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[12] = "a different sentence of the same corpus"  # as many lines as before
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = _distill(teacher, config, code=1)
    assert f"the training corpus's source side {src} changed since" in result.output
    assert "Traceback" not in result.output
    del stamps[directory / "chunks" / "train-000002.jsonl"]
    assert _chunk_stamps(directory) == stamps and _outputs(directory) == whole


def test_a_monolingual_file_changed_in_place_is_refused_naming_it(teacher_and_student, tmp_path):
    teacher, config = teacher_and_student
    mono = tmp_path / "mono.en"
    mono.write_text("one cat\ntwo dogs\n", encoding="utf-8")
    _distill(teacher, config, "--mono", str(mono))
    mono.write_text("one cat\ntwo birds\n", encoding="utf-8")
    result = _distill(teacher, config, "--mono", str(mono), code=1)
    assert f"the monolingual file {mono} changed since" in result.output


@pytest.mark.parametrize("what", ["weights", "tokenizer"])
def test_a_teacher_changed_at_the_same_path_is_refused_naming_what_changed(
    teacher_and_student, what
):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    directory = load_config(config).run_dir / "distill"
    stamps = _chunk_stamps(directory)
    if what == "weights":  # retrained: other weights in the same checkpoint file
        path = best_or_latest(teacher)
        tensors = load_file(path)
        tensors = {k: v + 0.01 if v.is_floating_point() else v for k, v in tensors.items()}
        save_file(tensors, path)
    else:
        path = tokenizer_files(teacher, load_config(teacher / "config.yaml").tokenizer)[0]
        path.write_bytes(path.read_bytes() + b"\0")
    result = _distill(teacher, config, code=1)
    assert f"the teacher's {what} {path} changed since" in result.output
    assert _chunk_stamps(directory) == stamps


def test_a_distillation_without_content_digests_is_refused_with_a_way_out(teacher_and_student):
    teacher, config = teacher_and_student
    _distill(teacher, config)
    directory = load_config(config).run_dir / "distill"
    manifest = json.loads((directory / "manifest.json").read_text())
    del manifest["inputs"]  # as an older seq2seq wrote it
    (directory / "manifest.json").write_text(json.dumps(manifest))
    stamps = _chunk_stamps(directory)
    result = _distill(teacher, config, code=1)
    assert "no content digests" in result.output and "fresh" in result.output
    assert _chunk_stamps(directory) == stamps


def test_pairs_too_long_for_the_backward_run_are_left_unscored_and_counted(
    teacher_and_student, tmp_path, demo_pairs
):
    teacher, config = teacher_and_student
    src = load_config(config).data.train.src
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[16] = " ".join(["three hundred and seventy-one cats"] * 40)  # chunk 4, its line 2
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (tmp_path / "backward").mkdir()
    fr_en = [(b, a) for a, b in demo_pairs[:200]]
    backward = untrained_run(
        tmp_path / "backward", fr_en, data={"src_lang": "fr", "tgt_lang": "en"}
    )
    result = _distill(teacher, config, "--backward", str(backward), "--filter-percent", "20")
    assert "too long for the backward run 1" in result.output
    directory = load_config(config).run_dir / "distill"
    report = json.loads((directory / "report.json").read_text())
    assert report["dropped_unscored"] == 1
    assert report["unscored_examples"][0]["part"] == "train"
    assert report["unscored_examples"][0]["line"] == 17
    scored = 23 - report["dropped_empty"] - 1
    assert report["dropped_by_filter"] == scored * 20 // 100
    provenance = (directory / "provenance.tsv").read_text().splitlines()
    assert "17" not in [row.split("\t")[1] for row in provenance]
    assert all(row.split("\t")[5] != "" for row in provenance)
