"""`seq2seq export`: the exported CTranslate2 model translates exactly as the project does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from seq2seq.cli import app
from seq2seq.config import run_decode
from seq2seq.translator import load_translator

from .conftest import write_parallel

ctranslate2 = pytest.importorskip("ctranslate2")

CONFIG = """\
run_dir: {run}
data: {{train: {{src: {src}, tgt: {tgt}}}, max_len: 40}}
tokenizer: {{vocab_size: 200}}
model: {{d_model: 32, heads: 4, encoder_layers: 2, decoder_layers: 2, ffn_dim: 64,
        dropout: 0.0, norm_first: {norm_first}, max_positions: 64}}
train: {{max_tokens: 600, max_steps: 40, lr: 3.0e-3, warmup_steps: 10, eval_every: 1000,
        save_every: 40, threads: 1}}
"""


def _run(folder: Path, pairs, norm_first: bool) -> Path:
    src, tgt = write_parallel(folder, "train", pairs)
    config = folder / "config.yaml"
    config.write_text(CONFIG.format(run=folder / "run", src=src, tgt=tgt, norm_first=norm_first))
    result = CliRunner().invoke(app, ["--quiet", "train", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return folder / "run"


@pytest.mark.parametrize("norm_first", [False, True])
def test_exported_ctranslate2_model_gives_the_projects_greedy_translations(
    tmp_path, demo_pairs, norm_first
):
    run = _run(tmp_path, demo_pairs[:600], norm_first)
    out = tmp_path / "ct2"
    result = CliRunner().invoke(
        app, ["export", "--run", str(run), "--format", "ctranslate2", str(out)]
    )
    assert result.exit_code == 0, result.output
    # Self-contained: the SentencePiece model(s) that make its pieces are beside the weights.
    tokenizer_files = sorted(p.name for p in (run / "tokenizer").glob("*.model"))
    assert tokenizer_files and sorted(p.name for p in out.glob("*.model")) == tokenizer_files

    sources = [a for a, _ in demo_pairs[600:660]]
    cap = 20
    greedy = run_decode(run, beam_size=1, max_len_a=0.0, max_len_b=cap)
    translator, _ = load_translator(run, device="cpu", decode=greedy)
    torch.manual_seed(0)
    ours = translator.translate(sources)
    ct2 = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    pieces = translator.tokenizer.src.encode(sources, out_type=str)
    # The project's cap counts EOS, which it forces at the cap; CTranslate2's does not.
    results = ct2.translate_batch(
        pieces, beam_size=1, max_decoding_length=cap - 1, suppress_sequences=[["<pad>"], ["<s>"]]
    )
    theirs = [
        " ".join(translator.tokenizer.tgt.decode_pieces(r.hypotheses[0]).split()) for r in results
    ]
    assert theirs == ours


def test_export_into_a_non_empty_folder_or_an_unknown_format_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = CliRunner().invoke(app, ["export", "--run", str(tmp_path), str(tmp_path / "out")])
    assert result.exit_code == 1 and "is not an empty folder" in result.stderr
    result = CliRunner().invoke(
        app, ["export", "--run", str(tmp_path), "--format", "onnx", str(tmp_path / "x")]
    )
    assert result.exit_code == 1 and "unknown export format" in result.stderr
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
