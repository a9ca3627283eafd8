"""Importing Hugging Face MarianMTModels (OPUS-MT) and exporting runs back: exact, without the hub.

Tiny MarianMTModels with random weights and a locally trained tokenizer (separate source and
target SentencePiece models, one Marian vocab.json with language codes), saved by
`save_pretrained` in several layouts, are imported and held to transformers' own numbers.
"""

from __future__ import annotations

import json
import math
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.config import load_run_config, run_decode
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.decode.search import decode, greedy
from seq2seq.decode.step import Settings
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from seq2seq.interop.hf_marian import import_hf_marian
from tests.hf_models import LAYOUTS, SENTENCES, save_marian
from tests.runs import cli, write_parallel

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install 'seq2seq[hf]')"
)
warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")

# Every test imports a MarianMTModel (transformers) and decodes it, trains or exports.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TARGETS = [
    "J'ai trois chats.",
    "Elle est née le premier mai mille neuf cent quatre-vingt.",
    ">>fr<< Il est cinq heures et quart.",
    "Le livre coûte douze euros. ©",
]


@pytest.fixture(scope="module", params=list(LAYOUTS))
def imported(request, tmp_path_factory, marian_tokenizer):
    """(HF model, HF tokenizer, imported run directory, saved HF folder) for each layout."""
    folder = tmp_path_factory.mktemp(request.param)
    model = save_marian(folder / "hf", marian_tokenizer, LAYOUTS[request.param])
    run = folder / "run"
    cli("--quiet", "import", "hf-marian", folder / "hf", run)
    return model, transformers.MarianTokenizer.from_pretrained(folder / "hf"), run, folder / "hf"


@pytest.fixture(scope="module")
def tied(tmp_path_factory, marian_tokenizer):
    folder = tmp_path_factory.mktemp("tied")
    model = save_marian(folder / "hf", marian_tokenizer, LAYOUTS["tied-swish-bias-safetensors"])
    import_hf_marian(str(folder / "hf"), folder / "run")
    return model, transformers.MarianTokenizer.from_pretrained(folder / "hf"), folder / "run"


def test_import_hf_recognises_a_marian_folder_and_imports_it_as_hf_marian(tied, tmp_path):
    _, _, run = tied
    cli("--quiet", "import", "hf", run.parent / "hf", tmp_path / "run")
    assert load_run_config(tmp_path / "run").model_dump(exclude={"run_dir"}) == load_run_config(
        run
    ).model_dump(exclude={"run_dir"})
    weights = "checkpoints/step_00000000.safetensors"
    ours, theirs = load_file(str(tmp_path / "run" / weights)), load_file(str(run / weights))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_imported_tokenizer_gives_marian_tokenizers_ids_and_text(tied):
    _, hf_tok, run = tied
    tok = load_translator(run, device="cpu")[0].tokenizer
    assert tok.encode_src(SENTENCES) == hf_tok(SENTENCES).input_ids
    targets = hf_tok(text_target=TARGETS).input_ids
    assert [ids + [tok.ids.eos] for ids in tok.encode_tgt(TARGETS)] == targets
    # Decoding drops the special ids (EOS, PAD, UNK) and keeps language codes, as HF does.
    noisy = [ids + [tok.ids.pad, 1, 0] for ids in targets]
    expected = hf_tok.batch_decode(noisy, skip_special_tokens=True)
    assert tok.decode_tgt([[tok.ids.pad, *ids] for ids in targets]) == expected


def _logits(hf_model, tr, sources, targets):
    """HF's and the imported model's teacher-forced logits, and the real target positions."""
    special = tr.tokenizer.ids
    src = pad(tr.tokenizer.encode_src(sources), pad_id=special.pad)
    starts = [[special.start, *ids] for ids in tr.tokenizer.encode_tgt(targets)]
    tgt_in = pad(starts, pad_id=special.pad)
    real = tgt_in != special.pad
    real[:, 0] = True
    with torch.no_grad():
        theirs = hf_model(
            input_ids=src, attention_mask=padding_mask(src, special.pad), decoder_input_ids=tgt_in
        ).logits
        ours = tr.model(
            src, tgt_in, padding_mask(src, special.pad), no_peek_mask(tgt_in, special.pad)
        )
    return theirs, ours, real


def test_imported_logits_equal_transformers_within_1e_5(imported):
    hf_model, hf_tok, run, _ = imported
    tr, _ = load_translator(run, device="cpu")
    assert tr.tokenizer.encode_src(SENTENCES) == hf_tok(SENTENCES).input_ids
    targets = [ids + [tr.tokenizer.ids.eos] for ids in tr.tokenizer.encode_tgt(TARGETS)]
    assert targets == hf_tok(text_target=TARGETS).input_ids
    theirs, ours, real = _logits(hf_model, tr, SENTENCES[:4], TARGETS)
    delta = (theirs - ours)[real].abs().max().item()
    print(f"max |Δlogits| = {delta:.2e} over {int(real.sum())} positions")
    assert delta < 1e-5


