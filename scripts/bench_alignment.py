"""Word alignments, inline tags and confidence of a trained run, measured (issue 33).

    pip install --target /tmp/eflomal_pkg eflomal        # the reference aligner, kept apart
    flock -x /work/cpu.lock python scripts/bench_alignment.py --run /work/bench/enfr12 \\
        --data /work/shared/data/enfr --eflomal /tmp/eflomal_pkg all

Steps (each may be run alone; `all` runs them in order; files go to --work):

- `reference`: eflomal (Östling & Tiedemann 2016; IBM1+HMM+fertility, Gibbs sampling) aligns the
  valid split and the train split together (lowercased whitespace words, as the model's words),
  both directions, symmetrised with grow-diag-final-and; the first 2,000 pairs (the 1,000 valid
  pairs, then the first 1,000 train pairs) are the reference; `train.align` holds the whole
  train split's, for training a guided-alignment head (`train.alignment`).
- `align`: each reference pair's French side is teacher-forced through the model; every decoder
  layer's head-averaged cross-attention (and all layers' average) gives word pairs as
  `translate --alignments` makes them (`alignment.word_alignment`), compared with eflomal's:
  precision, recall, and agreement F1 (= 1 − AER with eflomal's links as both sure and
  possible). `shift` uses the attention of the step where the
  target piece is the *input* rather than the one predicting it.
- `tags`: a tagged test set from the valid split: `<b>` around one source word that eflomal's
  intersection aligns one-to-one with a reference word, a `<i>` pair around another and a `{x}`
  placeholder; translated with `translate_tagged` at beam 4; well-formed rate (same tags and
  placeholders, balanced) over all lines, right-word rate over the tags whose reference word
  appears exactly once in the output (the `<b>` pair wraps it), the exact rate (it wraps that
  word and no other), the mean words `<b>` wraps and how many `<b>` pairs came back empty: a
  wider tag is right more often, so the rate is read beside the width.
- `confidence`: Spearman between each valid line's score (what beam ranks) and its sentence chrF
  against the reference; also the plain mean token log-probability; a scatter PNG.
- `speed`: valid lines at beam 4 on 2 threads: plain decoding vs `--alignments` vs `--tags`
  (on the tagged lines, against plain decoding of the same text), interleaved repeats, the
  fastest of each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seq2seq.config import load_run_config  # noqa: E402
from seq2seq.data.batching import pad  # noqa: E402
from seq2seq.data.tokenizer import word_starts  # noqa: E402
from seq2seq.decode.alignment import grow_diag_final_and, replay, word_alignment  # noqa: E402
from seq2seq.decode.annotate import (  # noqa: E402
    Annotation,
    OutputFields,
    annotate,
    render_lines,
    translate_tagged,
)
from seq2seq.decode.markup import parse, same_markup  # noqa: E402
from seq2seq.decode.translator import load_translator  # noqa: E402

EVAL_PAIRS = 2000
VALID_PAIRS = 1000


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def parse_links(line: str) -> set[tuple[int, int]]:
    return {tuple(map(int, p.split("-"))) for p in line.split()}  # type: ignore[misc]


def step_reference(args) -> None:
    work, data = args.work, args.data
    en = read(data / "valid.en") + read(data / "train.en")
    fr = read(data / "valid.fr") + read(data / "train.fr")
    (work / "all.en").write_text("".join(s.lower() + "\n" for s in en), encoding="utf-8")
    (work / "all.fr").write_text("".join(s.lower() + "\n" for s in fr), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(args.eflomal)}
    cmd = [sys.executable, str(args.eflomal / "bin" / "eflomal-align"), "-s", "all.en"]
    cmd += ["-t", "all.fr", "-f", "fwd.txt", "-r", "rev.txt", "--overwrite", "--n-samplers", "2"]
    start = time.time()
    subprocess.run(cmd, cwd=work, env=env, check=True)
    fwd, rev = read(work / "fwd.txt"), read(work / "rev.txt")
    gdfa = [grow_diag_final_and(parse_links(a), parse_links(b)) for a, b in zip(fwd, rev)]
    inter = [parse_links(a) & parse_links(b) for a, b in zip(fwd[:EVAL_PAIRS], rev[:EVAL_PAIRS])]
    write_links(work / "reference.gdfa", gdfa[:EVAL_PAIRS])
    write_links(work / "reference.inter", inter)
    # The train split's own, line-aligned with train.en/fr: data.train.alignments for a run
    # with train.alignment (guided alignment).
    write_links(work / "train.align", gdfa[len(read(data / "valid.en")) :])
    print(f"eflomal on {len(en)} pairs: {time.time() - start:.0f} s")


def write_links(path: Path, rows: list[set]) -> None:
    path.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(r)) + "\n" for r in rows))


def eval_pairs(args) -> tuple[list[str], list[str], list[set]]:
    data = args.data
    en = (read(data / "valid.en") + read(data / "train.en"))[:EVAL_PAIRS]
    fr = (read(data / "valid.fr") + read(data / "train.fr"))[:EVAL_PAIRS]
    ref = [parse_links(r) for r in read(args.work / "reference.gdfa")]
    return en, fr, ref


def model_alignments(
    translator, en, fr, layers: list[int], shift: bool, head: int | None = None
) -> list[set | None]:
    """Word pairs of each (source, reference) pair from one layer's cross-attention (its heads
    averaged, or only `head`); None where the pieces do not give the line's whitespace words."""
    tok, special = translator.tokenizer, translator.tokenizer.ids
    specials = set(tok.tgt_pieces([special.eos, special.pad]))
    src_ids, tgt_ids = tok.encode_src(en), tok.encode_tgt(fr)
    limit = translator.model.cfg.max_positions
    out: list[set | None] = [None] * len(en)
    order = [j for j in range(len(en)) if len(src_ids[j]) <= limit and len(tgt_ids[j]) <= limit]
    order.sort(key=lambda j: len(src_ids[j]))
    for start in range(0, len(order), 64):
        chunk = order[start : start + 64]
        src = pad([src_ids[j] for j in chunk], pad_id=special.pad)
        found = replay(
            translator.model,
            src,
            [tgt_ids[j] for j in chunk],
            layers=layers,
            log_probs=False,
            special=special,
            head=head,
        )
        for j, r in zip(chunk, found):
            src_words = word_starts(tok.src_pieces(src_ids[j]), specials)
            tgt_words = word_starts(tok.tgt_pieces(tgt_ids[j]), specials)
            if max(src_words) + 1 != len(en[j].split()) or max(tgt_words) + 1 != len(fr[j].split()):
                continue
            attention = r.attention
            if shift:  # row t+1: the step whose input is piece t
                attention = torch.cat([attention[1:], attention[-1:]])
            out[j] = set(word_alignment(attention, src_words, tgt_words))
    return out


