"""Hugging Face MarianMTModel (OPUS-MT) checkpoints into run directories, and runs back out.

Marian is this project's post-norm network (§3.1–3.5: embeddings × √d_model, sinusoidal
positions, no final norm) with layout differences that one name table (`_layer_table`) maps both
ways: q/k/v (and cross-attention k/v) projections are separate where this project fuses them,
and Marian's sinusoidal table puts all sines before all cosines where the paper interleaves them.
The second is a fixed permutation of the model dimension; applying it to every weight that reads
or writes the residual stream gives a network computing exactly the same function, so positions
stay the project's own. What the model and tokenizer learn for Marian is configuration: the
activation, the special ids and the decoder's start token (PAD), the final logits bias, untied
source/target embeddings, and the tokenizer layout (source.spm / target.spm through vocab.json).

Reading a checkpoint never runs code from it: safetensors, or `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from seq2seq.config import (
    Config,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    TokenizerConfig,
    load_run_config,
)
from seq2seq.data.tokenizer import (
    MARIAN_FILES,
    MARIAN_TARGET_VOCAB,
    TOKENIZER_DIR,
    SpecialIds,
    Tokenizer,
    load_marian_tokenizer,
    marian_special_tokens,
    marian_vocab,
    model_paths,
    read_json,
)
from seq2seq.errors import UserError
from seq2seq.interop.staging import (
    require_new_folder,
    staged_folder,
    write_hf_model,
    write_imported_run,
)
from seq2seq.model.transformer import Transformer, Vocabulary, build_model
from seq2seq.run.rundir import load_run

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# transformers' names for the activations the model has (silu is swish).
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# Old (BART-style) Marian config keys whose non-default value would be another network.
UNSUPPORTED = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}

# How a tensor meets the residual stream, which the sine/cosine layout permutes.
READS = "reads"  # a linear (or embedding) whose input dimension is the residual stream
WRITES = "writes"  # a linear whose output is the residual stream (weight rows, bias)
NORM = "norm"  # a LayerNorm over the residual stream


def _layer_table(encoder_layers: int, decoder_layers: int) -> list[tuple[str, tuple, str]]:
    """(seq2seq module, Marian module(s) it fuses, residual role) for every layer module."""
    rows: list[tuple[str, tuple, str]] = []
    for i in range(encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        qkv = tuple(f"{theirs}.self_attn.{n}_proj" for n in "qkv")
        rows += [
            (f"{ours}.self_attn.qkv_proj", qkv, READS),
            (f"{ours}.self_attn.out_proj", (f"{theirs}.self_attn.out_proj",), WRITES),
            (f"{ours}.attn_block.norm", (f"{theirs}.self_attn_layer_norm",), NORM),
            (f"{ours}.ffn.up", (f"{theirs}.fc1",), READS),
            (f"{ours}.ffn.down", (f"{theirs}.fc2",), WRITES),
            (f"{ours}.ffn_block.norm", (f"{theirs}.final_layer_norm",), NORM),
        ]
    for i in range(decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        qkv = tuple(f"{theirs}.self_attn.{n}_proj" for n in "qkv")
        kv = tuple(f"{theirs}.encoder_attn.{n}_proj" for n in "kv")
        rows += [
            (f"{ours}.self_attn.qkv_proj", qkv, READS),
            (f"{ours}.self_attn.out_proj", (f"{theirs}.self_attn.out_proj",), WRITES),
            (f"{ours}.self_block.norm", (f"{theirs}.self_attn_layer_norm",), NORM),
            (f"{ours}.cross_attn.q_proj", (f"{theirs}.encoder_attn.q_proj",), READS),
            # Keys and values read the encoder output: the residual stream of the encoder.
            (f"{ours}.cross_attn.kv_proj", kv, READS),
            (f"{ours}.cross_attn.out_proj", (f"{theirs}.encoder_attn.out_proj",), WRITES),
            (f"{ours}.cross_block.norm", (f"{theirs}.encoder_attn_layer_norm",), NORM),
            (f"{ours}.ffn.up", (f"{theirs}.fc1",), READS),
            (f"{ours}.ffn.down", (f"{theirs}.fc2",), WRITES),
            (f"{ours}.ffn_block.norm", (f"{theirs}.final_layer_norm",), NORM),
        ]
    return rows


def sines_first(d_model: int) -> torch.Tensor:
    """Marian's dimension j is the project's dimension `sines_first(d)[j]`: Marian's table has
    sin(pos·ω_i) at i and cos(pos·ω_i) at d/2 + i, the paper's at 2i and 2i + 1."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _permute(t: torch.Tensor, role: str, perm: torch.Tensor) -> torch.Tensor:
    """`t` in the other layout: index j of the result is index perm[j] of `t`."""
    if role == READS:
        return t[:, perm].contiguous() if t.dim() == 2 else t  # a reading linear's bias stays
    return t[perm].contiguous()


