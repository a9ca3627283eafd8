"""Hugging Face M2M100ForConditionalGeneration checkpoints (M2M100, NLLB-200) into run
directories, and runs back out.

M2M100 is this project's pre-norm network (`model.norm_first`, with the final encoder and
decoder norms) with fairseq's positional table read from `pad_id + 1` on (`model.positions:
fairseq`, `model.position_offset`); its weights keep their layout, so the importer only fuses
q/k/v (and cross-attention k/v) projections, by Marian's name table. NLLB is the same network
with another tokenizer. What the run learns for these models is configuration: the tokenizer
layout (`m2m100` or `nllb`, see multilingual.py), the language list, the source language rule
and the decoding rule (start from `</s>`, first output forced to the target language).

Reading a checkpoint never runs code from it: safetensors, or `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from pydantic import ValidationError

from seq2seq.config import (
    Config,
    DataConfig,
    DecodeConfig,
    TokenizerConfig,
    load_run_config,
)
from seq2seq.data.multilingual import (
    M2M100_LANGUAGES,
    NLLB_OFFSET,
    SPECIAL_STRINGS,
    SPM_FILE,
    VOCAB_FILE,
    load_language_tokenizer,
    load_processor,
    m2m100_vocab,
    nllb_vocab,
)
from seq2seq.data.tokenizer import TOKENIZER_DIR, SpecialIds, read_json
from seq2seq.errors import UserError
from seq2seq.interop.hf_marian import (
    Imported,
    _embeddings,
    _layer_table,
    _tensor,
    decode_config,
    load_mapped,
    model_config,
    read_weights,
    resolve_source,
)
from seq2seq.interop.staging import (
    require_new_folder,
    staged_folder,
    write_hf_model,
    write_imported_run,
)
from seq2seq.model.transformer import Transformer, Vocabulary, build_model
from seq2seq.run.rundir import load_run

SUPPORTED = {"marian": "MarianMTModel", "m2m_100": "M2M100ForConditionalGeneration (M2M100, NLLB)"}
# Tokenizer files kept beside the run's own, so an export can give them back.
HF_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")
# What a hub download fetches beside Marian's files and the weights.
HUB_FILES = (SPM_FILE, VOCAB_FILE, *HF_TOKENIZER_FILES)
FAIRSEQ_IDS = {"bos": 0, "pad": 1, "eos": 2, "unk": 3}


def model_type(folder: Path) -> str:
    """config.json's model_type, or one clear error naming what is supported."""
    config = folder / "config.json"
    if not config.is_file():
        raise UserError(f"{folder} has no config.json (a saved Hugging Face model has one)")
    kind = read_json(config).get("model_type")
    if kind not in SUPPORTED:
        names = "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        raise UserError(f"{config}: model_type {kind!r} is not supported (supported: {names})")
    return kind


def import_hf_m2m100(source: str, run_dir: Path) -> Config:
    """Turn a saved M2M100/NLLB model into a run directory; return its config."""
    run_dir = require_new_folder(run_dir)
    folder = resolve_source(source, HUB_FILES)
    try:
        imported = _convert(folder, run_dir)
    except ValidationError as e:
        raise UserError(f"{folder} does not fit a run's config: {e}") from None
    cfg = imported.config

    def write_tokenizer(tok_dir: Path) -> None:
        names = [SPM_FILE, *([VOCAB_FILE] if cfg.tokenizer.layout == "m2m100" else [])]
        for name in [*names, *HF_TOKENIZER_FILES]:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, tok_dir / name)
        load_language_tokenizer(tok_dir, cfg.tokenizer)  # loads as the run will load it

    write_imported_run(run_dir, source, cfg, imported.model, write_tokenizer)
    return cfg


def _convert(folder: Path, run_dir: Path) -> Imported:
    """Config and model of a saved M2M100/NLLB folder (no files written)."""
    if model_type(folder) != "m2m_100":
        raise UserError(f"{folder}/config.json: not an M2M100 model (import it with `import hf`)")
    hf = read_json(folder / "config.json")
    tok_json = _tokenizer_json(folder)
    layout = _layout(folder, tok_json)
    tok_cfg = _tokenizer_config(hf, tok_json, layout, folder)
    tensors = read_weights(folder)
    model_cfg = model_config(
        hf,
        folder,
        activation="relu",
        scale=True,
        norm_first=True,
        positions="fairseq",
        position_offset=tok_cfg.pad_id + 1,
    )
    share, tie, src_embed, tgt_embed, output = _embeddings(hf, tensors, folder)
    if src_embed.size(0) != tok_cfg.vocab_size:
        raise UserError(f"{folder}: vocab_size {tok_cfg.vocab_size} but {src_embed.size(0)} rows")
    model_cfg = model_cfg.model_copy(update={"share_embeddings": share, "tie_embeddings": tie})
    vocab = Vocabulary(tok_cfg.vocab_size, tok_cfg.vocab_size, True, tok_cfg.pad_id)
    model = build_model(model_cfg, vocab)
    state = {"src_embed.weight": src_embed, "tgt_embed.weight": tgt_embed, "output.weight": output}
    for ours, theirs in (("encoder_norm", "model.encoder.layer_norm"),
                         ("decoder_norm", "model.decoder.layer_norm")):  # fmt: skip
        for kind in ("weight", "bias"):
            state[f"{ours}.{kind}"] = _tensor(tensors, f"{theirs}.{kind}", folder)
    for ours, theirs, _ in _layer_table(model_cfg.encoder_layers, model_cfg.decoder_layers):
        for kind in ("weight", "bias"):
            state[f"{ours}.{kind}"] = torch.cat(
                [_tensor(tensors, f"{t}.{kind}", folder) for t in theirs]
            )
    load_mapped(model, state)
    src_lang, tgt_lang = (tok_json.get(k) for k in ("src_lang", "tgt_lang"))
    known = tok_cfg.languages
    max_len = min(DataConfig.model_fields["max_len"].default, model_cfg.max_positions - 2)
    data = DataConfig(
        src_lang=src_lang if src_lang in known else "",
        tgt_lang=tgt_lang if tgt_lang in known else "",
        max_len=max_len,
    )
    config = Config(
        run_dir=Path(run_dir).resolve(),
        data=data,
        tokenizer=tok_cfg,
        model=model_cfg,
        decode=decode_config(folder, hf),
    )
    return Imported(config, model.eval())


