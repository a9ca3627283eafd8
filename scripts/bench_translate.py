"""Decoding speed: the project beside HF Marian `generate` and CTranslate2, same shape and data.

    python scripts/bench_translate.py                       # trains both for 10 min, then decodes
    python scripts/bench_translate.py --project-run R --peer-model M   # reuse trained models

Decode speed depends on what a model outputs (an untrained one runs to the length cap, a half-
trained one may loop), so the fair comparison runs the *same weights* in each system: the project's
trained model is written as a Hugging Face MarianMTModel (`seq2seq export --format hf-marian`, an
exact conversion: greedy and beam outputs are compared and the agreement printed) and decoded by
HF `generate`. Beam search is the same search on every side: the project's is HF's (the 2k best
continuations, EOS within the first k finishes, k finished end a sentence: HF's
`early_stopping=True`), and here it divides scores by len^α as HF and CTranslate2 do
(`decode.length_norm: length`) and decodes lines whole, with the run's α given to HF and to
CTranslate2 as `length_penalty`. CTranslate2's Marian
converter cannot hold the project's model (it starts the decoder from a zero embedding, not BOS),
so CTranslate2 runs a peer model trained for the same time on the same data and shape by
../shared/bench/peers; HF `generate` decodes that model too, and the project / CTranslate2 ratio is
reported both directly and through HF on each model's weights.

The imported-model row puts all three on one set of weights: the peer's trained MarianMTModel, an
OPUS-MT directory (SentencePiece model as source.spm and target.spm, vocab.json of its ids), is
imported with `seq2seq import hf-marian` and decoded by the project beside HF `generate` and
CTranslate2 (the peers' own runs on that model); `--imported-only` runs just these. The project
decodes it with the peers' length penalty, len^1.0 (their default, as HF's).

Every system decodes the valid set, greedy and beam 4, on 2 threads, in length-sorted batches of
32 (longest first) with at most 1.5·(the batch's longest source) + 10 output tokens, the
peers' rule. Timing covers tokenizing, search and detokenizing,
not model loading; target tokens are SentencePiece pieces of the output + 1, counted the same way
for every system. Median of repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import PEER_PY, PEERS, REPO, bench_env, require_peers, train_peer, train_project

BEAMS = (1, 4)
BATCH = 32


def translate_as_peers_do(translator, src: list[str], batch_size: int = BATCH) -> list[str]:
    """The peers' batches (longest first, BATCH at a time) and their cap: 1.5·longest + 10.

    The project's own cap is per sentence (`decode.max_len_a·len + max_len_b`), which stops a
    looping short sentence sooner than a per-batch cap does; here every system gets the same
    budget, so the outputs of the same weights are the same and so is the work.
    """
    lengths = [len(x) for x in translator.tokenizer.encode_src(src)]  # EOS included, as theirs
    order = sorted(range(len(src)), key=lambda i: -lengths[i])
    hyps = [""] * len(src)
    base = translator.options
    for at in range(0, len(order), batch_size):
        batch = order[at : at + batch_size]
        # Theirs counts generated tokens, ours tokens + EOS (forced at the cap): one more step.
        cap = int(1.5 * lengths[batch[0]] + 10) + 1
        capped = base.model_copy(update={"max_len_a": 0.0, "max_len_b": cap})
        for i, hyp in zip(batch, translator.translate([src[i] for i in batch], options=capped)):
            hyps[i] = hyp
    return hyps


def speed(hyps: list[str], refs: list[str], times: list[float], tokenizer) -> dict:
    """Sentences/s and target tokens/s (pieces + EOS, as the peers count) of the median run."""
    import sacrebleu

    seconds = statistics.median(times)
    tokens = sum(len(p) + 1 for p in tokenizer.tgt.encode(hyps))
    return {
        "sent_s": len(hyps) / seconds,
        "tok_s": tokens / seconds,
        "seconds": seconds,
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
    }


def decode_exported_ct2(
    run: Path,
    src: list[str],
    refs: list[str],
    threads: int,
    repeats: int,
    out: Path,
    device: str = "cpu",
    compute_type: str = "default",
    export: bool = True,
    beams: tuple[int, ...] = BEAMS,
    batch_size: int = BATCH,
    name: str | None = None,
) -> dict | None:
    """`seq2seq export --format ctranslate2` of the project's run (into OUT/seq2seq-ct2, or the
    export already there with `export=False`), decoded as the peers do."""
    try:
        import ctranslate2
    except ImportError:
        print("ctranslate2 is not installed here: no row for the exported model", file=sys.stderr)
        return None

    from seq2seq.decode.translator import load_translator
    from seq2seq.interop.ctranslate2 import export_ctranslate2

    folder = out / "seq2seq-ct2"
    if export or not (folder / "model.bin").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        export_ctranslate2(run, folder)
    tok = load_translator(run, device="cpu")[0].tokenizer
    model = ctranslate2.Translator(
        str(folder),
        device=device,
        compute_type=compute_type,
        inter_threads=1,
        intra_threads=threads,
    )
    results = {}
    for beam in beams:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            pieces = tok.src.encode(src, out_type=str)
            lengths = [len(x) + 1 for x in pieces]  # + the EOS CTranslate2 appends
            order = sorted(range(len(src)), key=lambda i: -lengths[i])
            hyps = [""] * len(src)
            for at in range(0, len(order), batch_size):
                batch = order[at : at + batch_size]
                found = model.translate_batch(
                    [pieces[i] for i in batch],
                    beam_size=beam,
                    max_decoding_length=int(1.5 * lengths[batch[0]] + 10),
                    min_decoding_length=1,
                    suppress_sequences=[["<pad>"], ["<s>"]],
                    length_penalty=run_alpha(run),
                )
                for i, r in zip(batch, found):
                    hyps[i] = tok.tgt.decode_pieces(r.hypotheses[0])
            times.append(time.perf_counter() - start)
        mode = "greedy" if beam == 1 else f"beam{beam}"
        if name is not None:
            (out / f"{name}.{mode}.txt").write_text("".join(h + "\n" for h in hyps), "utf-8")
        results[mode] = speed(hyps, refs, times, tok)
    return results


def run_alpha(run: Path) -> float:
    """The length penalty α of a run's decode settings."""
    from seq2seq.config import load_run_config

    return load_run_config(run).decode.length_penalty