def agreement(model: list[set | None], ref: list[set], rows: range) -> dict:
    hit = n_model = n_ref = used = 0
    for j in rows:
        if model[j] is None:
            continue
        used += 1
        hit += len(model[j] & ref[j])
        n_model += len(model[j])
        n_ref += len(ref[j])
    p, r = hit / max(n_model, 1), hit / max(n_ref, 1)
    f1 = 2 * hit / max(n_model + n_ref, 1)
    return {"pairs": used, "precision": p, "recall": r, "agreement_f1": f1, "aer": 1 - f1}


def step_align(args) -> dict:
    translator = load(args)
    en, fr, ref = eval_pairs(args)
    results = []
    n_layers = len(translator.model.decoder_layers)
    every = [[i] for i in range(n_layers)] + [list(range(n_layers))]
    settings = [(layers, shift, None) for layers in every for shift in (False, True)]
    if translator.guided_head is not None:  # a run trained with train.alignment: its head
        layer, head = translator.guided_head
        settings.append(([layer % n_layers], False, head))
    for layers, shift, head in settings:
        model = model_alignments(translator, en, fr, layers, shift, head)
        row = {"layers": layers, "shift": shift, "head": head}
        row["all"] = agreement(model, ref, range(len(en)))
        row["valid"] = agreement(model, ref, range(VALID_PAIRS))
        row["train"] = agreement(model, ref, range(VALID_PAIRS, len(en)))
        print(json.dumps(row))
        results.append(row)
    return {"align": results}


