"""`seq2seq export`: the exported CTranslate2 model translates exactly as the project does, and a
run exported as a Hugging Face model imports back to the same model."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import run_decode
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.data.tokenizer import BOS_ID
from seq2seq.decode.translator import load_translator
from tests.factories import untrained_run
from tests.runs import cli, train_from

ctranslate2 = pytest.importorskip("ctranslate2")


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [False, True])
def test_exported_ctranslate2_model_gives_the_projects_greedy_translations(
    tmp_path, tiny_config, demo_pairs, norm_first
):
    config = tiny_config(
        tmp_path,
        demo_pairs[:600],
        tokenizer={"vocab_size": 200},
        model={"encoder_layers": 2, "norm_first": norm_first},
        train={
            "max_steps": 40,
            "save_every": 40,
            "max_tokens": 600,
            "lr": 3e-3,
            "warmup_steps": 10,
        },
    )
    run = train_from(config)
    out = tmp_path / "ct2"
    result = CliRunner().invoke(
        app, ["export", "--run", str(run), "--format", "ctranslate2", str(out)]
    )
    assert result.exit_code == 0, result.output
    # Self-contained: the SentencePiece model(s) that make its pieces are beside the weights.
    tokenizer_files = sorted(p.name for p in (run / "tokenizer").glob("*.model"))
    assert tokenizer_files and sorted(p.name for p in out.glob("*.model")) == tokenizer_files

    theirs, ours = _greedy_translations(run, out, [a for a, _ in demo_pairs[600:660]])
    assert theirs == ours


@pytest.mark.parametrize("norm_first", [False, True])
def test_an_untrained_runs_ctranslate2_export_decodes_as_the_project_greedily(
    tmp_path, demo_pairs, norm_first
):
    run = untrained_run(tmp_path, demo_pairs[:300], model={"norm_first": norm_first})
    cli("--quiet", "export", "--run", run, "--format", "ctranslate2", tmp_path / "ct2")
    theirs, ours = _greedy_translations(run, tmp_path / "ct2", [a for a, _ in demo_pairs[600:620]])
    assert theirs == ours


def test_a_run_exported_as_hugging_face_imports_back_with_the_same_ids_and_logits(
    tmp_path, demo_pairs
):
    run = untrained_run(tmp_path, demo_pairs[:300])
    cli("--quiet", "export", "--run", run, "--format", "hf", tmp_path / "hf")
    cli("--quiet", "import", "hf", tmp_path / "hf", tmp_path / "back")
    (ours, _), (back, _) = (load_translator(r, device="cpu") for r in (run, tmp_path / "back"))
    sources = [a for a, _ in demo_pairs[600:604]]
    src = pad(ours.tokenizer.encode_src(sources))
    assert back.tokenizer.encode_src(sources) == ours.tokenizer.encode_src(sources)
    tgt_in = torch.full((len(sources), 3), BOS_ID)
    with torch.no_grad():
        logits = [
            t.model(src, tgt_in, padding_mask(src), no_peek_mask(tgt_in)) for t in (ours, back)
        ]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-5)


def _greedy_translations(run, out, sources: list[str], cap: int = 20) -> tuple[list, list]:
    """(CTranslate2's greedy outputs from the export in `out`, the project's) for `sources`."""
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
    return theirs, ours


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