def decode_project(
    run: Path,
    src: list[str],
    refs: list[str],
    threads: int,
    repeats: int,
    out: Path,
    name: str = "seq2seq",
    length_penalty: float | None = None,
    device: str = "cpu",
    quantize: str = "none",
    beams: tuple[int, ...] = BEAMS,
    batch: int = BATCH,
    settings: dict | None = None,
) -> dict:
    """Greedy and beam-4 decoding of `src` by the project, timed in this process (on a GPU in
    its default precision, bf16 autocast; `quantize="int8"`: int8 on CPU; `settings`: more
    decode settings, e.g. {"packed_weights": False})."""
    import torch

    torch.set_num_threads(threads)
    from seq2seq.config import run_decode
    from seq2seq.decode.translator import load_translator

    def wait() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    results = {}
    for beam in beams:
        decode = {"beam_size": beam, "batch_size": batch, "max_len_a": 1.5, "max_len_b": 10}
        decode["length_penalty"], decode["quantize"] = length_penalty, quantize
        # HF's and CTranslate2's normalisation and whole lines, so that all run the same search.
        decode["length_norm"] = "length"
        decode["split_sentences"] = False
        decode.update(settings or {})
        translator, _ = load_translator(run, device=device, decode=run_decode(run, **decode))
        if device != "cpu":
            translate_as_peers_do(translator, src[:BATCH])  # kernels loaded before timing
        times = []
        for _ in range(repeats):
            wait()
            start = time.perf_counter()
            hyps = translate_as_peers_do(translator, src, batch)
            wait()
            times.append(time.perf_counter() - start)
        mode = "greedy" if beam == 1 else f"beam{beam}"
        (out / f"{name}.{mode}.txt").write_text("".join(h + "\n" for h in hyps), "utf-8")
        results["greedy" if beam == 1 else f"beam{beam}"] = speed(
            hyps, refs, times, translator.tokenizer
        )
    return results


