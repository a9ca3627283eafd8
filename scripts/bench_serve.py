"""`seq2seq serve` under load: N concurrent HTTP clients, with and without dynamic batching.

    python scripts/bench_serve.py                          # trains the small shape 10 min first
    python scripts/bench_serve.py --run R --seconds 30     # reuse a trained run

The server runs on loopback in its own process. For each N in --clients, N asyncio clients
(httpx, one keep-alive connection each) send single sentences drawn from the valid set, each
sending its next request as soon as its answer arrives, for --seconds; the first --warmup
seconds are not counted. Reported: throughput in sentences/s, p50/p95/p99 latency and the mean
batch size (lines per decode call, read from the server's /metrics). The same is measured with
batching switched off (`serve --no-batching`: one request at a time), and against
`seq2seq translate` on the same sentences in one process (its own timing of the job, model
loading excluded), all with the same beam size and torch threads (--threads). With
`--route libretranslate`, the batching server is also loaded through LibreTranslate's
POST /translate (`{"q", "source", "target"}`) beside the native route, in every round.

    python scripts/bench_serve.py --run A --second-run B          # two models, one server
    python scripts/bench_serve.py --run A --hostile --hostile-kinds all

`--second-run B`: a server of A alone, then a server of A and B (`serve --run A --run B`), each
loaded by --model-clients clients a model at once; requests name their model (`"model"`, the
name GET /models gives it) and the beam size, since two runs of one pair (a teacher and its
student) are both en→fr and LibreTranslate's and DeepL's routes would send all to the first.
Reported per model: sent/s, p50/p99; and the server's RSS idle and under load, one vs two.

`--hostile`: normal clients alone, then beside hostile ones; `--hostile-kinds` picks them:
issue 28's (the default) and issue 40's glossary-markup, dots (the server then has a glossary of
20,000 made-up terms, in the quiet phases too) and abandoned-terms, whose stop is read from the
server's seq2seq_abandoned_decode_seconds{work="terms"}.

`--keyed` (issue 51): a server with `--api-keys` (an unlimited key for the normal clients, one
limited to 1,000 characters) and a fresh `--state-dir`; normal keyed clients alone, then beside
4 keyless clients cycling over every translating route and body shape, 8 parallel clients of
the limited key doing the same, and 2 clients posting 611 KB requests of 1,000 glossary pairs of
200-character CJK terms. Reported: characters translated for keyless clients (target 0) and the
limited key (target ≤ 1,000, beside what /v2/usage says), the server's RSS hostile peak over
quiet peak (target ≤ +100 MB) and normal p99 hostile over quiet (target < 3×).

The server and the translate job each run in a session of their own. Linux's scheduler (with
autogroup, as here) shares the CPU between sessions first, so each system under test gets the
same share of a machine that other users load too, and the load generator (this process) does
not eat into the server's share: as a client on another host would not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, SHARED, bench_env, train_project

# `seq2seq translate`'s job in one process: a first, untimed pass warms the allocator and
# kernels up (the server gets its warm-up requests too), then each pass is timed. Then the same
# Translator without HTTP, on what a server can batch: the sentences in random groups of the
# given size (one search call each, as a batch of single-sentence requests is) and one at a time.
TRANSLATE_JOB = """
import json, sys, time
from pathlib import Path
from seq2seq.runtime import set_threads
from seq2seq.config import run_decode
from seq2seq.decode.streams import translate_files
from seq2seq.decode.translator import load_translator
run, beam, threads, src, out, repeats, group = sys.argv[1:8]
set_threads(int(threads))
decode = run_decode(Path(run), beam_size=int(beam))
translator, _ = load_translator(Path(run), device="cpu", decode=decode)
translate_files(translator, Path(src), Path(out))
times = []
for _ in range(int(repeats)):
    start = time.perf_counter()
    translate_files(translator, Path(src), Path(out))
    times.append(time.perf_counter() - start)
lines = Path(src).read_text(encoding="utf-8").splitlines()
def rate(groups):
    start = time.perf_counter()
    for g in groups:
        translator.translate(g)
    return sum(map(len, groups)) / (time.perf_counter() - start)
