"""Config: typed, strict, overridable, with errors that name the key path and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.config import (
    Config,
    check_files,
    load_config,
    load_run_config,
    resolved,
    save_config,
)
from seq2seq.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[1]

MINIMAL = """\
data:
  train: {src: a.en, tgt: a.fr}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_unknown_key_is_reported_with_its_path_and_the_file(tmp_path):
    path = _write(tmp_path, MINIMAL + "train:\n  max_stepz: 10\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "train.max_stepz: unknown key" in str(e.value)
    assert str(path) in str(e.value)
    assert e.value.exit_code == 2


def test_wrong_type_names_the_key_and_the_value(tmp_path):
    path = _write(tmp_path, MINIMAL + "model:\n  d_model: big\n")
    with pytest.raises(ConfigError, match=r"model\.d_model: .*integer.*'big'"):
        load_config(path)


def test_malformed_yaml_gives_the_line(tmp_path):
    path = _write(tmp_path, "data:\n  train: {src: a.en\n")
    with pytest.raises(ConfigError, match=r"invalid YAML \(line \d+"):
        load_config(path)


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "section, message",
    [
        ("model:\n  d_model: 100\n  heads: 8\n", "divisible by heads"),
        ("model:\n  ffn_dim: 0\n", "model.ffn_dim"),
        ("train:\n  max_tokens: -5\n", "train.max_tokens"),
        ("data:\n  train: {src: a.en}\n", "src` and `tgt` must be given together"),
        ("data:\n  train: {src: a.en, tgt: a.fr, tsv: a.tsv}\n", "exactly one corpus source"),
    ],
)
def test_invalid_values_are_rejected(tmp_path, section, message):
    text = section if section.startswith("data") else MINIMAL + section
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text))


def test_set_overrides_are_parsed_as_typed_values(tmp_path):
    path = _write(tmp_path, MINIMAL)
    cfg = load_config(path, ["train.max_steps=100", "model.norm_first=true", "train.lr=3e-4"])
    assert cfg.train.max_steps == 100
    assert cfg.model.norm_first is True
    assert cfg.train.lr == pytest.approx(3e-4)


def test_override_of_an_unknown_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="train.nope: unknown key"):
        load_config(_write(tmp_path, MINIMAL), ["train.nope=1"])


def test_missing_corpus_files_name_the_key_and_the_file(tmp_path):
    cfg = load_config(_write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError, match=r"data\.train\.src: file not found: a\.en"):
        check_files(cfg, "cfg.yaml")


def test_saved_config_is_absolute_and_loads_back_equal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(_write(tmp_path, MINIMAL + "run_dir: runs/x\n"))
    run_dir = tmp_path / "runs" / "x"
    run_dir.mkdir(parents=True)
    save_config(resolved(cfg), run_dir / "config.yaml")
    loaded = load_run_config(run_dir)
    assert loaded.data.train.src == tmp_path / "a.en"
    assert loaded.run_dir == run_dir
    assert loaded == resolved(cfg)


def test_a_folder_without_config_is_not_a_run_directory(tmp_path):
    with pytest.raises(UserError, match="is not a run directory"):
        load_run_config(tmp_path)


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_shipped_configs_validate(name):
    assert isinstance(load_config(REPO / "configs" / name), Config)


def test_readme_config_reference_is_up_to_date():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "config_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