def decode_with_peer_scripts(
    systems: list[tuple[str, str, str]],
    model: Path,
    spm: Path,
    data: Path,
    threads: int,
    repeats: int,
    env: dict[str, str],
) -> dict[str, dict]:
    """Run the peers' decode scripts: (name, script, output folder) each, on `model`."""
    common = [
        "--model",
        str(model),
        "--spm",
        str(spm),
        "--src",
        str(data / "valid.en"),
        "--ref",
        str(data / "valid.fr"),
        "--beams",
        ",".join(map(str, BEAMS)),
        "--batch",
        str(BATCH),
        "--repeats",
        str(repeats),
    ]
    results = {}
    for name, script, folder in systems:
        extra = []
        metrics = Path(folder) / "metrics.json"
        if script == "ct2_translate.py":
            extra = ["--compute-types", "float32", "--threads", str(threads)]
            metrics = Path(folder) / "ct2-float32" / "metrics.json"
        cmd = [str(PEER_PY), str(PEERS / script), *common, "--out", folder, *extra]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{script} failed:\n{proc.stderr[-3000:]}")
        decoded = json.loads(metrics.read_text())["decode"]
        results[name] = {
            mode: {k: r[k] for k in ("sent_s", "tok_s", "seconds", "bleu")}
            for mode, r in decoded.items()
        }
    return results


def export_to_marian(run: Path, out: Path, env: dict[str, str]) -> Path:
    """The project's weights as a MarianMTModel (`seq2seq export --format hf-marian`)."""
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "seq2seq", "--quiet", "export", "--run", str(run)]
    cmd += ["--format", "hf-marian", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"seq2seq export --format hf-marian failed:\n{proc.stderr[-3000:]}")
    return out


def opus_mt_layout(model: Path, spm_model: Path, out: Path) -> Path:
    """The peer's MarianMTModel as an OPUS-MT directory. The peers' training saves the
    MarianTokenizer files beside the model; where they are missing, they are made: its
    SentencePiece model as source.spm and target.spm, vocab.json mapping each piece to its
    SentencePiece id (the ids the peer trained on) and <pad> to the id after them."""
    import sentencepiece as spm

    from seq2seq.data.tokenizer import MARIAN_FILES

    if all((model / name).is_file() for name in MARIAN_FILES):
        return model
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out)
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    vocab["<pad>"] = sp.get_piece_size()
    config = json.loads((model / "config.json").read_text())
    if config["pad_token_id"] != vocab["<pad>"] or config["vocab_size"] != len(vocab):
        sys.exit(f"{model}: not the peers' layout (<pad> after the SentencePiece pieces)")
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(spm_model, out / name)
    tokenizer = {"tokenizer_class": "MarianTokenizer", "source_lang": "en", "target_lang": "fr"}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer), "utf-8")
    return out