g = int(group)
grouped = rate([lines[i : i + g] for i in range(0, len(lines), g)])
single = rate([[line] for line in lines[:64]])
print(json.dumps({"times": times, "groups_sent_s": grouped, "single_sent_s": single}))
"""


def translate_reference(run: Path, beam: int, sentences: list[str], args, env: dict) -> dict:
    """`seq2seq translate`'s job (translate_files) on the sentences: median of timed passes;
    and the Translator's speed on random groups of half the top client count, and alone."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.en", Path(tmp) / "out.fr"
        src.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-c", TRANSLATE_JOB, str(run), str(beam), str(args.threads)]
            + [str(src), str(out), str(args.repeats), str(max(1, max(args.clients) // 2))],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            start_new_session=True,  # its own scheduler group, as the server has (see the top)
        )
    result = json.loads(done.stdout.splitlines()[-1])
    seconds = statistics.median(result["times"])
    return {"sent_s": len(sentences) / seconds, "seconds": seconds, **result}


SERVER_LIFETIME_S = 3600


class ServerProcess:
    """`seq2seq serve` on a free loopback port, its log in a file."""

    def __init__(self, run: Path, beam: int, options: list[str], env: dict, log: Path):
        self.log = log
        self.process = subprocess.Popen(
            # `timeout` stops the server by itself should this script die without stopping it.
            ["timeout", str(SERVER_LIFETIME_S), sys.executable, "-m", "seq2seq", "serve"]
            + ["--run", str(run), "--port", "0", "--device", "cpu", "--beam-size", str(beam)]
            + options,
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),  # noqa: SIM115 (the child holds it)
            start_new_session=True,
        )
        end = time.monotonic() + 120
        while time.monotonic() < end:
            found = re.search(r"on (http://\S+:\d+)", log.read_text(errors="replace"))
            if found:
                self.url = found.group(1)
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.process.kill()
        sys.exit(f"the server did not start; see {log}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(120)


def batch_stats(metrics: str) -> tuple[float, float, float]:
    """(sum, count) of the batch-size histogram and the decoding seconds in a /metrics text."""

    def value(name: str) -> float:
        found = re.search(rf"^{name} (\S+)$", metrics, re.M)
        return float(found.group(1)) if found else 0.0

    return (
        value("seq2seq_batch_sentences_sum"),
        value("seq2seq_batch_sentences_count"),
        value("seq2seq_batch_decode_seconds_sum"),
    )


def request_body(route: str, text: str, fields: dict | None = None) -> dict:
    """One sentence's body for the native route or LibreTranslate's (the valid set's en→fr);
    `fields`: more native fields (`model`, `beam_size`)."""
    if route == "libretranslate":
        return {"q": text, "source": "en", "target": "fr"}
    return {"text": text, **(fields or {})}


async def load(
    url: str,
    sentences: list[str],
    clients: int,
    seconds: float,
    warmup: float,
    route: str = "native",
    fields: dict | None = None,
    metrics: str = "/metrics",
    headers: dict | None = None,
):
    """N closed-loop clients for `seconds`; latencies of answers after the warm-up. `fields`:
    more native body fields (a `model` to send them to, whose metrics are at `metrics`);
    `headers`: sent with every request (a key)."""
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    client_options = dict(limits=limits, timeout=600, headers=headers or {})
    async with httpx.AsyncClient(base_url=url, **client_options) as http:
        await http.get("/ready")
        before = batch_stats((await http.get(metrics)).text)
        start = time.perf_counter()
        counted_from, end = start + warmup, start + seconds
        latencies: list[float] = []
        errors = 0
        picks = iter(range(10**9))

        async def client() -> None:
            nonlocal errors
            while time.perf_counter() < end:
                text = sentences[next(picks) % len(sentences)]
                sent = time.perf_counter()
                answer = await http.post("/translate", json=request_body(route, text, fields))
                done = time.perf_counter()
                if answer.status_code != 200:
                    errors += 1
                elif counted_from <= done <= end:  # answered inside the counted window
                    latencies.append(done - sent)

        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.perf_counter() - start
        after = batch_stats((await http.get(metrics)).text)
    window = seconds - warmup
    batches = after[1] - before[1]
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {
        "clients": clients,
        "answered": len(latencies),
        "errors": errors,
        "sent_s": len(latencies) / window if window > 0 else float("nan"),
        "p50_ms": q[49] * 1000,
        "p95_ms": q[94] * 1000,
        "p99_ms": q[98] * 1000,
        "mean_batch": (after[0] - before[0]) / batches if batches else float("nan"),
        # Share of the time the decoder thread spent decoding (the rest it waited for work).
        "decoder_busy": (after[2] - before[2]) / elapsed,
    }


def server_rss_mb(server: ServerProcess) -> float:
    """Resident memory of the server's Python process (the child of `timeout`), in MB."""
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    status = Path(f"/proc/{children[0] if children else pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


# What the hostile clients send (issue 28): text that sentence splitting would turn into 120,001
# segments, a multi-line request whose client hangs up before the answer, deeply nested JSON.
SPLIT_BAIT = json.dumps({"text": "Go now. " * 120_000})
NESTED = "[" * 200_000
# The kinds of issue 40 (items 3 and 11), chosen with --hostile-kinds: 24 lines at beam 16 in
# html with a request glossary hitting every line; 100 KB of "." against a server glossary of
# 20,000 pairs; a glossary request abandoned after 0.2 s.
OLD_KINDS = ("split-bait", "nested", "disconnect")
TERM_KINDS = ("glossary-markup", "dots", "abandoned-terms")
DOTS = json.dumps({"text": "." * 100_000})
SERVER_GLOSSARY_PAIRS = 20_000
ABANDON_S = 0.2


def long_words(text: str) -> list[str]:
    """The words of 4 letters or more in a text."""
    return re.findall(r"\b[^\W\d_]{4,}\b", text)


def term_request(pairs: list[tuple[str, str]], html: bool, lines: int = 24) -> str:
    """`lines` valid lines at beam 16 with a request glossary whose terms hit every line (each
    line's longest word → a word of its reference), in html with that word in <b> if `html`."""
    texts, glossary = [], {}
    for src, tgt in pairs:
        words, targets = long_words(src), long_words(tgt)
        if not words or not targets:
            continue
        term = max(words, key=len)
        glossary.setdefault(term.lower(), max(targets, key=len))
        if html:
            escaped = src.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            found = re.search(rf"\b{re.escape(term)}\b", escaped)
            src = f"<p>{escaped[: found.start()]}<b>{term}</b>{escaped[found.end() :]}</p>"
        texts.append(src)
        if len(texts) == lines:
            break
    body = {"texts": texts, "beam_size": 16, "glossary": [list(p) for p in glossary.items()]}
    return json.dumps({**body, "format": "html"} if html else body)


def server_glossary(path: Path, pairs: list[tuple[str, str]]) -> Path:
    """A TSV of 20,000 term pairs whose source terms are made-up words no valid line holds
    (so the normal clients' requests stay plain), each to a word of the references."""
    rng = random.Random(3)
    seen = {w.lower() for src, _ in pairs for w in re.findall(r"\w+", src)}
    targets = sorted({w for _, tgt in pairs for w in long_words(tgt)}) or ["terme"]
    terms: dict[str, str] = {}
    while len(terms) < SERVER_GLOSSARY_PAIRS:
        word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(6, 11)))
        if word not in seen:
            terms.setdefault(word, rng.choice(targets))
    path.write_text("".join(f"{a}\t{b}\n" for a, b in terms.items()), encoding="utf-8")
    return path


def hostile_bodies(kinds: list[str], sentences: list[str], pairs) -> list[tuple[str, str, float]]:
    """(kind, body, client timeout) of each hostile client: the old kinds two, one, two
    clients as before; each of issue 40's one client."""
    abandoned = json.dumps({"texts": sentences[:64]})
    table = {
        "split-bait": [(SPLIT_BAIT, 600)] * 2,
        "nested": [(NESTED, 600)],
        "disconnect": [(abandoned, ABANDON_S)] * 2,
        "glossary-markup": [(term_request(pairs, html=True), 600)],
        "dots": [(DOTS, 600)],
        "abandoned-terms": [(term_request(pairs, html=False), ABANDON_S)],
    }
    return [(kind, body, timeout) for kind in kinds for body, timeout in table[kind]]


async def hostile_clients(url: str, bodies, end: float, codes: dict, rate: float) -> None:
    """Each hostile client sending its body `rate` times a second until `end`; counting the
    status each got (or `gone`) and each kind's answer times."""
    import httpx

    async def loop(kind: str, body: str, timeout: float) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout) as http:
            while (sent := time.perf_counter()) < end:
                try:
                    answer = await http.post(
                        "/translate", content=body, headers={"content-type": "application/json"}
                    )
                    key = f"{kind} {answer.status_code}"
                    codes.setdefault(f"{kind} seconds", []).append(time.perf_counter() - sent)
                except httpx.TimeoutException:
                    key = f"{kind} gone"  # the client hung up: its work should be dropped
                codes[key] = codes.get(key, 0) + 1
                await asyncio.sleep(max(0.0, sent + 1 / rate - time.perf_counter()))

    await asyncio.gather(*(loop(kind, body, timeout) for kind, body, timeout in bodies))