WORD = re.compile(r"^[A-Za-z][A-Za-z'-]*$")


def norm(word: str) -> str:
    return re.sub(r"^\W+|\W+$", "", word.lower())


def one_to_one_words(words: list[str], ref_words: list[str], links: set) -> list[tuple[int, int]]:
    """(source word, reference word) links that are each word's only one, between an alphabetic
    source word and a reference word with letters: where a tag around the source word has one
    right place in the reference."""
    src_count = {i: sum(1 for a, _ in links if a == i) for i, _ in links}
    tgt_count = {j: sum(1 for _, b in links if b == j) for _, j in links}
    return [
        (i, j)
        for i, j in sorted(links)
        if src_count[i] == 1 and tgt_count[j] == 1 and i < len(words) and j < len(ref_words)
        if WORD.match(words[i]) and norm(ref_words[j])
    ]


def tagged_set(args) -> list[dict]:
    """Valid lines with `<b>` and `<i>` around words eflomal aligns one-to-one, and `{x}`."""
    data = args.data
    en, fr = read(data / "valid.en"), read(data / "valid.fr")
    inter = [parse_links(r) for r in read(args.work / "reference.inter")[:VALID_PAIRS]]
    rng = random.Random(33)
    items = []
    for line, ref, links in zip(en, fr, inter):
        words, ref_words = line.split(), ref.split()
        one_to_one = one_to_one_words(words, ref_words, links)
        if len(one_to_one) < 2:
            continue
        (b_i, b_j), (i_i, _) = rng.sample(one_to_one, 2)
        out = list(words)
        out[b_i] = f"<b>{out[b_i]}</b>"
        out[i_i] = f"<i>{out[i_i]}</i>"
        at = rng.randrange(len(out) + 1)
        out.insert(at, "{x}")
        items.append({"line": " ".join(out), "expect": norm(ref_words[b_j])})
    return items


def step_tags(args) -> dict:
    translator = load(args)
    items = tagged_set(args)
    found = translate_tagged(
        translator,
        [it["line"] for it in items],
        Annotation(alignments=True, layer=args.layer),
        "html",
    )
    well_formed = checkable = right = exact = wrapped = empty = 0
    for it, a in zip(items, found):
        ok = same_markup(it["line"], a.text)
        well_formed += ok
        if not ok:
            continue
        marked = parse(a.text)
        words = [norm(w) for w in marked.words]
        if words.count(it["expect"]) != 1:
            continue
        checkable += 1
        b = next(s for s in marked.spans if s.open == "<b>")
        at, width = words.index(it["expect"]), max(b.last - b.first + 1, 0)
        right += b.first <= at <= b.last
        exact += b.first == at == b.last  # the one right word and nothing else
        wrapped += width
        empty += width == 0
    result = {
        "layer": args.layer,
        "lines": len(items),
        "well_formed": well_formed / len(items),
        "checkable_tags": checkable,
        "right_word": right / max(checkable, 1),
        "exact_word": exact / max(checkable, 1),
        "mean_words_in_b": wrapped / max(checkable, 1),
        "empty_b": empty,
        "examples": [(it["line"], a.text) for it, a in list(zip(items, found))[:5]],
    }
    print(json.dumps(result, ensure_ascii=False, indent=1))
    return {"tags": result}


