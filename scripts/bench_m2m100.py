"""Decode speed of an imported M2M100: seq2seq beside HF `generate` and CTranslate2, same weights.

    python scripts/bench_m2m100.py --out /tmp/m2m-bench [--limit 1000] [--repeats 3]

One tiny random M2M100ForConditionalGeneration of the peers' shape (d_model 256, 3+3 layers, 4
heads, FFN 1024, relu, embeddings × √d) with an M2M100 tokenizer over a SentencePiece model of
the shared corpus (vocab.json, 100 language tokens, 8 made-up words) is saved with
`save_pretrained`, imported with `seq2seq import hf`, converted by CTranslate2's own
TransformersConverter, and the three decode the valid sentences en → fr (forced first token
`__fr__`), greedy and beam 4, on 2 threads. A random model loops to the length cap; here its
EOS output row is set to a positional direction so that sentences end after some tokens,
at lengths of their own (the trick of tests/test_hf_m2m100.py), which is what a trained model's
outputs look like to a decoder's machinery. Protocol as bench_translate.py: length-sorted
batches of 32 (longest first), at most 1.5·(longest source) + 10 output tokens, len^1.0 length
normalisation, timing text to text (each system's own tokenizer; model loading excluded),
median of repeats; the outputs' agreement with seq2seq's is printed beside the speed.

With --fine-tune-minutes M the imported model is first trained en → fr on the shared corpus for M
minutes (`seq2seq train --init-from`) and exported back to the HF layout, and all three decode
those weights: outputs then end where a translation does, not where a trick says (their BLEU
against the references is printed, to show what was decoded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BATCH = 32
SHAPE = {"d_model": 256, "layers": 3, "heads": 4, "ffn": 1024}


def build_model(out: Path, spm_model: Path, seed: int = 0):
    """The tiny M2M100 and its tokenizer files in `out` (as save_pretrained writes them)."""
    import sentencepiece as spm
    import transformers

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    out.mkdir(parents=True)
    (out / "vocab.build.json").write_text(json.dumps(vocab), "utf-8")
    tok = transformers.M2M100Tokenizer(
        vocab_file=str(out / "vocab.build.json"),
        spm_file=str(spm_model),
        src_lang="en",
        tgt_lang="fr",
    )
    size = tok.vocab_size + len(tok.lang_code_to_id) + tok.num_madeup_words
    config = transformers.M2M100Config(
        vocab_size=size,
        d_model=SHAPE["d_model"],
        encoder_layers=SHAPE["layers"],
        decoder_layers=SHAPE["layers"],
        encoder_attention_heads=SHAPE["heads"],
        decoder_attention_heads=SHAPE["heads"],
        encoder_ffn_dim=SHAPE["ffn"],
        decoder_ffn_dim=SHAPE["ffn"],
        max_position_embeddings=256,
        scale_embedding=True,
        dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        init_std=0.05,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        table = model.model.decoder.embed_positions.get_embedding(32, SHAPE["d_model"], 1)
        model.lm_head.weight[2] = 0.05 * table[14]
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "vocab.build.json").unlink()
    return model, tok


def batches(lengths: list[int]) -> list[tuple[list[int], int]]:
    """Longest-first batches of BATCH sentences and their cap, 1.5·longest + 10 tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out = []
    for at in range(0, len(order), BATCH):
        batch = order[at : at + BATCH]
        out.append((batch, int(1.5 * lengths[batch[0]] + 10)))
    return out


def timed(fn, repeats: int) -> tuple[list[str], float]:
    """The outputs of `fn()` and its median wall time over `repeats` runs (after a warm-up)."""
    fn()
    times, hyps = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        hyps = fn()
        times.append(time.perf_counter() - start)
    return hyps, statistics.median(times)