def _tokenizer_json(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        raise UserError(f"tokenizer file missing: {path} (it names the tokenizer's class)")
    return read_json(path)


def _layout(folder: Path, tok_json: dict) -> str:
    name = str(tok_json.get("tokenizer_class") or "")
    if name.startswith("M2M100Tokenizer"):
        layout, needed = "m2m100", [SPM_FILE, VOCAB_FILE]
    elif name.startswith("NllbTokenizer"):
        layout, needed = "nllb", [SPM_FILE, "tokenizer.json"]
    else:
        raise UserError(
            f"{folder}/tokenizer_config.json: tokenizer_class {name!r} is not supported with "
            "an M2M100 model (supported: M2M100Tokenizer, NllbTokenizer)"
        )
    for file in needed:
        if not (folder / file).is_file():
            raise UserError(
                f"tokenizer file missing: {folder / file} ({name} needs "
                f"{' and '.join(needed)}; NLLB's hub folders ship {SPM_FILE})"
            )
    return layout


def _tokenizer_config(hf: dict, tok_json: dict, layout: str, folder: Path) -> TokenizerConfig:
    """Special ids, the language list and the decoding rule of an M2M100/NLLB tokenizer."""
    sp = load_processor(folder / SPM_FILE)
    if layout == "m2m100":
        vocab = m2m100_vocab(folder / VOCAB_FILE)
        missing = [t for t in SPECIAL_STRINGS.values() if t not in vocab]
        if missing:
            raise UserError(f"{folder / VOCAB_FILE} lacks {', '.join(missing)}")
        ids = {role: vocab[token] for role, token in SPECIAL_STRINGS.items()}
        codes = M2M100_LANGUAGES.get(str(tok_json.get("language_codes", "m2m100")))
        if codes is None:
            raise UserError(
                f"{folder}/tokenizer_config.json: language_codes "
                f"{tok_json['language_codes']!r} is not one of {', '.join(M2M100_LANGUAGES)}"
            )
        languages = {code: len(vocab) + i for i, code in enumerate(codes)}
    else:
        ids = dict(FAIRSEQ_IDS)
        languages = _nllb_languages(folder, sp, tok_json)
    for role in ("pad", "eos", "bos"):
        given = hf.get(f"{role}_token_id")
        if given is not None and given != ids[role]:
            raise UserError(
                f"{folder}/config.json: {role}_token_id {given} is not the tokenizer's "
                f"{SPECIAL_STRINGS[role]} ({ids[role]})"
            )
    start = hf.get("decoder_start_token_id", ids["eos"])
    legacy = bool(tok_json.get("legacy_behaviour", False)) and layout == "nllb"
    return TokenizerConfig(
        layout=layout,
        joint=True,
        vocab_size=int(hf["vocab_size"]),
        pad_id=ids["pad"],
        bos_id=ids["bos"],
        eos_id=ids["eos"],
        unk_id=ids["unk"],
        decoder_start_id=ids["eos"] if start is None else start,
        languages=languages,
        source_language="suffix" if legacy else "prefix",
        target_language="forced_first",
    )


def _nllb_languages(folder: Path, sp, tok_json: dict) -> dict[str, int]:
    """NLLB's language ids, as tokenizer.json records its added tokens; its pieces must be the
    SentencePiece model's with fairseq's offset."""
    path = folder / "tokenizer.json"
    data = read_json(path)
    added = {t["content"]: t["id"] for t in data.get("added_tokens", []) if t.get("special")}
    named = {*SPECIAL_STRINGS.values(), "<mask>"}
    for key in ("mask_token", "cls_token", "sep_token"):
        if isinstance(tok_json.get(key), str):
            named.add(tok_json[key])
    languages = {t: i for t, i in added.items() if t not in named}
    for role, token in SPECIAL_STRINGS.items():
        if added.get(token, FAIRSEQ_IDS[role]) != FAIRSEQ_IDS[role]:
            raise UserError(
                f"{path}: {token} is {added[token]}, fairseq's id is {FAIRSEQ_IDS[role]}"
            )
    pieces = data.get("model", {}).get("vocab")
    if isinstance(pieces, list):  # a Unigram model: [piece, score] in id order
        pieces = {p[0]: i for i, p in enumerate(pieces)}
    ours = nllb_vocab(sp)
    wrong = [p for p, i in (pieces or {}).items() if p in ours and ours[p] != i]
    if wrong or not languages:
        what = (
            f"piece {wrong[0]!r} is not SentencePiece id + {NLLB_OFFSET}"
            if wrong
            else ("it names no language tokens")
        )
        raise UserError(f"{path} does not fit {SPM_FILE}: {what}")
    return languages


# ---------------------------------------------------------------------------------- export


def m2m100_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's weights under M2M100ForConditionalGeneration's names (one tensor per name;
    tied matrices written under each name, as transformers reads either)."""
    cfg = model.cfg
    state = {k: v.detach() for k, v in model.state_dict().items()}
    out = {
        "model.shared.weight": state["src_embed.weight"],
        "model.encoder.embed_tokens.weight": state["src_embed.weight"],
        "model.decoder.embed_tokens.weight": state["tgt_embed.weight"],
        "lm_head.weight": state["output.weight"],
    }
    for ours, theirs in (("encoder_norm", "model.encoder.layer_norm"),
                         ("decoder_norm", "model.decoder.layer_norm")):  # fmt: skip
        for kind in ("weight", "bias"):
            out[f"{theirs}.{kind}"] = state[f"{ours}.{kind}"]
    for ours, theirs, _ in _layer_table(cfg.encoder_layers, cfg.decoder_layers):
        for kind in ("weight", "bias"):
            # A fused projection is its parts stacked: q, k, v (or k, v) of d_model rows each.
            for name, part in zip(theirs, state[f"{ours}.{kind}"].chunk(len(theirs), dim=0)):
                out[f"{name}.{kind}"] = part
    return {k: v.float().contiguous().clone() for k, v in out.items()}


def m2m100_config(model: Transformer, cfg: Config, decode: DecodeConfig) -> tuple[dict, dict]:
    """config.json and generation_config.json of the run as an M2M100 model."""
    m, t = model.cfg, cfg.tokenizer
    config = {
        "architectures": ["M2M100ForConditionalGeneration"],
        "model_type": "m2m_100",
        "is_encoder_decoder": True,
        "vocab_size": t.vocab_size,
        "d_model": m.d_model,
        "encoder_layers": m.encoder_layers,
        "decoder_layers": m.decoder_layers,
        "encoder_attention_heads": m.heads,
        "decoder_attention_heads": m.heads,
        "encoder_ffn_dim": m.ffn_dim,
        "decoder_ffn_dim": m.ffn_dim,
        "activation_function": m.activation,
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "activation_dropout": 0.0,
        "max_position_embeddings": m.max_positions,
        "scale_embedding": m.scale_embeddings,
        "tie_word_embeddings": model.output.weight is model.tgt_embed.weight,
        "pad_token_id": t.pad_id,
        "bos_token_id": t.bos_id,
        "eos_token_id": t.eos_id,
        "decoder_start_token_id": t.start_id,
        "dtype": "float32",
    }
    generation = {
        "pad_token_id": t.pad_id,
        "bos_token_id": t.bos_id,
        "eos_token_id": t.eos_id,
        "decoder_start_token_id": t.start_id,
        # What this project never outputs, HF must not either, for the same translations.
        "bad_words_ids": [[i] for i in SpecialIds.of(t).never_generated],
        "num_beams": decode.beam_size,
        "length_penalty": decode.length_penalty,
        "early_stopping": True,
        "max_length": m.max_positions,
    }
    if cfg.data.tgt_lang in t.languages:  # the run's default direction
        generation["forced_bos_token_id"] = t.languages[cfg.data.tgt_lang]
    return config, generation


def export_hf_m2m100(run_dir: Path, out: Path, checkpoint: Path | None = None) -> Path:
    """Write an M2M100/NLLB run as a saved M2M100ForConditionalGeneration folder with its
    tokenizer files, which transformers' from_pretrained reads."""
    out = require_new_folder(out)
    cfg = load_run_config(run_dir)
    if cfg.tokenizer.layout not in ("m2m100", "nllb"):
        raise UserError(
            f"{run_dir}: a {cfg.tokenizer.layout} tokenizer has no M2M100 form (export hf "
            "writes runs imported from M2M100 or NLLB)"
        )
    model = load_run(run_dir, checkpoint, "cpu").model
    config, generation = m2m100_config(model, cfg, cfg.decode)
    tensors = m2m100_tensors(model)
    tok_dir = Path(run_dir) / TOKENIZER_DIR
    with staged_folder(out) as staging:
        write_hf_model(staging, tensors, config, generation)
        for path in tok_dir.iterdir():
            if path.is_file():
                shutil.copyfile(path, staging / path.name)
    return out