def abandoned_decoding(metrics: str) -> dict[str, tuple[float, float, float]]:
    """Each work's (count, sum of seconds, count within 1 s) of the server's
    seq2seq_abandoned_decode_seconds histogram: how long batches decoded on after a request in
    them was abandoned."""
    out: dict[str, list[float]] = {}
    name = "seq2seq_abandoned_decode_seconds"
    for line in metrics.splitlines():
        found = re.match(rf"{name}_(count|sum|bucket)\{{(.*)\}} (\S+)$", line)
        if not found:
            continue
        part, labels, value = found.groups()
        work = re.search(r'work="([^"]*)"', labels).group(1)
        row = out.setdefault(work, [0.0, 0.0, 0.0])
        if part == "count":
            row[0] = float(value)
        elif part == "sum":
            row[1] = float(value)
        elif 'le="1.0"' in labels:
            row[2] = float(value)
    return {work: tuple(row) for work, row in out.items()}


async def sample_rss(server: ServerProcess, end: float, samples: list[float]) -> None:
    while time.perf_counter() < end:
        samples.append(server_rss_mb(server))
        await asyncio.sleep(0.5)


async def load_beside(server: ServerProcess, sentences: list[str], args, bodies) -> dict:
    """Normal closed-loop clients, alone (no `bodies`) or beside the hostile ones; server RSS
    sampled, and how long abandoned requests went on decoding (from /metrics)."""
    import httpx

    end = time.perf_counter() + args.seconds
    codes: dict = {}
    rss: list[float] = []
    extra = [sample_rss(server, end, rss)]
    if bodies:
        extra.append(hostile_clients(server.url, bodies, end, codes, args.hostile_rate))
    before = abandoned_decoding(httpx.get(f"{server.url}/metrics").text)
    row, *_ = await asyncio.gather(
        load(server.url, sentences, args.hostile_clients, args.seconds, args.warmup), *extra
    )
    await asyncio.sleep(2.0)  # the last abandoned batches finish and are counted
    after = abandoned_decoding(httpx.get(f"{server.url}/metrics").text)
    late = {}
    for work, (count, total, within) in after.items():
        was = before.get(work, (0.0, 0.0, 0.0))
        n = count - was[0]
        if n:
            late[work] = {
                "n": n,
                "mean_s": (total - was[1]) / n,
                "within_1s": (within - was[2]) / n,
            }
    timed = {k: v for k, v in codes.items() if k.endswith(" seconds")}
    return {
        **row,
        "rss_first_mb": rss[0],
        "rss_peak_mb": max(rss),
        "rss_last_mb": rss[-1],
        "hostile": {k: v for k, v in codes.items() if k not in timed},
        "hostile_median_s": {k[: -len(" seconds")]: statistics.median(v) for k, v in timed.items()},
        "abandoned_decoding": late,
    }


