"""The three user commands end to end, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Trained for a bounded number of steps on a slice of the demo corpus. An untrained model of this
# shape scores BLEU 0.0 on its test split; 600 steps reached 96.0 (valid 97.9) when measured.
TRAIN_STEPS = 600
LEARNED_BLEU = 80.0

CONFIG = """\
run_dir: {run}
data:
  train: {{src: {data}/train.en, tgt: {data}/train.fr}}
  valid: {{src: {data}/valid.en, tgt: {data}/valid.fr}}
  test: {{src: {data}/test.en, tgt: {data}/test.fr}}
  max_len: 48
tokenizer: {{vocab_size: 500}}
model: {{d_model: 96, heads: 4, encoder_layers: 2, decoder_layers: 2, ffn_dim: 256,
        dropout: 0.0, norm_first: true, max_positions: 96}}
train: {{max_tokens: 1536, max_steps: {steps}, lr: 2.0e-3, warmup_steps: 150, log_every: 50,
        eval_every: 300, save_every: 300, valid_bleu_sentences: 100, threads: 2}}
decode: {{max_len_a: 1.5, max_len_b: 8, batch_size: 200}}
"""


def seq2seq(*args: str, stdin: str | None = None, check: bool = True):
    """Run `python -m seq2seq ARGS` and return the completed process."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "seq2seq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"seq2seq {' '.join(args)} failed:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """A demo-corpus slice and a run trained on it through `seq2seq train`."""
    root = tmp_path_factory.mktemp("e2e")
    data, run = root / "data", root / "run"
    seq2seq("demo-data", str(data), "--train", "8000", "--valid", "200", "--test", "300")
    config = root / "config.yaml"
    config.write_text(CONFIG.format(run=run, data=data, steps=TRAIN_STEPS))
    # Train in two legs to check that --resume continues at the right step.
    seq2seq("train", "--config", str(config), "--set", f"train.max_steps={TRAIN_STEPS // 2}")
    seq2seq("train", "--config", str(config), "--resume")
    return {"root": root, "data": data, "run": run, "config": config}


@pytest.mark.slow
def test_train_learns_and_resumes_at_the_right_step(trained):
    run = trained["run"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if r.get("split") == "train"]
    assert steps == sorted(set(steps)), "the resumed leg repeated or skipped logged steps"
    assert steps[-1] == TRAIN_STEPS
    valid = [r for r in records if r.get("split") == "valid"]
    assert valid[-1]["step"] == TRAIN_STEPS and valid[-1]["bleu"] > LEARNED_BLEU
    assert (run / "config.yaml").is_file() and (run / "tokenizer" / "spm.model").is_file()
    assert (run / "checkpoints" / f"step_{TRAIN_STEPS:08d}.safetensors").is_file()


@pytest.mark.slow
def test_train_refuses_to_overwrite_a_run_without_resume(trained):
    proc = seq2seq("train", "--config", str(trained["config"]), check=False)
    assert proc.returncode == 1
    assert "already holds checkpoints" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_evaluate_scores_the_test_split_and_gates_on_min_bleu(trained):
    run, out = trained["run"], trained["root"] / "eval"
    proc = seq2seq("evaluate", "--run", str(run), "--split", "test", "--output-dir", str(out))
    assert "BLEU = " in proc.stdout and "nrefs:1|case:mixed" in proc.stdout
    assert "chrF2 = " in proc.stdout
    assert "length ratio " in proc.stdout and "shorter than half their reference" in proc.stdout
    report = json.loads((out / "test.json").read_text())
    assert report["bleu"] > LEARNED_BLEU
    assert report["sentences"] == 300
    assert 0.9 < report["length"]["ratio"] < 1.1 and report["length"]["by_source_length"]
    assert len((out / "test.hyp").read_text().splitlines()) == 300

    gate = seq2seq(
        "evaluate", "--run", str(run), "--output-dir", str(out), "--min-bleu", "101", check=False
    )
    assert gate.returncode == 1 and "below --min-bleu" in gate.stderr


@pytest.mark.slow
def test_translate_answers_bare_numbers_dates_prices_and_lines_of_two_sentences(trained):
    # What the demo invites users to type, without a sentence around it, or two at once.
    expected = {
        "I have three cats. It is a quarter past five.": (
            "J'ai trois chats. Il est cinq heures et quart."
        ),
        "three hundred and seventy-one": "trois cent soixante et onze",
        "twelve euros and fifty cents": "douze euros et cinquante centimes",
        "the first of May nineteen eighty": "le premier mai mille neuf cent quatre-vingt",
        "a quarter past five": "cinq heures et quart",
    }
    proc = seq2seq("translate", "--run", str(trained["run"]), stdin="\n".join(expected) + "\n")
    assert proc.stdout.splitlines() == list(expected.values())


@pytest.mark.slow
def test_translate_writes_one_line_per_input_line(trained):
    lines = ["I have three cats.", "", "   ", "It is a quarter past five.", "We see one red horse."]
    proc = seq2seq("translate", "--run", str(trained["run"]), stdin="\n".join(lines) + "\n")
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[1] == "" and out[2] == ""
    assert all(out[i] for i in (0, 3, 4))

    src = trained["root"] / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    dst = trained["root"] / "out.txt"
    seq2seq("translate", "--run", str(trained["run"]), "--input", str(src), "--output", str(dst))
    assert dst.read_text() == proc.stdout


@pytest.mark.slow
def test_translate_stops_at_invalid_utf8_naming_the_line_and_keeps_the_old_output(trained):
    src, dst = trained["root"] / "bad.txt", trained["root"] / "kept.txt"
    src.write_bytes(b"I have three cats.\nWe see two dogs.\n\xff\xfe broken\n")
    dst.write_text("earlier results\n")
    proc = seq2seq(
        "translate", "--run", str(trained["run"]), "-i", str(src), "-o", str(dst), check=False
    )
    assert proc.returncode == 1
    assert f"{src}, line 3: invalid UTF-8" in proc.stderr and "Traceback" not in proc.stderr
    assert dst.read_text() == "earlier results\n"


def test_help_lists_the_three_commands():
    proc = seq2seq("--help")
    for command in ("train", "evaluate", "translate"):
        assert command in proc.stdout


def test_every_command_help_shows_a_runnable_example():
    from typer.main import get_command

    from seq2seq.cli.app import app

    commands = get_command(app).commands
    assert {"train", "evaluate", "translate", "export", "info", "attention", "plot"} <= set(
        commands
    )
    for name in commands:
        proc = seq2seq(name, "--help")
        assert "Example" in proc.stdout, name
        assert f"seq2seq {name} " in proc.stdout, name  # the example uses the command itself


def test_shell_completion_completes_commands_and_their_options():
    exe = shutil.which("seq2seq")
    assert exe is not None, "run `make install` first"

    def complete(words: str) -> list[str]:
        env = {
            **os.environ,
            "_SEQ2SEQ_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        proc = subprocess.run([exe], env=env, capture_output=True, text=True, check=True)
        return proc.stdout.split()

    assert complete("seq2seq tr") == ["train", "translate", "translate-file"]
    assert "--beam-size" in complete("seq2seq translate --be")
    # The script `--install-completion` writes for bash (asked for by name: which shell
    # `--show-completion` detects depends on the processes around it).
    env = {**os.environ, "_SEQ2SEQ_COMPLETE": "source_bash"}
    script = subprocess.run([exe], env=env, capture_output=True, text=True, check=True).stdout
    assert "_SEQ2SEQ_COMPLETE=complete_bash" in script and "complete -o default" in script


def test_bad_config_exits_2_with_one_message_and_no_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("data:\n  train: {src: a.en, tgt: a.fr}\nmodel:\n  d_modle: 64\n")
    proc = seq2seq("train", "--config", str(config), check=False)
    assert proc.returncode == 2
    assert "model.d_modle: unknown key" in proc.stderr and str(config) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_corpus_file_exits_2_naming_key_and_file(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("data:\n  train: {src: nope.en, tgt: nope.fr}\n")
    proc = seq2seq("train", "--config", str(config), check=False)
    assert proc.returncode == 2
    assert "data.train.src: file not found: nope.en" in proc.stderr


def test_dry_run_of_the_base_config_prints_the_parameter_count():
    proc = seq2seq("train", "--config", "configs/en-fr.yaml", "--dry-run")
    assert "parameters: " in proc.stdout
    count = int(proc.stdout.split("parameters: ")[1].split()[0].replace(",", ""))
    # Base model, joint 32k vocabulary, tied embeddings: about 60M parameters.
    assert 55_000_000 < count < 66_000_000
    assert "encoder_layers.*.self_attn.qkv_proj.weight" in proc.stdout


def test_translate_from_a_folder_that_is_not_a_run_fails_cleanly(tmp_path):
    proc = seq2seq("translate", "--run", str(tmp_path), stdin="hello\n", check=False)
    assert proc.returncode == 1
    assert "is not a run directory" in proc.stderr and "Traceback" not in proc.stderr


def test_console_script_is_installed():
    exe = shutil.which("seq2seq")
    assert exe is not None, "run `make install` first"
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert proc.stdout.startswith("seq2seq ")


@pytest.mark.slow
def test_evaluate_uses_beam_search_and_reports_ter_and_hypotheses(trained):
    out = trained["root"] / "eval-beam"
    proc = seq2seq("evaluate", "--run", str(trained["run"]), "--output-dir", str(out))
    assert "TER = " in proc.stdout
    report = json.loads((out / "test.json").read_text())
    assert report["decoding"]["search"] == "beam" and report["decoding"]["beam_size"] == 4
    assert len(report["hypotheses"]) == report["sentences"] == 300
    assert {"ter", "ter_signature", "references_sha256", "checkpoint"} <= set(report)


@pytest.mark.slow
def test_regression_gate_fails_only_on_a_significant_drop(trained):
    run, root = trained["run"], trained["root"]
    greedy_json = root / "greedy.json"
    seq2seq(
        "evaluate",
        "--run",
        str(run),
        "--beam-size",
        "1",
        "--json",
        str(greedy_json),
        "--output-dir",
        str(root / "g"),
    )
    same = seq2seq(
        "evaluate",
        "--run",
        str(run),
        "--beam-size",
        "1",
        "--baseline",
        str(greedy_json),
        "--fail-on-regression",
        "--output-dir",
        str(root / "g2"),
    )
    assert "Δ = +0.00" in same.stdout and "(no difference;" in same.stdout

    # A baseline that was perfect: today's model is significantly worse, and the gate says so.
    perfect = json.loads(greedy_json.read_text())
    perfect["hypotheses"] = (trained["data"] / "test.fr").read_text().splitlines()
    perfect_json = root / "perfect.json"
    perfect_json.write_text(json.dumps(perfect))
    gate = seq2seq(
        "evaluate",
        "--run",
        str(run),
        "--beam-size",
        "1",
        "--baseline",
        str(perfect_json),
        "--fail-on-regression",
        "--output-dir",
        str(root / "g3"),
        check=False,
    )
    assert gate.returncode == 1, gate.stderr
    assert "dropped significantly" in gate.stderr and "p = " in gate.stdout

    other = seq2seq(
        "evaluate",
        "--run",
        str(run),
        "--split",
        "valid",
        "--baseline",
        str(greedy_json),
        "--output-dir",
        str(root / "g4"),
        check=False,
    )
    assert other.returncode == 1 and "other references" in other.stderr


@pytest.mark.slow
def test_translate_nbest_prints_scored_hypotheses_per_line(trained):
    lines = ["I have three cats.", "", "We see two dogs."]
    proc = seq2seq(
        "translate",
        "--run",
        str(trained["run"]),
        "--beam-size",
        "4",
        "--nbest",
        "3",
        stdin="\n".join(lines) + "\n",
    )
    rows = [r.split(" ||| ") for r in proc.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2]
    scores = [float(r[2]) for r in rows if r[0] == "0"]
    assert scores == sorted(scores, reverse=True)
    assert rows[3][1] == ""


@pytest.mark.slow
def test_translate_into_a_closed_pipe_ends_quietly(trained):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seq2seq",
            "translate",
            "--run",
            str(trained["run"]),
            "--beam-size",
            "1",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    proc.stdin.write(b"I have three cats.\n" * 1500)
    proc.stdin.close()
    assert proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    proc.wait(timeout=300)
    err = proc.stderr.read().decode()
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert proc.returncode in (0, -13)  # finished, or ended by SIGPIPE like any filter


@pytest.mark.slow
def test_an_over_long_input_is_truncated_with_a_warning(trained):
    long_line = " ".join(["three hundred"] * 200)
    proc = seq2seq(
        "translate",
        "--run",
        str(trained["run"]),
        "--beam-size",
        "1",
        stdin=f"I have two cats.\n{long_line}\n",
    )
    assert len(proc.stdout.splitlines()) == 2
    assert "truncated to the model's maximum" in proc.stderr