def seq2seq_decode(run: Path, src: list[str], beam: int):
    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    decode = run_decode(run, beam_size=beam, length_penalty=1.0, split_sentences=False)
    tr, _ = load_translator(run, device="cpu", decode=decode, src_lang="en", tgt_lang="fr")
    plan = batches([len(x) for x in tr.tokenizer.encode_src(src, "en")])

    def run_all() -> list[str]:
        hyps = [""] * len(src)
        for batch, cap in plan:
            # Theirs counts generated tokens, ours tokens + EOS (forced at the cap).
            capped = decode.model_copy(update={"max_len_a": 0.0, "max_len_b": cap + 1})
            for i, hyp in zip(batch, tr.translate([src[i] for i in batch], options=capped)):
                hyps[i] = hyp
        return hyps

    return run_all


def hf_decode(model, tok, src: list[str], beam: int):
    tok.src_lang = "en"
    plan = batches([len(x) for x in tok(src).input_ids])
    fr = tok.convert_tokens_to_ids("__fr__")
    languages = set(tok.lang_code_to_id.values())

    def run_all() -> list[str]:
        hyps = [""] * len(src)
        for batch, cap in plan:
            enc = tok([src[i] for i in batch], return_tensors="pt", padding=True)
            with torch.inference_mode():
                out = model.generate(
                    **enc,
                    forced_bos_token_id=fr,
                    num_beams=beam,
                    length_penalty=1.0,
                    early_stopping=True,
                    do_sample=False,
                    max_new_tokens=cap,
                    suppress_tokens=[0, 1],  # what seq2seq never outputs (<s>, <pad>)
                )
            rows = [[t for t in row if t not in languages] for row in out[:, 2:].tolist()]
            for i, text in zip(batch, tok.batch_decode(rows, skip_special_tokens=True)):
                hyps[i] = " ".join(text.split())
        return hyps

    return run_all


def ct2_decode(folder: Path, tok, src: list[str], beam: int, threads: int):
    import ctranslate2

    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=threads)
    tok.src_lang = "en"
    pieces = [tok.convert_ids_to_tokens(ids) for ids in tok(src).input_ids]
    plan = batches([len(p) for p in pieces])

    def run_all() -> list[str]:
        hyps = [""] * len(src)
        for batch, cap in plan:
            found = translator.translate_batch(
                [pieces[i] for i in batch],
                target_prefix=[["__fr__"]] * len(batch),
                beam_size=beam,
                length_penalty=1.0,
                max_decoding_length=cap,
                suppress_sequences=[["<s>"], ["<pad>"]],
            )
            for i, result in zip(batch, found):
                tokens = [t for t in result.hypotheses[0] if not t.startswith("__")]
                text = tok.convert_tokens_to_string([t for t in tokens if t not in ("</s>",)])
                hyps[i] = " ".join(text.split())
        return hyps

    return run_all


def fine_tune(run: Path, data: Path, minutes: float, threads: int, out: Path) -> tuple[Path, Path]:
    """Train the imported run en → fr for `minutes` (`train --init-from`), export it back to the
    HF layout; return the tuned run and the exported folder."""
    import yaml

    tuned, exported = out / "tuned", out / "hf-tuned"
    config = {
        "run_dir": str(tuned),
        "data": {
            "src_lang": "en",
            "tgt_lang": "fr",
            "train": {"src": str(data / "train.en"), "tgt": str(data / "train.fr")},
            "valid": {
                "src": str(data / "valid.en"),
                "tgt": str(data / "valid.fr"),
                "max_pairs": 100,
            },
            "max_len": 128,
        },
        "train": {
            "max_tokens": 2048,
            "max_steps": 100_000,
            "max_minutes": minutes,
            "lr": 1.0e-3,
            "warmup_steps": 200,
            "eval_every": 100_000,  # one validation, at the end
            "save_every": 100_000,
            "valid_bleu_sentences": 0,
            "threads": threads,
            "device": "cpu",
            "tensorboard": False,
        },
    }
    (out / "fine-tune.yaml").write_text(yaml.safe_dump(config), "utf-8")
    seq2seq = [sys.executable, "-m", "seq2seq", "--quiet"]
    subprocess.run(
        [*seq2seq, "train", "-c", out / "fine-tune.yaml", "--init-from", run], check=True
    )
    subprocess.run([*seq2seq, "export", "--run", tuned, "--format", "hf", exported], check=True)
    return tuned, exported


