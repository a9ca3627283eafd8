"""Importing Hugging Face M2M100 and NLLB models: exact, without the hub.

Tiny M2M100ForConditionalGeneration models with random weights and a SentencePiece model the
test trains, tokenized the M2M100 way (vocab.json, `__fr__`) or the NLLB way (fairseq's offset,
`fra_Latn`), are saved by `save_pretrained`, imported with `seq2seq import hf`, and held to
transformers' own token ids, logits and `generate(forced_bos_token_id=…)` outputs.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from seq2seq.config import load_run_config
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.data.corpus import prepare_data
from seq2seq.decode.search import decode
from seq2seq.decode.translator import load_translator
from seq2seq.errors import UserError
from tests.hf_models import bpe_model, save_m2m100
from tests.runs import cli, write_parallel

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
warnings.filterwarnings("ignore", message=".*sacremoses.*")

# Every test imports an M2M100 or NLLB model (transformers) and decodes, serves or trains it.
pytestmark = pytest.mark.slow

SENTENCES = [
    "I have three cats.",
    "She was born on the first of May nineteen eighty.",
    "It is a quarter past five.",
    "zzq ü x ©",
    "The book costs twelve euros.",
]
TARGETS = ["J'ai trois chats.", "Il est cinq heures et quart.", "Le livre coûte douze euros."]
# family → (default source, default target, other targets tried)
FAMILIES = {
    "m2m100": ("en", "fr", ["de", "es", "zh"]),
    "nllb": ("eng_Latn", "fra_Latn", ["deu_Latn", "spa_Latn", "zho_Hans"]),
}
CAP = 24


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory, demo_pairs) -> Path:
    return bpe_model(tmp_path_factory.mktemp("spm"), demo_pairs[:600])


@pytest.fixture(scope="module", params=list(FAMILIES))
def imported(request, tmp_path_factory, sentencepiece_model):
    """(family, HF model, HF tokenizer, imported run) for M2M100 and NLLB tokenizers."""
    family = request.param
    folder = tmp_path_factory.mktemp(family)
    weights = "bin" if family == "nllb" else "safetensors"
    model, tok = save_m2m100(folder / "hf", family, sentencepiece_model, weights=weights)
    cli("--quiet", "import", "hf", folder / "hf", folder / "run")
    return family, model, tok, folder / "run"


def test_imported_run_records_languages_and_the_decoding_rule(imported):
    family, model, tok, run = imported
    cfg = load_run_config(run)
    src, tgt, others = FAMILIES[family]
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == (src, tgt)
    assert cfg.tokenizer.layout == family
    assert cfg.tokenizer.target_language == "forced_first"
    assert cfg.tokenizer.decoder_start_id == model.config.decoder_start_token_id == 2
    for code in [tgt, *others]:
        token = f"__{code}__" if family == "m2m100" else code
        assert cfg.tokenizer.languages[code] == tok.convert_tokens_to_ids(token)
    assert len(cfg.tokenizer.languages) == (100 if family == "m2m100" else 202)


def test_token_ids_are_the_hf_tokenizers_for_every_language(imported):
    family, _, tok, run = imported
    ours = load_translator(run, device="cpu")[0].tokenizer
    src, tgt, others = FAMILIES[family]
    for lang in [src, *others]:
        tok.src_lang = lang
        assert ours.encode_src(SENTENCES, lang) == tok(SENTENCES).input_ids
    for lang in [tgt, *others]:
        tok.tgt_lang = lang
        expected = tok(text_target=TARGETS).input_ids
        assert [ids + [ours.ids.eos] for ids in ours.encode_tgt(TARGETS, lang)] == expected
        # The language token is not text (transformers 5's M2M100Tokenizer built in place
        # keeps `__fr__` in its decoded text: compared without it).
        body = [ids[1:] for ids in expected]
        assert ours.decode_tgt(expected) == tok.batch_decode(body, skip_special_tokens=True)


def test_logits_equal_transformers_within_1e_4(imported):
    family, model, tok, run = imported
    tr, _ = load_translator(run, device="cpu")
    ours_tok, special = tr.tokenizer, tr.tokenizer.ids
    src_lang, tgt_lang, others = FAMILIES[family]
    src = pad(ours_tok.encode_src(SENTENCES[:3], src_lang), pad_id=special.pad)
    for lang in [tgt_lang, others[0]]:
        tgt_in = pad(
            [[special.start, *ids] for ids in ours_tok.encode_tgt(TARGETS, lang)],
            pad_id=special.pad,
        )
        real = tgt_in != special.pad
        with torch.no_grad():
            theirs = model(
                input_ids=src,
                attention_mask=padding_mask(src, special.pad),
                decoder_input_ids=tgt_in,
            ).logits
            ours = tr.model(
                src, tgt_in, padding_mask(src, special.pad), no_peek_mask(tgt_in, special.pad)
            )
        delta = (theirs - ours)[real].abs().max().item()
        assert delta < 1e-4, f"{lang}: max |Δlogits| = {delta:.2e}"


def _generated(model, src, special, lang_id: int, beam: int) -> list[list[int]]:
    out = model.generate(
        input_ids=src,
        attention_mask=padding_mask(src, special.pad),
        forced_bos_token_id=lang_id,
        num_beams=beam,
        length_penalty=1.0,
        early_stopping=True,
        do_sample=False,
        max_new_tokens=CAP,
        bad_words_ids=[[i] for i in special.never_generated],
    )
    rows = []
    for row in out.tolist():
        row = row[1:]  # the decoder start
        rows.append(row[: row.index(special.eos)] if special.eos in row else None)
    return rows


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_are_generates_with_forced_bos(imported, beam):
    family, model, tok, run = imported
    tr, _ = load_translator(run, device="cpu")
    special = tr.tokenizer.ids
    src_lang, tgt_lang, others = FAMILIES[family]
    src = pad(tr.tokenizer.encode_src(SENTENCES, src_lang), pad_id=special.pad)
    options = tr.options.model_copy(
        update={"beam_size": beam, "max_len_a": 0.0, "max_len_b": CAP, "length_penalty": 1.0}
    )
    outputs, lengths = set(), []
    for lang in [tgt_lang, *others]:
        lang_id = tr.tokenizer.language_id(lang)
        first = torch.full((src.size(0),), lang_id)
        found = decode(tr.model, src, options, special=special, first=first)
        ours = [hyps[0].tokens for hyps in found]
        theirs = _generated(model, src, special, lang_id, beam)
        # At the cap generate stops without EOS where ours ends with one, and their beams
        # may rank differently there: sentences that ended by choice are compared.
        ended = [i for i, row in enumerate(theirs) if row is not None]
        assert [ours[i] for i in ended] == [theirs[i] for i in ended], lang
        assert all(row[0] == lang_id for row in ours)
        outputs.add(tuple(map(tuple, ours)))
        lengths += [len(theirs[i]) for i in ended]
    assert len(outputs) > 1  # the target language changes what is generated
    # Most ended by choice, at lengths of their own.
    assert len(lengths) > 4 * len(SENTENCES) // 2 and len(set(lengths)) > 2


def _hf_texts(model, tok, family: str, lang: str, sources: list[str]) -> list[str]:
    """generate's greedy translations into `lang`, as text."""
    tok.src_lang = FAMILIES[family][0]
    enc = tok(sources, return_tensors="pt", padding=True)
    token = f"__{lang}__" if family == "m2m100" else lang
    out = model.generate(
        **enc,
        forced_bos_token_id=tok.convert_tokens_to_ids(token),
        num_beams=1,
        do_sample=False,
        max_new_tokens=CAP,
        bad_words_ids=[[0], [1]],
    )
    # Language tokens are not text (transformers 5's M2M100Tokenizer built in place does not
    # count them special: they are dropped here).
    languages = set(getattr(tok, "lang_code_to_id", {}).values())
    rows = [[i for i in row if i not in languages] for row in out[:, 2:].tolist()]
    return [" ".join(t.split()) for t in tok.batch_decode(rows, skip_special_tokens=True)]