def step_confidence(args) -> dict:
    from sacrebleu.metrics import CHRF
    from scipy.stats import spearmanr

    translator = load(args)
    en, fr = read(args.data / "valid.en"), read(args.data / "valid.fr")
    found = annotate(translator, en, Annotation(token_probs=True))
    chrf = CHRF()
    chrfs = [chrf.sentence_score(a.text, [r]).score for a, r in zip(found, fr)]
    scores = [a.score for a in found]
    mean_lp = [
        sum(torch.tensor(a.token_probs).log().tolist()) / max(len(a.token_probs or []), 1)
        for a in found
    ]
    rho = spearmanr(scores, chrfs).statistic
    rho_mean = spearmanr(mean_lp, chrfs).statistic
    plot(scores, chrfs, rho, REPO / "benchmarks" / "confidence_vs_chrf.png")
    result = {"lines": len(en), "spearman_score": rho, "spearman_mean_token_logprob": rho_mean}
    print(json.dumps(result))
    return {"confidence": result}


def plot(scores, chrfs, rho: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.scatter(scores, chrfs, s=6, alpha=0.5)
    ax.set_xlabel("score (length-normalised log-probability, as beam ranks)")
    ax.set_ylabel("sentence chrF vs reference")
    ax.set_title(f"enfr12, valid split (1,000 lines), beam 4: Spearman ρ = {rho:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def step_speed(args) -> dict:
    translator = load(args)
    lines = read(args.data / "valid.en")[: args.speed_lines]
    tagged = [it["line"] for it in tagged_set(args)][: args.speed_lines]
    plain_of_tagged = [parse(line).text for line in tagged]

    modes = {
        "plain": lambda: translator.translate(lines),
        "alignments": lambda: render_lines(
            translator, lines, OutputFields(alignments=True, layer=args.layer)
        ),
        "plain_tagged_text": lambda: translator.translate(plain_of_tagged),
        "tags": lambda: render_lines(
            translator, tagged, OutputFields(tags="html", layer=args.layer)
        ),
    }
    translator.translate(lines[:32])  # warm up
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):  # interleaved, so drift in the machine's speed hits all alike
        for name, fn in modes.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}  # the least disturbed run of each
    plain, aligned = best["plain"], best["alignments"]
    plain_t, tags = best["plain_tagged_text"], best["tags"]
    result = {
        "layer": args.layer,
        "lines": len(lines),
        "plain_s": plain,
        "alignments_s": aligned,
        "alignments_cost": aligned / plain - 1,
        "tagged_lines": len(tagged),
        "plain_tagged_text_s": plain_t,
        "tags_s": tags,
        "tags_cost": tags / plain_t - 1,
        "all_times_s": times,
    }
    print(json.dumps(result))
    return {"speed": result}


def load(args):
    torch.set_num_threads(2)
    decode = load_run_config(args.run).decode.model_copy(update={"beam_size": 4})
    translator, _ = load_translator(args.run, device="cpu", decode=decode)
    return translator


STEPS = {
    "align": step_align,
    "tags": step_tags,
    "confidence": step_confidence,
    "speed": step_speed,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=["reference", *STEPS, "all"])
    parser.add_argument("--run", type=Path, default=Path("/work/bench/enfr12"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "enfr")
    parser.add_argument("--eflomal", type=Path, default=Path("/tmp/eflomal_pkg"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/alignbench"))
    parser.add_argument("--speed-lines", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--layer", type=int, default=None, help="tags and speed: the aligning layer (all)"
    )
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "bench_alignment.json")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.step in ("reference", "all"):
        step_reference(args)
    done = json.loads(args.output.read_text()) if args.output.exists() else {}
    for name, step in STEPS.items():
        if args.step in (name, "all"):
            found = step(args)
            if args.layer is not None:  # kept beside the default's figures
                found = {f"{k}_layer{args.layer}": v for k, v in found.items()}
            done.update(found)
            args.output.write_text(json.dumps(done, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