async def abandon_probe(url: str, body: str, tries: int) -> dict:
    """The abandoned-terms request alone on the quiet server, `tries` times: how long the
    server went on decoding it after the client hung up at 0.2 s, from its histogram and as
    the client sees it (until /metrics says the decoder is idle)."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        before = abandoned_decoding((await http.get("/metrics")).text).get("terms", (0, 0, 0))
        idle_after = []
        for _ in range(tries):
            try:
                await http.post(
                    "/translate",
                    content=body,
                    headers={"content-type": "application/json"},
                    timeout=ABANDON_S,
                )
                continue  # answered within 0.2 s: nothing was abandoned
            except httpx.TimeoutException:
                gone = time.perf_counter()
            while time.perf_counter() - gone < 120:
                if "seq2seq_decoder_busy 1.0" not in (await http.get("/metrics")).text:
                    break
                await asyncio.sleep(0.02)
            idle_after.append(time.perf_counter() - gone)
        await asyncio.sleep(0.5)
        after = abandoned_decoding((await http.get("/metrics")).text).get("terms", (0, 0, 0))
    n = after[0] - before[0]
    return {
        "tries": tries,
        "decoded_n": n,
        "decoding_went_on_mean_s": (after[1] - before[1]) / n if n else float("nan"),
        "within_1s": (after[2] - before[2]) / n if n else float("nan"),
        "idle_after_s": idle_after,
    }


def hostile_kinds(given: list[str]) -> list[str]:
    """The kinds asked for, `all` standing for every one, in a fixed order."""
    wanted = set(given)
    if "all" in wanted:
        wanted = {*OLD_KINDS, *TERM_KINDS}
    return [k for k in (*OLD_KINDS, *TERM_KINDS) if k in wanted]


def hostile_main(run: Path, sentences: list[str], pairs, args, env: dict) -> None:
    """Quiet, then hostile, then quiet again: normal requests' p99 and the server's memory."""
    kinds = hostile_kinds(args.hostile_kinds)
    options = ["--threads", str(args.threads), "--batch-window-ms", str(args.window_ms)]
    if args.slice_beam_tokens is not None:  # glossary and markup work decoded in slices of it
        options += ["--max-slice-beam-tokens", str(args.slice_beam_tokens)]
    if "dots" in kinds:  # the quiet phases run against the same glossary
        options += ["--glossary", str(server_glossary(args.out / "glossary-20k.tsv", pairs))]
    server = ServerProcess(run, args.beam_size, options, env, args.out / "hostile.log")
    bodies = hostile_bodies(kinds, sentences, pairs)
    rows = []
    try:
        asyncio.run(load(server.url, sentences, args.hostile_clients, 3.0, 0.0))
        for k in range(args.rounds):
            for phase in ("quiet", "hostile"):
                row = asyncio.run(
                    load_beside(server, sentences, args, bodies if phase == "hostile" else [])
                )
                row.update(phase=phase, round=k + 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
        probe = None
        if "abandoned-terms" in kinds:
            body = next(b for kind, b, _ in bodies if kind == "abandoned-terms")
            probe = asyncio.run(abandon_probe(server.url, body, args.abandon_tries))
            print(json.dumps({"abandon_probe": probe}), flush=True)
    finally:
        code = server.stop()
    print_hostile(rows, kinds, len(bodies), args, code, probe)


def print_hostile(
    rows: list[dict], kinds: list[str], clients: int, args, code: int, probe: dict | None
) -> None:
    """The hostile table, the p99 ratio and how long abandoned requests kept the decoder."""
    quiet = statistics.median(r["p99_ms"] for r in rows if r["phase"] == "quiet")
    hostile = statistics.median(r["p99_ms"] for r in rows if r["phase"] == "hostile")
    glossary = f", server glossary of {SERVER_GLOSSARY_PAIRS} pairs" if "dots" in kinds else ""
    if args.slice_beam_tokens is not None:
        glossary += f", slices of {args.slice_beam_tokens} beam tokens"
    print(
        f"\n{args.hostile_clients} normal clients ({clients} hostile ones at "
        f"{args.hostile_rate:g}/s each: {', '.join(kinds)}), beam {args.beam_size}, "
        f"{args.threads} thread(s){glossary}, {args.seconds:.0f} s a phase, {args.rounds} "
        f"rounds; server exit {code}"
    )
    print(
        "| round | phase | normal sent/s | p50 ms | p99 ms | errors | RSS first / peak / last MB "
        "| hostile requests (status: count) | hostile answer, median s "
        "| abandoned: decoding went on (n, mean s, share ≤ 1 s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        hostile_codes = ", ".join(f"{k}: {v}" for k, v in sorted(r["hostile"].items())) or "–"
        answered = ", ".join(f"{k}: {v:.2f}" for k, v in sorted(r["hostile_median_s"].items()))
        late = ", ".join(
            f"{w}: {v['n']:.0f}, {v['mean_s']:.2f} s, {v['within_1s']:.0%}"
            for w, v in sorted(r["abandoned_decoding"].items())
        )
        print(
            f"| {r['round']} | {r['phase']} | {r['sent_s']:.1f} | {r['p50_ms']:.0f} | "
            f"{r['p99_ms']:.0f} | {r['errors']} | {r['rss_first_mb']:.0f} / "
            f"{r['rss_peak_mb']:.0f} / {r['rss_last_mb']:.0f} | {hostile_codes} | "
            f"{answered or '–'} | {late or '–'} |"
        )
    print(
        f"\nmedian p99: quiet {quiet:.0f} ms, hostile {hostile:.0f} ms: {hostile / quiet:.2f}× "
        "(target < 3×)"
    )
    if probe is not None:
        idle = probe["idle_after_s"]
        print(
            f"the glossary request abandoned after {ABANDON_S:g} s on the quiet server, "
            f"{probe['tries']} tries: {probe['decoded_n']:.0f} had started decoding, which went "
            f"on {probe['decoding_went_on_mean_s']:.2f} s on average after the hang-up "
            f"({probe['within_1s']:.0%} within 1 s; server metric); decoder idle "
            f"{max(idle) if idle else float('nan'):.2f} s after the hang-up at worst (client "
            "view); target < 1 s"
        )
    summary = {"kinds": kinds, "rows": rows, "p99_quiet_ms": quiet, "p99_hostile_ms": hostile}
    (args.out / "hostile.json").write_text(json.dumps({**summary, "probe": probe}, indent=2))


# Issue 51's hostile clients (--keyed): the server has keys; NORMAL_KEY is unlimited, the normal
# clients' key; LIMITED_KEY may have LIMITED_CHARACTERS characters translated in all.
NORMAL_KEY, LIMITED_KEY, LIMITED_CHARACTERS = "bench-normal-key", "bench-limited-key", 1000
# A 611 KB request (issue 51, item 2): 1,000 glossary pairs of 200-character CJK terms.
CJK_TERMS = 1000


def cjk_glossary(seed: int) -> list[list[str]]:
    """1,000 pairs of 200-character CJK terms, different for each seed."""
    rng = random.Random(seed)
    term = lambda: "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(200))  # noqa: E731
    return [[term(), term()] for _ in range(CJK_TERMS)]


def keyed_requests(sentences: list[str], key: str | None) -> list[tuple[str, dict]]:
    """(path, httpx request arguments) over every translating route and body shape: native
    text/texts/html/glossary, LibreTranslate JSON, form, array and html, DeepL form and JSON,
    DeepL glossary creation; the key in each API's own place (none: no key at all)."""
    some = sentences[:8]
    html = [f"<p>{s} <b>{s.split()[0]}</b></p>" for s in some[:4]]
    pairs = [[w, w.upper()] for w in long_words(" ".join(some))[:4]]
    bearer = {"headers": {"Authorization": f"Bearer {key}"}} if key else {}
    deepl = {"headers": {"Authorization": f"DeepL-Auth-Key {key}"}} if key else {}
    lt_key = {"api_key": key} if key else {}
    lt = {"source": "en", "target": "fr", **lt_key}
    return [
        ("/translate", {"json": {"text": some[0]}, **bearer}),
        ("/translate", {"json": {"texts": some}, **bearer}),
        ("/translate", {"json": {"texts": html, "format": "html"}, **bearer}),
        ("/translate", {"json": {"texts": some, "glossary": pairs, "beam_size": 4}, **bearer}),
        ("/translate", {"json": {"q": some, **lt}}),
        ("/translate", {"data": {"q": some[1], **lt}}),
        ("/translate", {"json": {"q": html, "format": "html", **lt}}),
        ("/translate", {"json": {"q": some[2], "glossary": pairs, **lt}}),
        ("/v2/translate", {"data": {"text": some[3], "target_lang": "FR"}, **deepl}),
        ("/v2/translate", {"json": {"text": some, "target_lang": "FR"}, **deepl}),
        (
            "/v2/glossaries",
            {
                "json": {
                    "name": "bench",
                    "source_lang": "en",
                    "target_lang": "fr",
                    "entries": "".join(f"{a}\t{b}\n" for a, b in pairs),
                    "entries_format": "tsv",
                },
                **deepl,
            },
        ),
    ]