def test_translate_tgt_lang_picks_the_language_and_an_unknown_one_is_one_error(imported, tmp_path):
    family, model, tok, run = imported
    _, _, others = FAMILIES[family]
    lines = SENTENCES[:3]
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in lines), "utf-8")
    base = ["translate", "--run", run, "--input", tmp_path / "in.txt", "--beam-size", "1"]
    base += ["--no-split-sentences", "--device", "cpu"]
    for lang in others[:2]:
        out = tmp_path / f"out.{lang}"
        cli("--quiet", *base, "--tgt-lang", lang, "--output", out)
        ours = out.read_text("utf-8").splitlines()
        assert ours == _hf_texts(model, tok, family, lang, lines)
    result = cli("--quiet", *base, "--tgt-lang", "xx_Yyyy", "--output", tmp_path / "bad", code=1)
    assert "'xx_Yyyy' is not one of the model's languages" in result.output
    assert others[0] in result.output  # it names the known ones
    assert not (tmp_path / "bad").exists()
    result = cli("--quiet", *base, "--src-lang", "qq", "--output", tmp_path / "bad", code=1)
    assert "source language 'qq'" in result.output and not (tmp_path / "bad").exists()


def test_a_run_without_a_default_target_needs_one_and_says_which(imported, tmp_path):
    family, _, _, run = imported
    tr, _ = load_translator(run, device="cpu")
    tr.tgt_lang = ""  # as an import whose tokenizer named no target language
    with pytest.raises(UserError, match="needs a target language"):
        tr.translate(["I have three cats."])
    lang = FAMILIES[family][2][0]
    explicit = tr.translate_sources(tr.prepare(SENTENCES, tgt_lang=lang))
    tr, _ = load_translator(run, device="cpu", tgt_lang=lang)
    assert tr.translate(SENTENCES) == [hyps[0][0] for hyps in explicit]