def marian_positions(length: int, d_model: int) -> torch.Tensor:
    """Marian's sinusoidal table (transformers' MarianSinusoidalPositionalEmbedding)."""
    pos = np.arange(length)[:, None] / np.power(10000, 2 * (np.arange(d_model) // 2) / d_model)
    out = np.zeros((length, d_model))
    out[:, : d_model // 2] = np.sin(pos[:, 0::2])
    out[:, d_model // 2 :] = np.cos(pos[:, 1::2])
    return torch.from_numpy(out).float()


# ---------------------------------------------------------------------------------- import


def resolve_source(source: str, extra_files: tuple[str, ...] = ()) -> Path:
    """A local folder, or a hub model name (`Helsinki-NLP/opus-mt-en-fr`) fetched through
    huggingface_hub: downloaded when online, from its cache when offline (Marian's small files,
    `extra_files` too, and the weights)."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{source} is not a folder holding a saved MarianMTModel")
        return path
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", source):
        raise UserError(f"{source}: no such folder, and not a hub model name")
    try:  # only a hub name needs it; local folders import without it
        from huggingface_hub import snapshot_download
    except ImportError:  # comes with datasets, but a user may have removed it
        raise UserError(
            "importing from the hub needs huggingface_hub: pip install huggingface_hub"
        ) from None
    small = ["config.json", "generation_config.json", *MARIAN_FILES, MARIAN_TARGET_VOCAB]
    small += list(extra_files)
    try:
        folder = Path(snapshot_download(source, allow_patterns=[*small, "model.safetensors"]))
        if not (folder / "model.safetensors").is_file():  # an older repository: weights as .bin
            folder = Path(snapshot_download(source, allow_patterns=[*small, "pytorch_model.bin"]))
    except Exception as e:  # offline without a cached copy, unknown name, network errors
        raise UserError(
            f"{source}: no such folder, and the hub could not provide it "
            f"({type(e).__name__}: {e}); offline, only models already in the cache are found"
        ) from None
    return folder


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a saved model: model.safetensors, else pytorch_model.bin (read with
    `weights_only=True`, so it cannot run code), sharded or not."""
    for name in WEIGHT_FILES:
        single, index = folder / name, folder / f"{name}.index.json"
        if single.is_file():
            files = [single]
        elif index.is_file():
            shards = read_json(index).get("weight_map", {}).values()
            files = [folder / s for s in sorted(set(shards))]
        else:
            continue
        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            try:
                if name.endswith(".safetensors"):
                    tensors.update(load_file(str(file)))
                else:
                    tensors.update(torch.load(file, map_location="cpu", weights_only=True))
            except Exception as e:  # truncated, not a checkpoint, or pickled code (refused)
                raise UserError(f"cannot read weights {file}: {e}") from None
        return {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    raise UserError(f"{folder} holds no model.safetensors or pytorch_model.bin (PyTorch weights)")


@dataclass
class Imported:
    """What a Marian checkpoint becomes: a config and a model holding its weights."""

    config: Config
    model: Transformer


def convert(folder: Path, run_dir: Path) -> Imported:
    """Read a saved MarianMTModel folder into a config and a model (no files written)."""
    try:
        return _convert(Path(folder), run_dir)
    except ValidationError as e:  # values no config here can hold (e.g. pad = eos)
        raise UserError(f"{folder} does not fit a run's config: {e}") from None


def _convert(folder: Path, run_dir: Path) -> Imported:
    hf, tok_cfg_json = _marian_configs(folder)
    separate = bool(tok_cfg_json.get("separate_vocabs", False))
    if separate and not (folder / MARIAN_TARGET_VOCAB).is_file():
        raise UserError(f"{folder}: separate_vocabs is set but {MARIAN_TARGET_VOCAB} is missing")
    src_vocab = marian_vocab(folder / "vocab.json")
    tgt_vocab = marian_vocab(folder / MARIAN_TARGET_VOCAB) if separate else src_vocab

    tensors = read_weights(folder)
    model_cfg = model_config(hf, folder, norm_first=False)
    share, tie, src_embed, tgt_embed, output = _embeddings(hf, tensors, folder)
    model_cfg = model_cfg.model_copy(update={"share_embeddings": share, "tie_embeddings": tie})
    bias = tensors.get("final_logits_bias")
    if bias is not None and bool(bias.any()):
        model_cfg = model_cfg.model_copy(update={"final_logits_bias": True})
    _check_positions(tensors, model_cfg.d_model, folder)

    tok_cfg = _tokenizer_config(hf, tok_cfg_json, src_vocab, tgt_vocab, separate, folder)
    for name, table, emb in (("source", src_vocab, src_embed), ("target", tgt_vocab, tgt_embed)):
        if emb.size(0) != len(table):
            raise UserError(
                f"{folder}: the {name} vocabulary has {len(table)} pieces but the embeddings "
                f"{emb.size(0)} rows"
            )
    ids = SpecialIds.of(tok_cfg)
    model = build_model(
        model_cfg, Vocabulary(len(src_vocab), len(tgt_vocab), not separate, ids.pad)
    )
    inverse = torch.argsort(sines_first(model_cfg.d_model))
    state: dict[str, torch.Tensor] = {
        "src_embed.weight": _permute(src_embed, READS, inverse),
        "tgt_embed.weight": _permute(tgt_embed, READS, inverse),
        "output.weight": _permute(output, READS, inverse),
    }
    if model_cfg.final_logits_bias:
        state["final_logits_bias"] = bias.reshape(-1)
    for ours, theirs, role in _layer_table(model_cfg.encoder_layers, model_cfg.decoder_layers):
        for kind in ("weight", "bias"):
            parts = [_tensor(tensors, f"{t}.{kind}", folder) for t in theirs]
            state[f"{ours}.{kind}"] = _permute(torch.cat(parts), role, inverse)
    load_mapped(model, state)

    decode = decode_config(folder, hf)
    src_lang, tgt_lang = _languages(tok_cfg_json, folder)
    max_len = min(DataConfig.model_fields["max_len"].default, model_cfg.max_positions - 1)
    data = DataConfig(src_lang=src_lang, tgt_lang=tgt_lang, max_len=max_len)
    config = Config(
        run_dir=Path(run_dir).resolve(),
        data=data,
        tokenizer=tok_cfg,
        model=model_cfg,
        decode=decode,
    )
    return Imported(config, model.eval())


def _marian_configs(folder: Path) -> tuple[dict, dict]:
    """config.json and tokenizer_config.json of a saved MarianMTModel this project can hold."""
    missing = [n for n in ("config.json", *MARIAN_FILES) if not (folder / n).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {', '.join(missing)} (a saved MarianMTModel has them)")
    hf = read_json(folder / "config.json")
    if hf.get("model_type") not in (None, "marian"):
        raise UserError(
            f"{folder}/config.json: model_type {hf.get('model_type')!r}, not a MarianMTModel"
        )
    for key, default in UNSUPPORTED.items():
        if hf.get(key, default) != default:
            raise UserError(f"{folder}/config.json: {key}={hf[key]} is not supported")
    return hf, read_json(folder / "tokenizer_config.json")


def load_mapped(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """Load weights mapped from another layout; every module of the model must have one."""
    expected = set(model.state_dict())
    if set(state) != expected:  # a table that misses a module is a bug here, not bad input
        raise RuntimeError(f"unmapped weights: {sorted(set(state) ^ expected)}")
    model.load_state_dict(state, strict=True)


def _tensor(tensors: dict[str, torch.Tensor], name: str, folder: Path) -> torch.Tensor:
    if name not in tensors:
        raise UserError(f"{folder}: the checkpoint lacks {name}")
    return tensors[name]


def model_config(
    hf: dict, folder: Path, *, activation: str = "gelu", scale: bool = False, **fixed
) -> ModelConfig:
    """The ModelConfig of a Marian-family config.json: `activation` and `scale` (embeddings
    scaled) where it names none, `fixed` what the family fixes (norm_first, positions)."""

    def same(a: str, b: str) -> int:
        if hf.get(a) != hf.get(b):
            raise UserError(
                f"{folder}/config.json: {a} ≠ {b} is not supported ({hf.get(a)}, {hf.get(b)})"
            )
        return hf[a]

    activation = ACTIVATIONS.get(hf.get("activation_function", activation))
    if activation is None:
        raise UserError(
            f"{folder}/config.json: activation_function {hf['activation_function']!r} is not "
            f"supported (supported: {', '.join(ACTIVATIONS)})"
        )
    if hf.get("activation_dropout"):
        log.warning(
            "activation_dropout %s is not applied (fine-tuning uses dropout only)",
            hf["activation_dropout"],
        )
    try:
        return ModelConfig(
            d_model=hf["d_model"],
            heads=same("encoder_attention_heads", "decoder_attention_heads"),
            encoder_layers=hf["encoder_layers"],
            decoder_layers=hf["decoder_layers"],
            ffn_dim=same("encoder_ffn_dim", "decoder_ffn_dim"),
            dropout=hf.get("dropout", 0.1),
            attention_dropout=hf.get("attention_dropout", 0.0),
            max_positions=hf.get("max_position_embeddings", 1024),
            activation=activation,
            scale_embeddings=bool(hf.get("scale_embedding", scale)),
            **fixed,
        )
    except KeyError as e:
        raise UserError(f"{folder}/config.json lacks {e}") from None
    except ValueError as e:  # pydantic: impossible values
        raise UserError(f"{folder}/config.json: {e}") from None


def _embeddings(hf: dict, tensors: dict, folder: Path):
    """(share source/target, tie output, source, target, output embedding matrices).

    The config says what is tied; the tensors must agree (transformers 5 unties a shared
    encoder/decoder pair when the output is untied, so both are read and compared)."""
    shared = tensors.get("model.shared.weight")
    src = tensors.get("model.encoder.embed_tokens.weight", shared)
    tgt = tensors.get("model.decoder.embed_tokens.weight", shared)
    if src is None or tgt is None:
        raise UserError(f"{folder}: the checkpoint holds no token embeddings")
    share = bool(hf.get("share_encoder_decoder_embeddings", True))
    share = share and src.shape == tgt.shape and torch.equal(src, tgt)
    tie = bool(hf.get("tie_word_embeddings", True))
    output = tensors.get("lm_head.weight")
    if output is None:
        if not tie:
            raise UserError(f"{folder}: tie_word_embeddings is false but lm_head.weight is missing")
        output = tgt
    tie = tie and torch.equal(output, tgt)
    return share, tie, src, tgt, output


def _check_positions(tensors: dict, d_model: int, folder: Path) -> None:
    for name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        table = tensors.get(name)
        if table is None:
            continue
        if not torch.allclose(table, marian_positions(table.size(0), d_model), atol=1e-4):
            raise UserError(f"{folder}: {name} is not Marian's sinusoidal table")


def _tokenizer_config(hf, tok_json, src_vocab, tgt_vocab, separate, folder) -> TokenizerConfig:
    roles, _, _ = marian_special_tokens(tok_json)
    ids = {}
    for role, token in roles.items():
        if token not in src_vocab or tgt_vocab.get(token) != src_vocab[token]:
            raise UserError(f"{folder}: {token} ({role}) is missing from the vocabulary")
        ids[role] = src_vocab[token]
    for role in ("pad", "eos"):
        given = hf.get(f"{role}_token_id")
        if given is not None and given != ids[role]:
            raise UserError(
                f"{folder}/config.json: {role}_token_id {given} is not the vocabulary's "
                f"{roles[role]} ({ids[role]})"
            )
    start = hf.get("decoder_start_token_id")
    start = ids["pad"] if start is None else start
    if not 0 <= start < len(tgt_vocab):
        raise UserError(f"{folder}/config.json: decoder_start_token_id {start} is out of range")
    bos = hf.get("bos_token_id")
    # Marian has no BOS; configs often name EOS (or PAD) as one: that is no BOS of its own.
    if bos is not None and (bos in ids.values() or not 0 <= bos < len(tgt_vocab)):
        bos = None
    return TokenizerConfig(
        layout="marian",
        joint=not separate,
        vocab_size=len(src_vocab),
        pad_id=ids["pad"],
        eos_id=ids["eos"],
        unk_id=ids["unk"],
        bos_id=bos,
        decoder_start_id=start,
    )


def decode_config(folder: Path, hf: dict) -> DecodeConfig:
    """Beam size and length penalty of the generation config; HF's len^α normalisation."""
    path = folder / "generation_config.json"
    generation = {**hf, **(read_json(path) if path.is_file() else {})}
    # HF divides beam scores by len^α (`length`), not GNMT's ((5+len)/6)^α: the imported run
    # ranks hypotheses as `generate` does, so their beam outputs are the same.
    decode = DecodeConfig().model_copy(update={"length_norm": "length", "length_penalty": 1.0})
    if isinstance(generation.get("num_beams"), int) and generation["num_beams"] >= 1:
        decode = decode.model_copy(update={"beam_size": generation["num_beams"]})
    if isinstance(generation.get("length_penalty"), (int, float)):
        alpha = max(float(generation["length_penalty"]), 0.0)
        decode = decode.model_copy(update={"length_penalty": alpha})
    return decode


def _languages(tok_json: dict, folder: Path) -> tuple[str, str]:
    src, tgt = tok_json.get("source_lang"), tok_json.get("target_lang")
    if not (src and tgt):  # OPUS-MT's names say it (opus-mt-en-fr), hub cache folders too
        m = re.search(r"opus-mt-([a-zA-Z]+)-([a-zA-Z]+)", str(folder))
        src, tgt = (m.group(1), m.group(2)) if m else ("src", "tgt")
    return str(src), str(tgt)


def import_hf_marian(source: str, run_dir: Path) -> Config:
    """Turn a saved MarianMTModel (folder or hub name) into a run directory; return its config.

    The run holds the config, the tokenizer files and the weights as step 0, so translate,
    evaluate, info, attention, average and export use it as any run; fine-tune it with
    `train --init-from`.
    """
    run_dir = require_new_folder(run_dir)
    folder = resolve_source(source)
    imported = convert(folder, run_dir)
    cfg = imported.config

    def write_tokenizer(tok_dir: Path) -> None:
        names = [*MARIAN_FILES, *([] if cfg.tokenizer.joint else [MARIAN_TARGET_VOCAB])]
        for name in names:
            shutil.copyfile(folder / name, tok_dir / name)
        # The copied files must load as the run will load them (ids checked against config).
        load_marian_tokenizer(tok_dir, SpecialIds.of(cfg.tokenizer), cfg.tokenizer.joint)

    write_imported_run(run_dir, source, cfg, imported.model, write_tokenizer)
    return cfg


# ---------------------------------------------------------------------------------- export


def marian_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's weights under MarianMTModel's names and layout (one tensor per name)."""
    cfg = model.cfg
    perm = sines_first(cfg.d_model)
    out: dict[str, torch.Tensor] = {}
    src = _permute(model.src_embed.weight.detach(), READS, perm)
    shared = model.src_embed is model.tgt_embed
    tied = model.output.weight is model.tgt_embed.weight
    if shared and tied:
        out["model.shared.weight"] = src
    else:
        out["model.encoder.embed_tokens.weight"] = src
        if shared:  # transformers 4 reads the pair from `shared`, 5 from their own names
            out["model.shared.weight"] = src.clone()
            out["model.decoder.embed_tokens.weight"] = src.clone()
        else:
            tgt = _permute(model.tgt_embed.weight.detach(), READS, perm)
            out["model.decoder.embed_tokens.weight"] = tgt
        if not tied:
            out["lm_head.weight"] = _permute(model.output.weight.detach(), READS, perm)
    vocab = model.output.weight.size(0)
    bias = model.final_logits_bias
    out["final_logits_bias"] = (
        torch.zeros(1, vocab) if bias is None else bias.detach().reshape(1, -1).clone()
    )
    state = model.state_dict()
    for ours, theirs, role in _layer_table(cfg.encoder_layers, cfg.decoder_layers):
        for kind in ("weight", "bias"):
            # A fused projection is its parts stacked: q, k, v (or k, v) of d_model rows each.
            parts = state[f"{ours}.{kind}"].chunk(len(theirs), dim=0)
            for name, part in zip(theirs, parts):
                out[f"{name}.{kind}"] = _permute(part.detach(), role, perm)
    return {k: v.float().contiguous() for k, v in out.items()}


def marian_config(
    model: Transformer, special: SpecialIds, joint: bool, decode: DecodeConfig
) -> tuple[dict, dict]:
    """config.json and generation_config.json of the model as a MarianMTModel."""
    cfg = model.cfg
    shared = model.src_embed is model.tgt_embed
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "is_encoder_decoder": True,
        "vocab_size": model.src_embed.weight.size(0),
        "decoder_vocab_size": model.output.weight.size(0),
        "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads,
        "decoder_attention_heads": cfg.heads,
        "encoder_ffn_dim": cfg.ffn_dim,
        "decoder_ffn_dim": cfg.ffn_dim,
        "activation_function": cfg.activation,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": 0.0,
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embeddings,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": model.output.weight is model.tgt_embed.weight,
        "pad_token_id": special.pad,
        "eos_token_id": special.eos,
        "bos_token_id": special.bos,
        "decoder_start_token_id": special.start,
        "forced_eos_token_id": special.eos,
        "dtype": "float32",
    }
    generation = {
        "pad_token_id": special.pad,
        "eos_token_id": special.eos,
        "decoder_start_token_id": special.start,
        "forced_eos_token_id": special.eos,
        # What this project never outputs, HF must not either, for the same translations.
        "bad_words_ids": [[i] for i in special.never_generated],
        "num_beams": decode.beam_size,
        # HF's len^α is exact for a run with length_norm `length`; a GNMT run's α becomes the
        # exponent of len, a like preference for length (generate has no GNMT penalty).
        "length_penalty": decode.length_penalty,
        # The project's beam search stops a sentence at k finished hypotheses, as HF's
        # early_stopping=True does.
        "early_stopping": True,
        "max_length": cfg.max_positions,
    }
    if not joint and shared:
        raise RuntimeError("a shared embedding needs a joint vocabulary")
    return config, generation


def _write_tokenizer(run_dir: Path, cfg: Config, tokenizer: Tokenizer, out: Path) -> None:
    """MarianTokenizer's files: the run's own (an imported Marian vocabulary), or made from
    the run's SentencePiece model(s), whose ids become vocab.json as they are."""
    tok_cfg = cfg.tokenizer
    if tok_cfg.layout == "marian":
        names = [*MARIAN_FILES, *([] if tok_cfg.joint else [MARIAN_TARGET_VOCAB])]
        for name in names:
            shutil.copyfile(Path(run_dir) / TOKENIZER_DIR / name, out / name)
        return
    src_model, tgt_model = model_paths(run_dir, tok_cfg.joint)
    shutil.copyfile(src_model, out / "source.spm")
    shutil.copyfile(tgt_model, out / "target.spm")

    def vocab(pieces: list[str]) -> dict[str, int]:
        return {piece: i for i, piece in enumerate(pieces)}

    (out / "vocab.json").write_text(json.dumps(vocab(tokenizer.src_vocabulary())), "utf-8")
    if not tok_cfg.joint:
        target = json.dumps(vocab(tokenizer.tgt_vocabulary()))
        (out / MARIAN_TARGET_VOCAB).write_text(target, "utf-8")
    pieces = tokenizer.tgt_vocabulary()
    special = tokenizer.ids
    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": cfg.data.src_lang,
        "target_lang": cfg.data.tgt_lang,
        "unk_token": pieces[special.unk],
        "eos_token": pieces[special.eos],
        "pad_token": pieces[special.pad],
        "model_max_length": cfg.model.max_positions,
        "separate_vocabs": not tok_cfg.joint,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), "utf-8")


def export_hf_marian(run_dir: Path, out: Path, checkpoint: Path | None = None) -> Path:
    """Write a run (best, else latest, checkpoint) as a saved MarianMTModel folder with its
    MarianTokenizer files: `MarianMTModel.from_pretrained(out)` and CTranslate2's converter read
    it. Needs a post-norm model (Marian has no pre-norm form)."""
    out = require_new_folder(out)
    cfg = load_run_config(run_dir)
    if cfg.model.norm_first:
        raise UserError(
            "a MarianMTModel is post-norm: a pre-norm (model.norm_first) run has no "
            "Marian form; export it with --format ctranslate2"
        )
    # Float32 weights always, whatever the run's decode.quantize.
    run = load_run(run_dir, checkpoint, "cpu")
    model, tokenizer = run.model, run.tokenizer
    config, generation = marian_config(model, tokenizer.ids, tokenizer.joint, cfg.decode)
    tensors = marian_tensors(model)
    with staged_folder(out) as staging:
        write_hf_model(staging, tensors, config, generation)
        _write_tokenizer(run_dir, cfg, tokenizer, staging)
    return out