def agreement(a: Path, b: Path) -> float:
    """Share of lines two hypothesis files have identical, up to whitespace."""
    x = a.read_text(encoding="utf-8").splitlines()
    y = b.read_text(encoding="utf-8").splitlines()
    return sum(p.split() == q.split() for p, q in zip(x, y)) / max(len(x), 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    p.add_argument("--train-seconds", type=float, default=600.0)
    p.add_argument("--project-run", type=Path, help="a trained project run to reuse")
    p.add_argument("--peer-model", type=Path, help="a trained peer model (…/peer/model) to reuse")
    p.add_argument(
        "--peer-spm", type=Path, help="the peer's SentencePiece model (…/peer-spm/spm.model)"
    )
    p.add_argument(
        "--imported-only",
        action="store_true",
        help="only the peer model imported into seq2seq, beside HF generate and CTranslate2",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="decode only the first N valid lines")
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-translate"))
    p.add_argument(
        "--int8",
        action="store_true",
        help="add int8 rows: seq2seq --quantize int8 and CTranslate2 int8 on the project's "
        "export, with outputs identical to float32 and loaded memory (scripts/bench_int8.py)",
    )
    p.add_argument(
        "--batch-sizes",
        help="e.g. 1,8,32,64: only time seq2seq and CTranslate2, float32 and int8, at each "
        "batch size on --project-run; writes benchmarks/int8_batch_sizes.png and .json",
    )
    args = p.parse_args()
    if args.batch_sizes or args.int8:
        if args.project_run is None:
            sys.exit("--int8 and --batch-sizes need --project-run R (a trained run)")
        int8_main(args)
        if args.batch_sizes:
            return
    require_peers()
    args.out.mkdir(parents=True, exist_ok=True)
    env = bench_env(args.threads)
    run = args.project_run
    if run is None and not args.imported_only:
        run = Path(train_project(args.data, args.out, args.train_seconds, args.threads, env)["run"])
    # The peer gets a SentencePiece model made by the peers' spm.sh (same data, type and size):
    # CTranslate2's converter needs their id layout (no <pad> piece; pad appended at id V).
    peer_spm = args.peer_spm or args.out / "peer-spm" / "spm.model"
    if not peer_spm.is_file():
        subprocess.run(
            [
                "bash",
                str(PEERS / "spm.sh"),
                str(args.data),
                str(peer_spm.parent),
                "8000",
                "unigram",
            ],
            check=True,
            env={**env, "PY": str(PEER_PY)},
            capture_output=True,
        )
    model = args.peer_model
    if model is None:
        model = Path(train_peer(args.data, peer_spm, args.out, args.train_seconds, env)["model"])

    src = (args.data / "valid.en").read_text(encoding="utf-8").splitlines()
    refs = (args.data / "valid.fr").read_text(encoding="utf-8").splitlines()
    if args.limit:
        src, refs = src[: args.limit], refs[: args.limit]
        for name, lines in (("valid.en", src), ("valid.fr", refs)):
            (args.out / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        data = args.out
    else:
        data = args.data
    systems: dict = {}
    same = [("hf-marian generate, seq2seq weights", "hf_marian_translate.py", "hf-same")]
    if not args.imported_only:
        systems["seq2seq"] = decode_project(run, src, refs, args.threads, args.repeats, args.out)
        exported = decode_exported_ct2(run, src, refs, args.threads, args.repeats, args.out)
        if exported is not None:
            systems["ctranslate2 float32, seq2seq export"] = exported
        marian = export_to_marian(run, args.out / "seq2seq-as-marian", env)
        project_spm = run / "tokenizer" / "spm.model"
        systems.update(
            decode_with_peer_scripts(
                [(n, sc, str(args.out / f)) for n, sc, f in same],
                marian,
                project_spm,
                data,
                args.threads,
                args.repeats,
                env,
            )
        )
    peer = [
        ("hf-marian generate, peer weights", "hf_marian_translate.py", "hf"),
        ("ctranslate2 float32, peer weights", "ct2_translate.py", "ct2"),
    ]
    systems.update(
        decode_with_peer_scripts(
            [(n, sc, str(args.out / f)) for n, sc, f in peer],
            model,
            peer_spm,
            data,
            args.threads,
            args.repeats,
            env,
        )
    )
    # The peer's own weights imported and decoded by the project: the same weights as the two
    # peer rows, so the three compare directly.
    from seq2seq.interop.hf_marian import import_hf_marian

    imported = args.out / "peer-imported"
    if imported.exists():
        shutil.rmtree(imported)
    import_hf_marian(str(opus_mt_layout(model, peer_spm, args.out / "peer-as-opus-mt")), imported)
    imported_name = "seq2seq, imported peer weights"
    systems[imported_name] = decode_project(
        imported, src, refs, args.threads, args.repeats, args.out, "imported", length_penalty=1.0
    )
    imported_agreement = {
        f"{mode} {peer}": agreement(args.out / f"imported.{mode}.txt", folder / f"hyp.{mode}.txt")
        for mode in ("greedy", *(f"beam{b}" for b in BEAMS if b > 1))
        for peer, folder in (("hf", args.out / "hf"), ("ct2", args.out / "ct2" / "ct2-float32"))
    }

    print(
        f"\ndecoding {len(src)} valid sentences, {args.threads} threads, batches of {BATCH}, "
        f"median of {args.repeats}"
    )
    print(f"{'system':<36} {'mode':<7} {'sent/s':>8} {'tok/s':>8} {'BLEU':>6}")
    for name, modes in systems.items():
        for mode, r in modes.items():
            print(f"{name:<36} {mode:<7} {r['sent_s']:>8.1f} {r['tok_s']:>8.0f} {r['bleu']:>6.2f}")
    hf_peer, ct2 = systems[peer[0][0]], systems[peer[1][0]]
    ratios: dict = {mode: {} for mode in ct2}
    if not args.imported_only:
        same_output = {
            mode: agreement(
                args.out / f"seq2seq.{mode}.txt", args.out / "hf-same" / f"hyp.{mode}.txt"
            )
            for mode in ("greedy", *(f"beam{b}" for b in BEAMS if b > 1))
        }
        systems["agreement_same_weights"] = same_output
        for mode, share in same_output.items():
            print(f"{mode} outputs identical, seq2seq vs HF on the same weights: {share:.1%}")
        ours, hf_same = systems["seq2seq"], systems[same[0][0]]
        for mode in ours:
            vs_hf = ours[mode]["sent_s"] / hf_same[mode]["sent_s"]
            hf_vs_ct2 = hf_peer[mode]["sent_s"] / ct2[mode]["sent_s"]
            ratios[mode] = {
                "vs_hf_same_weights": vs_hf,
                "vs_ct2_through_hf": vs_hf * hf_vs_ct2,
                "vs_ct2_direct_tok_s": ours[mode]["tok_s"] / ct2[mode]["tok_s"],
            }
            print(
                f"{mode}: seq2seq / HF generate (same weights, sent/s) {vs_hf:.2f}×; "
                f"seq2seq / CTranslate2 float32 {vs_hf * hf_vs_ct2:.2f}× through HF on each "
                f"model's weights, {ratios[mode]['vs_ct2_direct_tok_s']:.2f}× direct in tok/s "
                "(different models)"
            )
        mine = systems.get("ctranslate2 float32, seq2seq export")
        if mine is not None:
            for mode in ours:
                ratios[mode]["vs_own_ct2_export"] = ours[mode]["sent_s"] / mine[mode]["sent_s"]
                print(
                    f"{mode}: seq2seq / CTranslate2 float32 on seq2seq's exported weights "
                    f"(sent/s) {ratios[mode]['vs_own_ct2_export']:.2f}×"
                )
    mine = systems[imported_name]
    for key, share in imported_agreement.items():
        print(f"outputs identical, imported peer model in seq2seq vs {key}: {share:.1%}")
    for mode in mine:
        vs_hf = ratios[mode]["imported_vs_hf"] = mine[mode]["sent_s"] / hf_peer[mode]["sent_s"]
        vs_ct2 = ratios[mode]["imported_vs_ct2"] = mine[mode]["sent_s"] / ct2[mode]["sent_s"]
        print(
            f"{mode}: imported peer model, seq2seq / HF generate {vs_hf:.2f}×, seq2seq / "
            f"CTranslate2 float32 {vs_ct2:.2f}× (sent/s, same weights)"
        )
    systems["ratios"] = ratios
    systems["greedy_agreement_imported"] = imported_agreement
    (args.out / "bench_translate.json").write_text(json.dumps(systems, indent=2))


def int8_main(args) -> None:
    """The int8 rows (--int8) and the batch-size sweep (--batch-sizes), on --project-run."""
    from bench_int8 import main as bench_int8

    argv = ["--run", str(args.project_run), "--data", str(args.data), "--threads"]
    argv += [str(args.threads), "--repeats", str(args.repeats), "--limit", str(args.limit)]
    argv += ["--out", str(args.out / "int8")]
    if args.batch_sizes:
        argv += ["--batch-sizes", args.batch_sizes]
    bench_int8(argv)


if __name__ == "__main__":
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    main()