def sent_characters(request: dict) -> int:
    """The characters of the texts a request asks to translate, as sent (markup included)."""
    body = request.get("json") or request.get("data") or {}
    texts = [body.get(k) for k in ("text", "texts", "q")]
    flat = [t for x in texts if x for t in (x if isinstance(x, list) else [x])]
    return sum(len(t) for t in flat if isinstance(t, str))


async def keyed_clients(url: str, sentences: list[str], end: float, tally: dict, rate: float):
    """Hostile clients until `end`, each sending `rate` requests a second: 4 without a key over
    every route and shape, 8 parallel ones with the limited key, 2 posting the 611 KB glossary
    request (one keyless, one limited). Tally: answers by client and status; characters
    translated by answers of 200."""
    import httpx

    memory = [
        ("/translate", {"json": {"texts": sentences[:2], "glossary": cjk_glossary(seed)}})
        for seed in range(4)
    ]
    limited_memory = [(path, {**r, "headers": {"X-API-Key": LIMITED_KEY}}) for path, r in memory]

    async def loop(name: str, requests: list, offset: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            k = offset
            while (sent := time.perf_counter()) < end:
                path, request = requests[k % len(requests)]
                k += 1
                answer = await http.post(path, **request)
                status = f"{name} {answer.status_code}"
                tally[status] = tally.get(status, 0) + 1
                if answer.status_code == 200 and path != "/v2/glossaries":
                    chars = tally.setdefault("translated characters", {})
                    chars[name] = chars.get(name, 0) + sent_characters(request)
                await asyncio.sleep(max(0.0, sent + 1 / rate - time.perf_counter()))

    await asyncio.gather(
        *(loop("keyless", keyed_requests(sentences, None), k) for k in range(4)),
        *(loop("limited", keyed_requests(sentences, LIMITED_KEY), k) for k in range(8)),
        loop("glossary-memory", memory, 0),
        loop("glossary-memory", limited_memory, 1),
    )


async def keyed_phase(server: ServerProcess, sentences: list[str], args, hostile: bool) -> dict:
    """Normal keyed clients for --seconds, alone or beside keyed_clients; RSS sampled."""
    end = time.perf_counter() + args.seconds
    tally: dict = {}
    rss: list[float] = []
    normal = load(
        server.url,
        sentences,
        args.hostile_clients,
        args.seconds,
        args.warmup,
        headers={"Authorization": f"Bearer {NORMAL_KEY}"},
    )
    extra = [sample_rss(server, end, rss)]
    if hostile:
        extra.append(keyed_clients(server.url, sentences, end, tally, args.hostile_rate))
    row, *_ = await asyncio.gather(normal, *extra)
    return {**row, "rss_peak_mb": max(rss), "rss_last_mb": rss[-1], "tally": tally}


def keyed_usage(url: str) -> int:
    """The limited key's character count as the server's DeepL /v2/usage reports it."""
    import httpx

    answer = httpx.get(
        f"{url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {LIMITED_KEY}"}
    )
    return answer.json()["character_count"]


