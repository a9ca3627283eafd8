"""One glossary through every API of `seq2seq serve` gives one text (issue 53): the same lines
and term pairs sent to the native /translate (`glossary`), LibreTranslate's /translate (its
`glossary` field, as JSON term pairs and as a form's TSV lines) and DeepL's /v2/translate (a
glossary made with POST /v2/glossaries, then `glossary_id`), compared line by line.

    nice -n 10 python scripts/check_glossary_routes.py --run /work/bench/s11/enfr-small \\
        --data /work/shared/data/enfr/valid.en --lines 50

The server is `seq2seq serve` on a free 127.0.0.1 port, without keys, on CPU. `--lines N`: the
first N lines of --data that hold a source term of the glossary (whole word, any case; `--any`:
the first N lines). Prints how many of the N lines are identical across the routes, how many
hold each route's target terms, how many equal the texts of a Translator of the run in this
process (`--no-reference`: not), and the first differences. A dev check, not a timing."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
# Preferred synonyms the model would mostly not choose, one a made-up word.
PAIRS = [
    ("value", "montant"),
    ("screen", "moniteur"),
    ("list", "inventaire"),
    ("filter", "Quandor"),
    ("window", "croisée"),
]


def chosen_lines(path: Path, count: int, any_line: bool) -> list[str]:
    """The first `count` non-blank lines of `path` (holding a glossary source term unless
    `any_line`)."""
    words = re.compile(r"\b(" + "|".join(re.escape(s) for s, _ in PAIRS) + r")\b", re.I)
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [x for x in lines if x and (any_line or words.search(x))][:count]


class Served:
    """`seq2seq serve` on a free loopback port, its log in a file."""

    def __init__(self, run: Path, log: Path):
        self.process = subprocess.Popen(
            # `timeout` ends the server by itself should this script die without stopping it.
            ["timeout", "1800", sys.executable, "-m", "seq2seq", "serve", "--run", str(run)]
            + ["--host", "127.0.0.1", "--port", "0", "--device", "cpu"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),  # noqa: SIM115 (the child holds it)
        )
        end = time.monotonic() + 300
        while time.monotonic() < end:
            found = re.search(r"on (http://\S+:\d+)", log.read_text(errors="replace"))
            if found:
                self.client = httpx.Client(base_url=found.group(1), timeout=600)
                while self.client.get("/ready").status_code != 200:
                    time.sleep(0.1)
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.process.kill()
        sys.exit(f"the server did not start: {log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        self.client.close()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)


def answered(response: httpx.Response) -> dict:
    if response.status_code not in (200, 201):
        sys.exit(f"{response.request.url}: {response.status_code} {response.text[:500]}")
    return response.json()


def routes(client: httpx.Client, lines: list[str], src: str, tgt: str) -> dict[str, list[str]]:
    """Each route's translations of `lines` with the glossary (one request a route)."""
    pairs = [list(p) for p in PAIRS]
    tsv = "".join(f"{a}\t{b}\n" for a, b in PAIRS)
    native = {"texts": lines, "glossary": pairs, "source_lang": src, "target_lang": tgt}
    libre = {"q": lines, "source": src, "target": tgt}
    made = answered(
        client.post(
            "/v2/glossaries",
            json={"name": "check", "source_lang": src, "target_lang": tgt, "entries": tsv},
        )
    )
    deepl = {"text": lines, "source_lang": src.upper(), "target_lang": tgt.upper()}
    deepl["glossary_id"] = made["glossary_id"]
    out = {
        "native": answered(client.post("/translate", json=native))["translations"],
        "libretranslate": answered(client.post("/translate", json={**libre, "glossary": pairs}))[
            "translatedText"
        ],
        "libretranslate-form": answered(client.post("/translate", data={**libre, "glossary": tsv}))[
            "translatedText"
        ],
        "deepl": [
            t["text"] for t in answered(client.post("/v2/translate", json=deepl))["translations"]
        ],
    }
    client.delete(f"/v2/glossaries/{made['glossary_id']}")
    return out


def translator_texts(run: Path, lines: list[str], src: str, tgt: str) -> list[str]:
    """The same lines and glossary through a Translator of the run in this process (the run's
    settings, one best), decoded as one call: what the server's batcher slices."""
    import torch  # only here: the routes need none of it

    from seq2seq.decode.glossary import with_pairs
    from seq2seq.decode.translator import load_translator

    torch.set_num_threads(1)
    translator, _ = load_translator(run, device="cpu")
    options = translator.options.model_copy(update={"nbest": 1})
    glossary = with_pairs(None, PAIRS, origin="glossary")
    sources = translator.prepare(
        lines, options, glossary=glossary, src_lang=src, tgt_lang=tgt, truncate=False
    )
    return [hyps[0][0] for hyps in translator.translate_sources(sources, options=options)]


def report(lines: list[str], found: dict[str, list[str]], reference, shown: int) -> None:
    names = list(found)
    same = [i for i in range(len(lines)) if len({found[n][i] for n in names}) == 1]
    print(f"{len(same)} of {len(lines)} lines identical across routes ({', '.join(names)})")
    if reference is not None:
        alike = sum(a == b for a, b in zip(found["native"], reference))
        print(f"{alike} of {len(lines)} lines identical to the Translator's (one call, in process)")
        found = {**found, "translator": reference}
    for name in names:
        held = wanted = 0
        for line, text in zip(lines, found[name]):
            for s, t in PAIRS:
                if re.search(rf"\b{re.escape(s)}\b", line, re.I):
                    wanted += 1
                    held += t.lower() in text.lower()
        print(f"  {name}: {held} of {wanted} target terms held")
    differing = [i for i in range(len(lines)) if len({t[i] for t in found.values()}) > 1]
    for i in differing[:shown]:
        print(f"line {i + 1}: {lines[i]}")
        for name in found:
            print(f"  {name:20} {found[name][i]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="run directory to serve")
    parser.add_argument("--data", type=Path, required=True, help="source lines, one a line")
    parser.add_argument("--lines", type=int, default=50, help="lines to send (default 50)")
    parser.add_argument("--any", action="store_true", help="the first lines, terms or not")
    parser.add_argument("--source", default="en")
    parser.add_argument("--target", default="fr")
    parser.add_argument("--show", type=int, default=5, help="differences printed (default 5)")
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the in-process Translator's texts"
    )
    args = parser.parse_args()
    lines = chosen_lines(args.data, args.lines, args.any)
    with tempfile.TemporaryDirectory() as tmp:
        server = Served(args.run, Path(tmp) / "serve.log")
        try:
            found = routes(server.client, lines, args.source, args.target)
        finally:
            server.stop()
    reference = (
        None if args.no_reference else translator_texts(args.run, lines, args.source, args.target)
    )
    report(lines, found, reference, args.show)


if __name__ == "__main__":
    main()