def test_imported_beam_search_ranks_as_generate_and_gives_its_outputs(tmp_path, marian_tokenizer):
    # HF divides beam scores by len^α: an import that kept GNMT's ((5+len)/6)^α ranked the
    # same hypotheses otherwise, and its beam-4 outputs differed from generate's.
    hf_model = save_marian(
        tmp_path / "hf", marian_tokenizer, LAYOUTS["tied-swish-bias-safetensors"]
    )
    special_eos = hf_model.config.eos_token_id
    with torch.no_grad():  # sentences end within the cap, where both searches agree on ending
        hf_model.final_logits_bias[0, special_eos] += 3.0
    hf_model.generation_config.num_beams = 4
    hf_model.generation_config.length_penalty = 1.6
    hf_model.save_pretrained(tmp_path / "hf")
    cli("--quiet", "import", "hf-marian", tmp_path / "hf", tmp_path / "run")
    run = tmp_path / "run"
    imported = load_run_config(run).decode
    assert (imported.beam_size, imported.length_norm, imported.length_penalty) == (4, "length", 1.6)

    tr, _ = load_translator(run, device="cpu")
    special = tr.tokenizer.ids
    src = pad(tr.tokenizer.encode_src(SENTENCES), pad_id=special.pad)
    cap = 40
    options = imported.model_copy(update={"max_len_a": 0.0, "max_len_b": cap})
    ours = decode(tr.model, src, options, special=special)
    generated = hf_model.generate(
        input_ids=src,
        attention_mask=padding_mask(src, special.pad),
        num_beams=4,
        length_penalty=1.6,
        early_stopping=True,
        do_sample=False,
        max_new_tokens=cap,
        bad_words_ids=[[special.pad]],
    )
    lengths = []
    for (hyp,), row in zip(ours, generated.tolist()):
        out = row[1:]
        out = out[: out.index(special.eos)] if special.eos in out else out
        assert hyp.tokens == out
        lengths.append(len(out))
    # Most ended by choice, not at the cap, where the two searches could only agree by force.
    assert sum(n < cap - 1 for n in lengths) > len(lengths) // 2 and len(set(lengths)) > 1


def test_imported_greedy_output_is_generates(imported):
    hf_model, hf_tok, run, _ = imported
    tr, _ = load_translator(run, device="cpu", decode=run_decode(run, beam_size=1))
    special = tr.tokenizer.ids
    sources = SENTENCES[:-1]
    src = pad(tr.tokenizer.encode_src(sources), pad_id=special.pad)
    mask = padding_mask(src, special.pad)
    cap = 24
    ours = greedy(
        tr.model, src, mask, Settings(max_len_a=0.0, max_len_b=cap, alpha=0.0, special=special)
    )
    generated = hf_model.generate(
        input_ids=src,
        attention_mask=mask,
        num_beams=1,
        do_sample=False,
        max_new_tokens=cap,
        bad_words_ids=[[special.pad]],  # as OPUS-MT's generation configs say
    )
    for hyp, row in zip(ours, generated.tolist()):
        out = row[1:]
        out = out[: out.index(special.eos)] if special.eos in out else out
        assert hyp.tokens == out
    texts = hf_tok.batch_decode(generated, skip_special_tokens=True)
    assert tr.tokenizer.decode_tgt([h.tokens for h in ours]) == texts


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / "model.safetensors").is_file():
        return load_file(str(folder / "model.safetensors"))
    return torch.load(folder / "pytorch_model.bin", weights_only=True)


def test_import_then_export_gives_back_the_same_tensors_and_files(imported, tmp_path):
    hf_model, _, run, original = imported
    out = tmp_path / "exported"
    cli("--quiet", "export", "--run", run, "--format", "hf-marian", out)
    before, after = _tensors(original), load_file(str(out / "model.safetensors"))
    for name, tensor in after.items():
        assert torch.equal(tensor, before[name]), name
    missing = set(before) - set(after)
    assert all(
        "embed_positions" in k
        or k in ("lm_head.weight", "model.shared.weight")
        or "embed_tokens" in k
        for k in missing
    ), missing  # tied aliases of exported tensors
    reloaded = transformers.MarianMTModel.from_pretrained(out).eval()
    original_state, state = hf_model.state_dict(), reloaded.state_dict()
    assert original_state.keys() == state.keys()
    for name in state:
        assert torch.equal(state[name], original_state[name]), name
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (out / name).read_bytes() == (original / name).read_bytes()
    hf_config = json.loads((original / "config.json").read_text())
    config = json.loads((out / "config.json").read_text())
    for key in (
        "activation_function",
        "pad_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "vocab_size",
        "d_model",
        "scale_embedding",
        "tie_word_embeddings",
    ):
        assert config[key] == hf_config[key], key