def test_one_batch_may_mix_target_languages(imported):
    family, _, _, run = imported
    tr, _ = load_translator(run, device="cpu")
    langs = FAMILIES[family][2]
    alone = {lang: tr.translate_sources(tr.prepare(SENTENCES, tgt_lang=lang)) for lang in langs}
    mixed = []
    for i, text in enumerate(SENTENCES):
        mixed += tr.prepare([text], tgt_lang=langs[i % len(langs)])
    together = tr.translate_sources(mixed)  # one call: the rows share batches
    assert together == [alone[langs[i % len(langs)]][i] for i in range(len(SENTENCES))]


def test_evaluate_and_info_know_the_languages(imported, tmp_path):
    family, model, tok, run = imported
    lang = FAMILIES[family][2][0]
    (tmp_path / "src").write_text("".join(s + "\n" for s in SENTENCES[:3]), "utf-8")
    (tmp_path / "ref").write_text("".join(s + "\n" for s in SENTENCES[:3]), "utf-8")
    args = ["evaluate", "--run", run, "--src", tmp_path / "src", "--ref", tmp_path / "ref"]
    args += ["--beam-size", "1", "--no-split-sentences", "--device", "cpu"]
    cli("--quiet", *args, "--tgt-lang", lang, "--json", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert report["languages"]["target"] == lang
    assert report["hypotheses"] == _hf_texts(model, tok, family, lang, SENTENCES[:3])
    cli("--quiet", *args, "--tgt-lang", "nope", "--json", tmp_path / "bad.json", code=1)
    assert not (tmp_path / "bad.json").exists()
    shown = cli("info", "--run", run).output
    assert "languages:" in shown and lang in shown
    assert lang in json.loads(cli("info", "--run", run, "--json").output)["languages"]


def test_serve_takes_a_target_language_per_request(imported):
    from fastapi.testclient import TestClient

    from seq2seq.serve import app as serve_app

    family, _, _, run = imported
    tr, path = load_translator(run, device="cpu")
    cfg = serve_app.ServeConfig()
    info = serve_app.run_info(run, path, tr, cfg)
    langs = FAMILIES[family][2]
    assert set(langs) <= set(info["languages"])
    with TestClient(serve_app.create_app(tr, info, cfg)) as client:
        answers = []
        for lang in langs[:2]:
            got = client.post("/translate", json={"texts": SENTENCES[:3], "target_lang": lang})
            assert got.status_code == 200, got.text
            ours = tr.translate_sources(tr.prepare(SENTENCES[:3], tgt_lang=lang))
            assert got.json()["translations"] == [o[0][0] for o in ours]
            answers.append(got.json()["translations"])
        assert answers[0] != answers[1]
        bad = client.post("/translate", json={"text": "Hello.", "target_lang": "xx"})
        assert bad.status_code == 422 and bad.json()["field"] == "target_lang"
        assert langs[0] in bad.json()["error"]


def test_unsupported_architecture_and_missing_tokenizer_files_are_one_error_each(
    tmp_path, sentencepiece_model
):
    hf = tmp_path / "hf"
    save_m2m100(hf, "nllb", sentencepiece_model)
    config = json.loads((hf / "config.json").read_text())
    t5 = tmp_path / "t5"
    shutil.copytree(hf, t5)
    (t5 / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    result = cli("import", "hf", t5, tmp_path / "run", code=1)
    assert "model_type 't5' is not supported" in result.output and "m2m_100" in result.output
    for name in ("sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json"):
        broken = tmp_path / f"without-{name}"
        shutil.copytree(hf, broken)
        (broken / name).unlink()
        result = cli("import", "hf", broken, tmp_path / "run", code=1)
        assert f"tokenizer file missing: {broken / name}" in result.output
    assert not (tmp_path / "run").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_back_to_hf_gives_transformers_the_same_model_and_tokenizer(imported, tmp_path):
    family, model, tok, run = imported
    cli("--quiet", "export", "--run", run, "--format", "hf", tmp_path / "out")
    again = transformers.M2M100ForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    theirs = dict(model.state_dict())
    # Untied, transformers 5 keeps `shared` beside the encoder's and decoder's own tables,
    # and reads neither through it: that matrix is unused.
    unused = set() if model.config.tie_word_embeddings else {"model.shared.weight"}
    for name, tensor in again.state_dict().items():
        assert name in unused or torch.equal(tensor, theirs[name]), name
    tok_again = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    src_lang, _, others = FAMILIES[family]
    tok.src_lang = tok_again.src_lang = src_lang
    assert tok_again(SENTENCES).input_ids == tok(SENTENCES).input_ids
    enc = tok(SENTENCES, return_tensors="pt", padding=True)
    lang_id = load_translator(run, device="cpu")[0].tokenizer.language_id(others[0])
    settings = {"forced_bos_token_id": lang_id, "num_beams": 4, "max_new_tokens": CAP}
    assert torch.equal(again.generate(**enc, **settings), model.generate(**enc, **settings))
    result = cli("export", "--run", run, "--format", "hf", tmp_path / "out", code=1)
    assert "not an empty folder" in result.output


def test_a_tied_model_from_bin_weights_imports_and_exports_exactly(tmp_path, sentencepiece_model):
    model, tok = save_m2m100(
        tmp_path / "hf", "m2m100", sentencepiece_model, weights="bin", tied=True
    )
    assert (tmp_path / "hf" / "pytorch_model.bin").is_file()
    cli("--quiet", "import", "hf", tmp_path / "hf", tmp_path / "run")
    tr, _ = load_translator(tmp_path / "run", device="cpu")
    assert (
        tr.model.src_embed is tr.model.tgt_embed
        and tr.model.output.weight is tr.model.tgt_embed.weight
    )
    special = tr.tokenizer.ids
    src = pad(tr.tokenizer.encode_src(SENTENCES, "en"), pad_id=special.pad)
    tgt_in = pad(
        [[special.start, *ids] for ids in tr.tokenizer.encode_tgt(TARGETS, "de")],
        pad_id=special.pad,
    )
    mask = padding_mask(src, special.pad)
    with torch.no_grad():
        theirs = model(input_ids=src[:3], attention_mask=mask[:3], decoder_input_ids=tgt_in).logits
        ours = tr.model(src[:3], tgt_in, mask[:3], no_peek_mask(tgt_in, special.pad))
    real = tgt_in != special.pad
    assert (theirs - ours)[real].abs().max().item() < 1e-4
    cli("--quiet", "export", "--run", tmp_path / "run", "--format", "hf", tmp_path / "out")
    again = transformers.M2M100ForConditionalGeneration.from_pretrained(tmp_path / "out")
    assert again.config.tie_word_embeddings
    for name, tensor in again.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name


def test_an_nllb_hub_name_is_read_from_the_cache_offline(
    monkeypatch, tmp_path, sentencepiece_model
):
    from huggingface_hub import constants

    save_m2m100(tmp_path / "files", "nllb", sentencepiece_model)
    repo_dir = tmp_path / "cache" / "models--tiny--nllb"
    shutil.copytree(tmp_path / "files", repo_dir / "snapshots" / ("0" * 40))
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cli("--quiet", "import", "hf", "tiny/nllb", tmp_path / "run")
    assert load_run_config(tmp_path / "run").tokenizer.layout == "nllb"


def test_nllb_legacy_behaviour_puts_the_source_language_after_eos(tmp_path, sentencepiece_model):
    save_m2m100(tmp_path / "hf", "nllb", sentencepiece_model)
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    config["legacy_behaviour"] = True
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(config))
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    cli("--quiet", "import", "hf", tmp_path / "hf", tmp_path / "run")
    assert load_run_config(tmp_path / "run").tokenizer.source_language == "suffix"
    ours = load_translator(tmp_path / "run", device="cpu")[0].tokenizer
    for lang in ("eng_Latn", "deu_Latn"):
        hf_tok.src_lang = lang
        expected = hf_tok(SENTENCES).input_ids
        assert all(ids[-2:] == [2, hf_tok.convert_tokens_to_ids(lang)] for ids in expected)
        assert ours.encode_src(SENTENCES, lang) == expected


def test_init_from_an_imported_run_fine_tunes_one_pair_with_its_tags_and_exports_back(
    imported, tmp_path, demo_pairs
):
    family, model, tok, run = imported
    src_lang, _, others = FAMILIES[family]
    tgt_lang = others[0]  # a direction the import did not default to
    src, tgt = write_parallel(tmp_path, "ft", demo_pairs[:120])
    config = tmp_path / "ft.yaml"
    config.write_text(
        f"run_dir: {tmp_path / 'ft'}\n"
        f"data: {{src_lang: {src_lang}, tgt_lang: {tgt_lang}, max_len: 40,\n"
        f"  train: {{src: {src}, tgt: {tgt}}}, valid: {{src: {src}, tgt: {tgt}, max_pairs: 8}}}}\n"
        "train: {max_tokens: 400, max_steps: 3, lr: 1.0e-3, warmup_steps: 1, save_every: 1, "
        "eval_every: 3, valid_bleu_sentences: 4, threads: 1, tensorboard: false}\n"
        f"decode: {{beam_size: 1, max_len_a: 0.0, max_len_b: {CAP}}}\n"
    )
    cli("--quiet", "train", "-c", config, "--init-from", run)
    tuned = tmp_path / "ft"
    cfg = load_run_config(tuned)
    assert cfg.tokenizer == load_run_config(run).tokenizer  # the import's ids and rules
    data = prepare_data(cfg, reuse_tokenizer=True)
    languages = cfg.tokenizer.languages
    first_src = data.train[0]["src_ids"]
    tag_at = 0 if cfg.tokenizer.source_language == "prefix" else -1
    assert first_src[tag_at] == languages[src_lang]  # the source language's token…
    assert {row[0] for row in data.train["tgt_ids"]} == {languages[tgt_lang]}  # …and the target's
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cli("--quiet", "export", "--run", tuned, "--format", "hf", tmp_path / "out")
    again = transformers.M2M100ForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    changed = [
        k for k, v in again.state_dict().items() if k in before and not torch.equal(v, before[k])
    ]
    assert changed  # three updates moved the weights
    tok_again = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    tr, _ = load_translator(tuned, device="cpu")
    ours = tr.translate(SENTENCES)  # the run's direction: src_lang → tgt_lang
    assert ours == _hf_texts(again, tok_again, family, tgt_lang, SENTENCES)