def keyed_main(run: Path, sentences: list[str], args, env: dict) -> None:
    """Issue 51's row: quiet, then hostile keyed clients, rounds; what got through and p99."""
    keys = args.out / "keys.txt"
    keys.write_text(f"{NORMAL_KEY}\n{LIMITED_KEY} characters={LIMITED_CHARACTERS}\n")
    state = args.out / "keyed-state"
    shutil.rmtree(state, ignore_errors=True)  # a fresh character count for the limited key
    options = ["--threads", str(args.threads), "--batch-window-ms", str(args.window_ms)]
    options += ["--api-keys", str(keys), "--state-dir", str(state)]
    server = ServerProcess(run, args.beam_size, options, env, args.out / "keyed.log")
    rows = []
    try:
        headers = {"Authorization": f"Bearer {NORMAL_KEY}"}
        asyncio.run(load(server.url, sentences, args.hostile_clients, 3.0, 0.0, headers=headers))
        for k in range(args.rounds):
            for phase in ("quiet", "hostile"):
                row = asyncio.run(keyed_phase(server, sentences, args, phase == "hostile"))
                row.update(phase=phase, round=k + 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
        usage = keyed_usage(server.url)
    finally:
        code = server.stop()
    print_keyed(rows, usage, args, code)


def print_keyed(rows: list[dict], usage: int, args, code: int) -> None:
    """The keyed table and the four verdicts of issue 51's done-means."""
    print(
        f"\n{args.hostile_clients} normal clients with a key; hostile, {args.hostile_rate:g} "
        "requests/s each: 4 keyless clients over every route, 8 parallel clients of a key "
        f"limited to {LIMITED_CHARACTERS} characters, 2 sending 611 KB glossary requests; beam "
        f"{args.beam_size}, {args.threads} thread(s), {args.seconds:.0f} s a phase, "
        f"{args.rounds} rounds; server exit {code}"
    )
    print(
        "| round | phase | normal sent/s | p50 ms | p99 ms | errors | RSS peak MB | hostile "
        "answers (client status: count) | characters translated (client: n) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        tally = {k: v for k, v in r["tally"].items() if k != "translated characters"}
        chars = r["tally"].get("translated characters", {})
        print(
            f"| {r['round']} | {r['phase']} | {r['sent_s']:.1f} | {r['p50_ms']:.0f} | "
            f"{r['p99_ms']:.0f} | {r['errors']} | {r['rss_peak_mb']:.0f} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(tally.items())) or '–'} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(chars.items())) or '–'} |"
        )
    hostile = [r for r in rows if r["phase"] == "hostile"]
    quiet = [r for r in rows if r["phase"] == "quiet"]
    chars = lambda name: sum(  # noqa: E731
        r["tally"].get("translated characters", {}).get(name, 0) for r in hostile
    )
    p99 = statistics.median(r["p99_ms"] for r in hostile) / statistics.median(
        r["p99_ms"] for r in quiet
    )
    rss = max(r["rss_peak_mb"] for r in hostile) - max(r["rss_peak_mb"] for r in quiet)
    print(
        f"\nkeyless characters translated: {chars('keyless')} (target 0); limited key: "
        f"{chars('limited') + chars('glossary-memory')} characters in its 200 answers, "
        f"/v2/usage says {usage} (target ≤ {LIMITED_CHARACTERS}); server RSS hostile peak − "
        f"quiet peak: {rss:+.0f} MB (target ≤ +100 MB); normal p99 hostile/quiet: {p99:.2f}× "
        "(target < 3×)"
    )
    (args.out / "keyed.json").write_text(json.dumps({"rows": rows, "usage": usage}, indent=2))


def served_models(url: str) -> list[dict]:
    """The server's GET /models, each with its /info's beam size."""
    import httpx

    models = httpx.get(f"{url}/models", timeout=60).json()
    infos = httpx.get(f"{url}/info", timeout=60).json()["models"]
    return [{**m, "beam_size": i["decode"]["beam_size"]} for m, i in zip(models, infos)]


async def load_models(server: ServerProcess, models: list[dict], sentences, args) -> dict:
    """args.model_clients closed-loop clients on each model at once (each request names its
    model, at the same beam size); the server's RSS sampled meanwhile."""
    end = time.perf_counter() + args.seconds
    rss: list[float] = []
    fields = [
        {"model": m["name"], "beam_size": args.beam_size} if len(models) > 1 else {} for m in models
    ]
    loads = [
        load(
            server.url,
            sentences,
            args.model_clients,
            args.seconds,
            args.warmup,
            "native",
            f,
            m["metrics"],
        )
        for f, m in zip(fields, models)
    ]
    rows = await asyncio.gather(*loads, sample_rss(server, end, rss))
    return {
        "models": {m["name"]: row for m, row in zip(models, rows[:-1])},
        "rss_idle_mb": rss[0],
        "rss_peak_mb": max(rss),
    }


def models_main(run: Path, second: Path, sentences: list[str], args, env: dict) -> None:
    """One model alone, then two behind one server with load on both at once: each model's
    throughput and p50/p99, and the server's RSS with one and with two loaded."""
    options = ["--threads", str(args.threads), "--batch-window-ms", str(args.window_ms)]
    servers = {
        "one": ServerProcess(run, args.beam_size, options, env, args.out / "one-model.log"),
        "two": ServerProcess(
            run, args.beam_size, [*options, "--run", str(second)], env, args.out / "two-models.log"
        ),
    }
    rows = []
    try:
        models = {name: served_models(server.url) for name, server in servers.items()}
        for name, server in servers.items():  # first-call costs stay out of the figures
            for m in models[name]:
                fields = {"model": m["name"]} if len(models[name]) > 1 else {}
                asyncio.run(
                    load(server.url, sentences, args.model_clients, 3.0, 0.0, "native", fields)
                )
        for k in range(args.rounds):
            for name, server in servers.items():
                row = asyncio.run(load_models(server, models[name], sentences, args))
                row.update(server=name, round=k + 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        codes = {name: server.stop() for name, server in servers.items()}
    print_models(rows, models, args, codes)


def print_models(rows: list[dict], models: dict, args, codes: dict) -> None:
    """Per model and server: medians of the rounds, and the server's RSS."""
    print(
        f"\nbeam {args.beam_size} (each request names it), {args.model_clients} clients a model, "
        f"{args.seconds:.0f} s a row ({args.warmup:.0f} s not counted), {args.threads} torch "
        f"thread(s), medians of {args.rounds} rounds; server exits {codes}"
    )
    print(
        "| server | model | run | sent/s | p50 ms | p99 ms | mean batch | errors "
        "| server RSS at start / peak MB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    summary = {}
    for name, label in (("one", "one model"), ("two", "two models, both loaded")):
        mine = [r for r in rows if r["server"] == name]
        idle = statistics.median(r["rss_idle_mb"] for r in mine)
        peak = statistics.median(r["rss_peak_mb"] for r in mine)
        summary[name] = {"rss_idle_mb": idle, "rss_peak_mb": peak, "models": {}}
        for m in models[name]:
            r = median_row([row["models"][m["name"]] for row in mine])
            summary[name]["models"][m["name"]] = r
            run = "/".join(Path(m["run_dir"]).parts[-2:])
            print(
                f"| {label} | {m['name']} | {run} | {r['sent_s']:.1f} | "
                f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['mean_batch']:.1f} | "
                f"{r['errors']:.0f} | {idle:.0f} / {peak:.0f} |"
            )
    total = sum(r["sent_s"] for r in summary["two"]["models"].values())
    print(
        f"\ntwo models: {total:.1f} sent/s together; RSS at the start of a row "
        f"{summary['two']['rss_idle_mb']:.0f} MB vs {summary['one']['rss_idle_mb']:.0f} MB "
        "with one "
        f"(+{summary['two']['rss_idle_mb'] - summary['one']['rss_idle_mb']:.0f} MB); each "
        f"model decodes on its own thread with {args.threads} torch thread(s), so two models "
        "may use twice the cores one does"
    )
    (args.out / "models.json").write_text(
        json.dumps({"rows": rows, "median": summary, "models": models}, indent=2)
    )


def systems(servers: dict, route: str) -> list[tuple]:
    """(name, server, route) of each system measured: the LibreTranslate route goes to the
    batching server, measured right after its native route."""
    out = [("on", servers["on"], "native")]
    if route == "libretranslate":
        out.append(("lt", servers["on"], "libretranslate"))
    return [*out, ("off", servers["off"], "native")]


def median_row(rows: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    numbers = [k for k, v in rows[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in rows) for k in numbers}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=SHARED / "data" / "enfr")
    p.add_argument("--run", type=Path, help="a trained run (default: train the small shape)")
    p.add_argument("--train-seconds", type=float, default=600.0)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--seconds", type=float, default=20.0, help="load time per row and round")
    p.add_argument("--warmup", type=float, default=4.0, help="first seconds not counted")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every row; medians reported")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--window-ms", type=float, default=5.0, help="the server's batching window")
    p.add_argument("--sentences", type=int, default=256, help="valid lines used (the first N)")
    p.add_argument("--repeats", type=int, default=2, help="timed translate passes per round")
    p.add_argument("--threads", type=int, default=1, help="torch threads of translate and server")
    p.add_argument("--out", type=Path, default=Path("/tmp/seq2seq-bench-serve"))
    p.add_argument(
        "--hostile",
        action="store_true",
        help="instead: normal clients alone and beside hostile ones (split bait, hang-ups, "
        "nested JSON); their p99 and the server's memory",
    )
    p.add_argument(
        "--keyed",
        action="store_true",
        help="instead: a server with keys, normal keyed clients alone and beside keyless, "
        "character-limited and 611 KB-glossary clients (issue 51): what got through, RSS, p99",
    )
    p.add_argument("--hostile-clients", type=int, default=8, help="normal clients in --hostile")
    p.add_argument(
        "--hostile-kinds",
        nargs="+",
        choices=[*OLD_KINDS, *TERM_KINDS, "all"],
        default=list(OLD_KINDS),
        help="the hostile clients of --hostile (default: issue 28's three, as before): "
        "glossary-markup (24 html lines at beam 16, a glossary hitting every line), dots "
        "(100 KB of '.'; the server gets a 20,000-pair glossary), abandoned-terms (a glossary "
        "request dropped after 0.2 s); all: every kind",
    )
    p.add_argument(
        "--second-run",
        type=Path,
        help="instead: --run alone, then --run and this run behind one server, load on both "
        "at once (each request names its model); per model sent/s and p50/p99, the server's RSS",
    )
    p.add_argument("--model-clients", type=int, default=8, help="clients a model, --second-run")
    p.add_argument(
        "--abandon-tries",
        type=int,
        default=5,
        help="with the abandoned-terms kind: times the request is sent alone after the rounds",
    )
    p.add_argument(
        "--route",
        choices=["native", "libretranslate"],
        default="native",
        help="libretranslate: also load the batching server through LibreTranslate's route",
    )
    p.add_argument(
        "--hostile-rate",
        type=float,
        default=2.0,
        help="requests a second from each hostile client (of the default kinds: 2 split bait, "
        "1 nested JSON, 2 hanging up after 0.2 s; one client of each other kind)",
    )
    p.add_argument(
        "--slice-beam-tokens",
        type=int,
        help="in --hostile: the server's --max-slice-beam-tokens (default: serve's own)",
    )
    args = p.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    env = bench_env(args.threads)
    run = args.run
    if run is None:
        print(f"training the small shape for {args.train_seconds:.0f} s …", flush=True)
        run = Path(train_project(args.data, args.out, args.train_seconds, 2, bench_env(2))["run"])
    valid = [x.strip() for x in (args.data / "valid.en").read_text("utf-8").splitlines()]
    sentences = [x for x in valid if x][: args.sentences]
    random.Random(1).shuffle(sentences)
    if args.keyed:
        keyed_main(run, sentences, args, env)
        return
    if args.hostile:
        references = (args.data / "valid.fr").read_text("utf-8").splitlines()
        pairs = [(a, b.strip()) for a, b in zip(valid, references) if a and b.strip()]
        hostile_main(run, sentences, pairs, args, env)
        return
    if args.second_run is not None:
        models_main(run, args.second_run, sentences, args, env)
        return

    # Both servers stay up; the rounds alternate between the systems, so that a change in what
    # else the shared machine runs falls on all of them rather than on one.
    common = ["--threads", str(args.threads)]
    window = ["--batch-window-ms", str(args.window_ms)]
    options = {"on": [*common, *window], "off": [*common, "--no-batching"]}
    servers: dict[str, ServerProcess] = {}
    rounds: list[dict] = []
    try:
        for name, opts in options.items():
            servers[name] = ServerProcess(run, args.beam_size, opts, env, args.out / f"{name}.log")
        for server in servers.values():
            # First-call costs (allocator, kernels for new shapes) stay out of the figures.
            for n in args.clients:
                asyncio.run(load(server.url, sentences, n, 3.0, 0.0))
        for k in range(args.rounds):
            print(f"round {k + 1}/{args.rounds}: seq2seq translate …", flush=True)
            result = {"translate": translate_reference(run, args.beam_size, sentences, args, env)}
            print(json.dumps(result["translate"]), flush=True)
            for n in args.clients:
                for name, server, route in systems(servers, args.route):
                    row = load(server.url, sentences, n, args.seconds, args.warmup, route)
                    row = asyncio.run(row)
                    print(json.dumps({"server": name, **row}), flush=True)
                    result[f"{name}_{n}"] = row
            rounds.append(result)
    finally:
        codes = {name: server.stop() for name, server in servers.items()}
    if any(codes.values()):
        sys.exit(f"a server did not exit with 0 after SIGTERM: {codes}")

    reference = median_row([r["translate"] for r in rounds])
    table = {key: median_row([r[key] for r in rounds]) for key in rounds[0] if key != "translate"}
    top = max(args.clients)
    ratio_translate = statistics.median(
        r[f"on_{top}"]["sent_s"] / r["translate"]["sent_s"] for r in rounds
    )
    ratio_off = statistics.median(
        r[f"on_{top}"]["sent_s"] / max(r[f"off_{top}"]["sent_s"], 1e-9) for r in rounds
    )

    print(
        f"\nbeam {args.beam_size}, {len(sentences)} valid sentences, {args.seconds:.0f} s a row "
        f"({args.warmup:.0f} s not counted), {args.threads} torch thread(s), medians of "
        f"{args.rounds} rounds"
    )
    print(
        "| system | clients | sent/s | p50 ms | p95 ms | p99 ms | mean batch | decoder busy "
        "| errors |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    labels = [("on", "server, batching on"), ("off", "server, batching off")]
    if args.route == "libretranslate":
        labels.insert(1, ("lt", "server, batching on, LibreTranslate route"))
    for name, label in labels:
        for n in args.clients:
            r = table[f"{name}_{n}"]
            print(
                f"| {label} | {n} | {r['sent_s']:.1f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | "
                f"{r['p99_ms']:.0f} | {r['mean_batch']:.1f} | {r['decoder_busy']:.0%} | "
                f"{r['errors']:.0f} |"
            )
    print(f"| `seq2seq translate`, one process | – | {reference['sent_s']:.1f} | | | | | | |")
    half = max(1, top // 2)
    print(
        f"\nthe Translator alone, no HTTP: {reference['groups_sent_s']:.1f} sent/s in random "
        f"groups of {half}, {reference['single_sent_s']:.1f} sent/s one sentence at a time"
    )
    print(
        f"\nat {top} clients (median of the rounds' ratios): {ratio_translate:.0%} of translate's "
        f"throughput (target ≥ 70%), {ratio_off:.2f}× the unbatched server (target ≥ 5×)"
    )
    if args.route == "libretranslate":
        ratio_lt = statistics.median(
            r[f"lt_{top}"]["sent_s"] / max(r[f"on_{top}"]["sent_s"], 1e-9) for r in rounds
        )
        print(
            f"the LibreTranslate route at {top} clients: {ratio_lt:.0%} of the native route's "
            "throughput (target ≥ 95%)"
        )
    results = {
        "run": str(run),
        "beam_size": args.beam_size,
        "sentences": len(sentences),
        "seconds": args.seconds,
        "warmup": args.warmup,
        "window_ms": args.window_ms,
        "threads": args.threads,
        "rounds": rounds,
        "median": {"translate": reference, **table},
        "ratio_translate": ratio_translate,
        "ratio_unbatched": ratio_off,
        "cpu_count": os.cpu_count(),
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"results in {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