def test_ctranslate2_export_of_an_imported_model_decodes_as_ours_greedily(imported, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    _, _, run, _ = imported
    cli("--quiet", "export", "--run", run, "--format", "ctranslate2", tmp_path / "ct2")
    tr, _ = load_translator(run, device="cpu", decode=run_decode(run, beam_size=1))
    cap = 20
    sources = SENTENCES[:2] + SENTENCES[5:6]
    special = tr.tokenizer.ids
    src = pad(tr.tokenizer.encode_src(sources), pad_id=special.pad)
    ours = greedy(
        tr.model,
        src,
        padding_mask(src, special.pad),
        Settings(max_len_a=0.0, max_len_b=cap, special=special, alpha=0.0),
    )
    model = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    pieces = tr.tokenizer.src.encode(sources, out_type=str)
    results = model.translate_batch(
        pieces, beam_size=1, max_decoding_length=cap - 1, suppress_sequences=[["<pad>"]]
    )
    for hyp, result in zip(ours, results):
        assert tr.tokenizer.tgt_pieces(hyp.tokens) == result.hypotheses[0]


def test_every_run_command_works_on_an_imported_model(tied, tmp_path):
    _, hf_tok, run = tied
    src, ref = tmp_path / "test.en", tmp_path / "test.fr"
    src.write_text("I have three cats.\nIt is five o'clock.\n", encoding="utf-8")
    ref.write_text("J'ai trois chats.\nIl est cinq heures.\n", encoding="utf-8")
    out = cli("translate", "--run", run, "--input", src, "--beam-size", "2").stdout.splitlines()
    assert len(out) == 2
    report = tmp_path / "report.json"
    cli("--quiet", "evaluate", "--run", run, "--src", src, "--ref", ref, "--json", report)
    assert json.loads(report.read_text())["sentences"] == 2
    info = json.loads(cli("info", "--run", run, "--json").stdout)
    assert info["tokenizer"]["type"] == "marian" and info["steps_trained"] == 0
    assert info["tokenizer"]["src_vocab"] == len(hf_tok.get_vocab())
    cli("--quiet", "attention", "--run", run, "I have three cats.", "-o", tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 0
    cli("average", "--run", run, "--last", "1", "--output", tmp_path / "avg.safetensors")
    cfg = load_run_config(run)
    assert (cfg.model.activation, cfg.tokenizer.layout) == ("swish", "marian")
    assert cfg.tokenizer.decoder_start_id == cfg.tokenizer.pad_id
    assert cfg.model.final_logits_bias and cfg.model.tie_embeddings


def test_an_imported_run_is_not_resumed_but_fine_tuned(tied, tmp_path):
    _, _, run = tied
    (tmp_path / "train.tsv").write_text("I have cats.\tJ'ai des chats.\n", encoding="utf-8")
    config = tmp_path / "ft.yaml"
    config.write_text(f"data:\n  train: {{tsv: {tmp_path / 'train.tsv'}}}\n")
    result = CliRunner().invoke(app, ["train", "-c", str(config), "--run", str(run), "--resume"])
    assert result.exit_code == 1
    assert "holds an imported model" in result.output and "--init-from" in result.output


def _fake_hub_cache(cache: Path, repo: str, files: Path) -> None:
    """A huggingface_hub cache holding `files` as the snapshot of `repo`'s main branch."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / ("0" * 40)
    shutil.copytree(files, snapshot)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("0" * 40)


def test_a_hub_name_is_read_from_the_cache_offline(monkeypatch, tmp_path, marian_tokenizer):
    from huggingface_hub import constants

    save_marian(tmp_path / "files", marian_tokenizer, LAYOUTS["tied-swish-bias-safetensors"])
    _fake_hub_cache(tmp_path / "cache", "Tiny-NLP/opus-mt-en-fr", tmp_path / "files")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cfg = import_hf_marian("Tiny-NLP/opus-mt-en-fr", tmp_path / "run")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "fr")
    assert load_translator(tmp_path / "run", device="cpu")[0].translate(["I have cats."])
    with pytest.raises(UserError, match="the hub could not provide it"):
        import_hf_marian("Tiny-NLP/opus-mt-xx-yy", tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_bad_sources_and_targets_are_refused_with_one_message(tied, tmp_path, marian_tokenizer):
    _, _, run = tied
    with pytest.raises(UserError, match="not an empty folder"):
        import_hf_marian(str(tmp_path), run)
    partial = tmp_path / "partial"
    shutil.copytree(marian_tokenizer, partial)
    with pytest.raises(UserError, match="lacks config.json"):
        import_hf_marian(str(partial), tmp_path / "r1")

    class Code:  # a pickle that would run code when loaded
        def __reduce__(self):
            return (print, ("ran code from a checkpoint",))

    hostile = tmp_path / "hostile"
    save_marian(hostile, marian_tokenizer, LAYOUTS["untied-relu-nobias-bin"])
    (hostile / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Code()}))
    with pytest.raises(UserError, match="cannot read weights"):
        import_hf_marian(str(hostile), tmp_path / "r2")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def test_a_trained_run_exports_as_a_marian_model_transformers_runs_alike(
    trained_tiny_run, tmp_path
):
    run = trained_tiny_run
    out = tmp_path / "hf"
    # The script of earlier benchmarks is now this command.
    subprocess.run(
        [sys.executable, REPO / "scripts" / "export_hf_marian.py", "--run", run, "--out", out],
        check=True,
        capture_output=True,
    )
    hf_model = transformers.MarianMTModel.from_pretrained(out).eval()
    hf_tok = transformers.MarianTokenizer.from_pretrained(out)
    tr, _ = load_translator(run, device="cpu")
    assert hf_tok(SENTENCES[:2]).input_ids == tr.tokenizer.encode_src(SENTENCES[:2])
    theirs, ours, real = _logits(hf_model, tr, SENTENCES[:2], TARGETS[:2])
    assert (theirs - ours)[real].abs().max().item() < 1e-5
    assert not math.isnan(ours.sum().item())


def test_fine_tuning_an_imported_model_lowers_validation_loss(tied, tmp_path, demo_pairs):
    _, _, imported_run = tied
    train_src, train_tgt = write_parallel(tmp_path, "train", demo_pairs[:1500])
    valid_src, valid_tgt = write_parallel(tmp_path, "valid", demo_pairs[1500:1600])
    config = tmp_path / "ft.yaml"
    config.write_text(
        f"run_dir: {tmp_path / 'ft'}\n"
        f"data:\n  train: {{src: {train_src}, tgt: {train_tgt}}}\n"
        f"  valid: {{src: {valid_src}, tgt: {valid_tgt}}}\n  max_len: 60\n"
        "model: {dropout: 0.0}\n"
        "train: {max_tokens: 1500, max_steps: 60, lr: 0.003, warmup_steps: 10, log_every: 10, "
        "eval_every: 10, save_every: 30, valid_bleu_sentences: 0, threads: 2, "
        "tensorboard: false}\n"
    )
    cli("--quiet", "train", "-c", config, "--init-from", imported_run)
    records = [json.loads(x) for x in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r.get("split") == "valid"]
    print("valid loss by 10 steps:", " ".join(f"{x:.3f}" for x in losses))
    assert len(losses) == 6 and losses == sorted(losses, reverse=True)
    assert losses[-1] < 0.85 * losses[0]
    cfg = load_run_config(tmp_path / "ft")
    assert (cfg.tokenizer.layout, cfg.model.activation, cfg.model.dropout) == (
        "marian",
        "swish",
        0.0,
    )
    assert (tmp_path / "ft" / "tokenizer" / "vocab.json").is_file()
    # The decoder's start (Marian's zero <pad> row) stays as imported; everything else trained.
    start = cfg.tokenizer.decoder_start_id
    before = load_translator(imported_run, device="cpu")[0].model
    after = load_translator(tmp_path / "ft", device="cpu")[0].model
    assert torch.equal(after.tgt_embed.weight[start], before.tgt_embed.weight[start])
    assert not torch.equal(after.tgt_embed.weight, before.tgt_embed.weight)
    # So the fine-tuned model, exported, is decoded alike by CTranslate2's own Marian converter
    # (which starts from a zero embedding) and by this project.
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    cli("--quiet", "export", "--run", tmp_path / "ft", "--format", "hf-marian", tmp_path / "hf")
    ctranslate2.converters.TransformersConverter(str(tmp_path / "hf")).convert(
        str(tmp_path / "ct2"), force=True
    )
    tr, _ = load_translator(tmp_path / "ft", device="cpu")
    sources = [a for a, _ in demo_pairs[1600:1616]]
    special = tr.tokenizer.ids
    src = pad(tr.tokenizer.encode_src(sources), pad_id=special.pad)
    ours = greedy(
        tr.model,
        src,
        padding_mask(src, special.pad),
        Settings(max_len_a=0.0, max_len_b=30, special=special, alpha=0.0),
    )
    results = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1).translate_batch(
        [p + ["</s>"] for p in tr.tokenizer.src.encode(sources, out_type=str)],
        beam_size=1,
        max_decoding_length=29,
    )
    assert [tr.tokenizer.tgt_pieces(h.tokens) for h in ours] == [r.hypotheses[0] for r in results]