def ct2_vocabulary(self, model, tokenizer) -> list[str]:
    """M2M100's ids in order: vocab.json, the language tokens, the made-up words
    (CTranslate2 4.8 reads the languages from `additional_special_tokens`, which transformers
    5's M2M100Tokenizer leaves empty)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    tokens += list(tokenizer.lang_token_to_id)  # in id order
    return tokens + [f"madeupword{i}" for i in range(tokenizer.num_madeup_words)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=SHARED / "data" / "enfr")
    parser.add_argument("--spm", type=Path, default=Path("/work/bench/enfr12/tokenizer/spm.model"))
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--fine-tune-minutes", type=float, default=0.0, help="train en→fr first (0: random)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import ctranslate2
    import sacrebleu

    from seq2seq.interop.hf import import_hf

    src = (args.data / "valid.en").read_text("utf-8").splitlines()[: args.limit]
    refs = (args.data / "valid.fr").read_text("utf-8").splitlines()[: args.limit]
    model, tok = build_model(args.out / "hf", args.spm)
    run, hf = args.out / "run", args.out / "hf"
    import_hf(str(hf), run)
    if args.fine_tune_minutes:
        import transformers

        run, hf = fine_tune(run, args.data, args.fine_tune_minutes, args.threads, args.out)
        model = transformers.M2M100ForConditionalGeneration.from_pretrained(hf).eval()
        tok = transformers.AutoTokenizer.from_pretrained(hf)
    from ctranslate2.converters import transformers as ct2_transformers

    ct2_transformers.M2M100Loader.get_vocabulary = ct2_vocabulary
    ctranslate2.converters.TransformersConverter(str(hf)).convert(str(args.out / "ct2"))
    results: dict = {
        "sentences": len(src),
        "threads": args.threads,
        "shape": SHAPE,
        "fine_tune_minutes": args.fine_tune_minutes,
    }
    for beam in (1, 4):
        mode = "greedy" if beam == 1 else f"beam{beam}"
        systems = {
            "seq2seq": seq2seq_decode(run, src, beam),
            "hf_generate": hf_decode(model, tok, src, beam),
            "ctranslate2_float32": ct2_decode(args.out / "ct2", tok, src, beam, args.threads),
        }
        found = {name: timed(fn, args.repeats) for name, fn in systems.items()}
        ours = found["seq2seq"][0]
        words = sum(len(h.split()) for h in ours) / len(ours)
        results[mode] = {
            name: {
                "sent_s": len(src) / seconds,
                "seconds": seconds,
                "same_as_seq2seq": sum(a == b for a, b in zip(hyps, ours)) / len(src),
            }
            for name, (hyps, seconds) in found.items()
        }
        results[mode]["words_per_output"] = words
        results[mode]["seq2seq_bleu"] = sacrebleu.corpus_bleu(ours, [refs]).score
        pieces = sum(len(p) - 2 for p in tok(ours).input_ids)  # without the tag and EOS
        results[mode]["pieces_per_output"] = pieces / len(ours)
        for peer in ("hf_generate", "ctranslate2_float32"):
            ratio = results[mode]["seq2seq"]["sent_s"] / results[mode][peer]["sent_s"]
            results[mode][f"seq2seq_vs_{peer}"] = ratio
        print(mode, json.dumps(results[mode], indent=1), flush=True)
    (args.out / "metrics.json").write_text(json.dumps(results, indent=2), "utf-8")


if __name__ == "__main__":
    main()
