"""Write tests/data/legacy_run: a tiny run trained, and decoded, by an older seq2seq.

It pins that checkpoints written before special ids, activations and Marian layouts became
configurable still load and decode identically (tests/test_legacy_checkpoint.py). Run it with the
old code first on the path, e.g. for commit 47cebdc:

    git archive 47cebdc seq2seq | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/make_legacy_run.py tests/data/legacy_run
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from seq2seq.config import validate_config
from seq2seq.data.batching import no_peek_mask, pad, padding_mask
from seq2seq.data.demo_corpus import generate_pairs
from seq2seq.decode.translator import load_translator
from seq2seq.train.trainer import train

SENTENCES = [
    "I have three cats.",
    "She was born on the first of May nineteen eighty.",
    "The book costs twelve euros and fifty cents.",
    "It is a quarter past five.",
    "I have seventy-one dogs.",
]


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pairs = generate_pairs(800, seed=3)
        src, tgt = Path(tmp) / "train.en", Path(tmp) / "train.fr"
        src.write_text("".join(a + "\n" for a, _ in pairs))
        tgt.write_text("".join(b + "\n" for _, b in pairs))
        cfg = validate_config(
            {
                "run_dir": str(Path(tmp) / "run"),
                "data": {"train": {"src": str(src), "tgt": str(tgt)}, "max_len": 40},
                "tokenizer": {"vocab_size": 120},
                "model": {
                    "d_model": 32,
                    "heads": 4,
                    "encoder_layers": 2,
                    "decoder_layers": 2,
                    "ffn_dim": 64,
                    "dropout": 0.0,
                    "max_positions": 64,
                },
                "train": {
                    "max_tokens": 800,
                    "max_steps": 300,
                    "lr": 3e-3,
                    "warmup_steps": 30,
                    "log_every": 100,
                    "eval_every": 1000,
                    "save_every": 300,
                    "threads": 1,
                    "tensorboard": False,
                },
                "decode": {"beam_size": 3},
            },
            "legacy",
        )
        train(cfg, progress=False)
        run = Path(tmp) / "run"
        if out.exists():
            shutil.rmtree(out)
        (out / "tokenizer").mkdir(parents=True)
        (out / "checkpoints").mkdir()
        shutil.copyfile(run / "config.yaml", out / "config.yaml")
        shutil.copyfile(run / "tokenizer" / "spm.model", out / "tokenizer" / "spm.model")
        # The weights as the old code saved them; the trainer state is left out (size).
        weights = run / "checkpoints" / "step_00000300.safetensors"
        shutil.copyfile(weights, out / "checkpoints" / "best.safetensors")
    translator, _ = load_translator(out, device="cpu")
    beam = translator.translate(SENTENCES)
    greedy_options = translator.options.model_copy(update={"beam_size": 1})
    greedy = translator.translate(SENTENCES, options=greedy_options)
    ids = translator.tokenizer.encode_src(SENTENCES)
    src_t = pad(ids)
    tgt_in = pad([[1] + s[:-1] for s in translator.tokenizer.encode_tgt(greedy)])
    with torch.no_grad():
        logits = translator.model(src_t, tgt_in, padding_mask(src_t), no_peek_mask(tgt_in))
    save_file({"src": src_t, "tgt_in": tgt_in, "logits": logits}, str(out / "expected.safetensors"))
    expected = {"sentences": SENTENCES, "beam": beam, "greedy": greedy, "src_ids": ids}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
