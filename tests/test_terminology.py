"""Glossaries and constraints through `translate` and `evaluate`: the terms are kept."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.decode.glossary import make_glossary
from seq2seq.decode.translator import load_translator
from tests.hf_models import save_m2m100
from tests.runs import cli

LINES = ["The umbrella is blue.", "You want one big chair.", "", "twenty-five"]
GLOSSARY = "umbrella\tparapluie\nchair\tchaise bleue\n"

# Every test decodes a trained run, most through the CLI or a server.
pytestmark = pytest.mark.slow


def _cli(*args: str, stdin: str | None = None):
    return CliRunner().invoke(app, ["--quiet", *args], input=stdin)


def _once(term: str, text: str) -> bool:
    return len(re.findall(rf"(?<!\w){re.escape(term)}(?!\w)", text)) == 1


def test_translate_with_a_glossary_keeps_each_applicable_target_term_once(
    trained_tiny_run, tmp_path
):
    terms = tmp_path / "terms.tsv"
    terms.write_text(GLOSSARY, encoding="utf-8")
    stdin = "\n".join(LINES) + "\n"
    result = _cli(
        "translate", "--run", str(trained_tiny_run), "--glossary", str(terms), stdin=stdin
    )
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert len(out) == len(LINES)
    assert _once("parapluie", out[0]) and "chaise" not in out[0]
    assert _once("chaise bleue", out[1]) and "parapluie" not in out[1]
    assert out[2] == ""


def test_translate_with_constraints_keeps_the_terms_given_per_line(trained_tiny_run, tmp_path):
    given = tmp_path / "c.jsonl"
    given.write_text('["parc", "souris"]\n[]\n', encoding="utf-8")
    stdin = "There are mice in the park.\ntwenty-five\n"
    run = str(trained_tiny_run)
    result = _cli("translate", "--run", run, "--constraints", str(given), stdin=stdin)
    assert result.exit_code == 0, result.output
    first, _ = result.stdout.splitlines()
    assert _once("parc", first) and _once("souris", first)


def test_each_glossary_term_goes_with_the_sentence_holding_its_source_term(trained_tiny_run):
    glossary = make_glossary([("umbrella", "parapluie"), ("chair", "chaise")])
    translator, _ = load_translator(trained_tiny_run, device="cpu", glossary=glossary)
    (source,) = translator.prepare(["The umbrella is blue. You want one chair."])
    assert len(source.segments) == 2
    expected = translator.tokenizer.encode_tgt(["parapluie", "chaise"])
    assert source.constraints == ((tuple(expected[0]),), (tuple(expected[1]),))
    (text,) = translator.translate(["The umbrella is blue. You want one chair."])
    assert _once("parapluie", text) and _once("chaise", text)


def test_a_bad_glossary_line_stops_translate_naming_file_and_line(trained_tiny_run, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("umbrella\tparapluie\nchair chaise\n", encoding="utf-8")
    result = _cli(
        "translate", "--run", str(trained_tiny_run), "--glossary", str(terms), stdin="x\n"
    )
    assert result.exit_code == 1
    assert f"{terms}:2: no tab" in result.output


@pytest.mark.parametrize(
    "content, message",
    [('["parc"]\n', "1 lines of constraints; input line 2 has none"), ("{}\n[]\n", "c.jsonl:1")],
)
def test_bad_constraints_stop_translate_with_one_clear_error(
    trained_tiny_run, tmp_path, content, message
):
    given = tmp_path / "c.jsonl"
    given.write_text(content, encoding="utf-8")
    run = str(trained_tiny_run)
    result = _cli("translate", "--run", run, "--constraints", str(given), stdin="a\nb\n")
    assert result.exit_code == 1
    assert message in result.output


def test_constraints_with_greedy_search_ask_for_a_beam_of_two(trained_tiny_run, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text(GLOSSARY, encoding="utf-8")
    run = str(trained_tiny_run)
    args = ["translate", "--run", run, "--glossary", str(terms), "--beam-size", "1"]
    result = _cli(*args, stdin="The umbrella is blue.\n")
    assert result.exit_code == 1
    assert "beam size of at least 2" in result.output


def test_evaluate_with_a_glossary_reports_the_term_use_rate(trained_tiny_run, tmp_path):
    src, ref = tmp_path / "t.en", tmp_path / "t.fr"
    src.write_text("The umbrella is blue.\nYou want one big chair.\n", encoding="utf-8")
    ref.write_text("Le parapluie est bleu.\nVous voulez une grande chaise.\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text(GLOSSARY, encoding="utf-8")
    report_path = tmp_path / "r.json"
    args = ["evaluate", "--run", str(trained_tiny_run), "--src", str(src), "--ref", str(ref)]
    args += ["--glossary", str(terms), "--json", str(report_path), "--output-dir", str(tmp_path)]
    result = _cli(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert report["terminology"] == {"terms": 2, "used": 2, "rate": 1.0}
    assert "terms used: 2 of 2" in result.stdout


def _app(run, glossary=None):
    """The server's app in this process (FastAPI's TestClient), with a default glossary."""
    from fastapi.testclient import TestClient

    from seq2seq.serve import app as serve_app

    translator, path = load_translator(run, device="cpu", glossary=glossary)
    cfg = serve_app.ServeConfig()
    info = serve_app.run_info(run, path, translator, cfg)
    return TestClient(serve_app.create_app(translator, info, cfg))


def test_serve_keeps_a_requests_glossary_terms_and_only_for_that_request(trained_tiny_run):
    texts = ["The umbrella is blue.", "You want one big chair."]
    with _app(trained_tiny_run) as client:
        body = {"texts": texts, "glossary": [["umbrella", "parapluie"], ["chair", "chaise"]]}
        kept = client.post("/translate", json=body)
        plain = client.post("/translate", json={"texts": texts})
    assert kept.status_code == 200, kept.text
    first, second = kept.json()["translations"]
    assert _once("parapluie", first) and _once("chaise", second)
    load = load_translator(trained_tiny_run, device="cpu")[0]
    assert plain.json()["translations"] == load.translate(texts)


def test_serve_applies_its_default_glossary_and_a_request_overrides_a_term(trained_tiny_run):
    default = make_glossary([("umbrella", "parapluie"), ("chair", "chaise")])
    with _app(trained_tiny_run, default) as client:
        both = client.post("/translate", json={"text": "The umbrella and the chair."})
        override = client.post(
            "/translate",
            json={"text": "The umbrella and the chair.", "glossary": [["Chair", "siège"]]},
        )
    text = both.json()["translation"]
    assert _once("parapluie", text) and _once("chaise", text)
    text = override.json()["translation"]
    assert _once("parapluie", text) and _once("siège", text) and "chaise" not in text


@pytest.mark.parametrize(
    "body, field, message",
    [
        ({"text": "a", "glossary": [["umbrella"]]}, "glossary[0]", "pair"),
        ({"text": "a", "glossary": [["", "x"]]}, "glossary", "source term is empty"),
        ({"text": "a", "glossary": "umbrella"}, "glossary", "list"),
        (
            {"text": "The umbrella.", "glossary": [["umbrella", "parapluie"]], "beam_size": 1},
            "glossary",
            "beam size of at least 2",
        ),
    ],
)
def test_a_bad_request_glossary_is_a_422_naming_the_field(trained_tiny_run, body, field, message):
    with _app(trained_tiny_run) as client:
        answer = client.post("/translate", json=body)
    assert answer.status_code == 422
    assert answer.json()["field"] == field
    assert message in answer.json()["error"]


def test_serve_with_a_bad_glossary_file_is_one_error_line(trained_tiny_run, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("umbrella\n", encoding="utf-8")
    result = _cli("serve", "--run", str(trained_tiny_run), "--port", "0", "--glossary", str(terms))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"error: {terms}:1: no tab; each line is `source term<TAB>target term`"
    )


def test_serve_answers_a_100_kb_punctuation_text_at_once_with_a_20000_pair_glossary(
    trained_tiny_run,
):
    import time

    glossary = make_glossary([(f"term{i} word{i % 97}", f"terme{i}") for i in range(20_000)])
    with _app(trained_tiny_run, glossary) as client:
        start = time.perf_counter()
        answer = client.post("/translate", json={"text": "." * 100_000})
        seconds = time.perf_counter() - start
    assert answer.status_code == 413, answer.text  # longer than the model reads
    assert seconds < 2


def test_serve_refuses_a_glossary_for_a_model_that_forces_its_target_language_token(
    tmp_path, demo_pairs
):
    pytest.importorskip("transformers", reason="transformers is not installed")
    import sentencepiece as spm

    from seq2seq.errors import UserError

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for pair in demo_pairs[:300] for t in pair]),
        model_prefix=str(tmp_path / "sp"),
        model_type="bpe",
        vocab_size=200,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    save_m2m100(tmp_path / "hf", "m2m100", tmp_path / "sp.model")
    cli("--quiet", "import", "hf", tmp_path / "hf", tmp_path / "run")
    with _app(tmp_path / "run") as client:
        body = {"text": "The umbrella is blue.", "beam_size": 2}
        refused = client.post("/translate", json={**body, "glossary": [["umbrella", "x"]]})
        plain = client.post("/translate", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json() == {
        "error": "glossaries are not supported for this model: its translations start with a "
        "forced target-language token (M2M100, NLLB)",
        "field": "glossary",
    }
    assert plain.status_code == 200
    with pytest.raises(UserError, match="^--glossary: glossaries are not supported"):
        _app(tmp_path / "run", make_glossary([("umbrella", "x")]))


def test_serve_refuses_a_request_glossary_whose_source_term_is_punctuation(trained_tiny_run):
    with _app(trained_tiny_run) as client:
        answer = client.post("/translate", json={"text": "Yes. No.", "glossary": [[".", "x"]]})
    assert answer.status_code == 422
    assert answer.json()["field"] == "glossary"
    assert "glossary[0]: source term '.' has no letter or digit" in answer.json()["error"]


def test_serve_counts_the_target_terms_with_the_source_in_a_requests_beam_budget(
    trained_tiny_run,
):
    from fastapi.testclient import TestClient

    from seq2seq.serve import app as serve_app
    from seq2seq.serve.schema import RequestLimits

    text, beam = "The umbrella is blue.", 2
    translator, path = load_translator(trained_tiny_run, device="cpu")
    tokens = translator.prepare([text])[0].tokens
    cfg = serve_app.ServeConfig(request=RequestLimits(max_beam_tokens=tokens * beam))
    info = serve_app.run_info(trained_tiny_run, path, translator, cfg)
    with TestClient(serve_app.create_app(translator, info, cfg)) as client:
        plain = client.post("/translate", json={"text": text, "beam_size": beam})
        glossary = [["umbrella", "parapluie"]]
        body = {"text": text, "beam_size": beam, "glossary": glossary}
        with_terms = client.post("/translate", json=body)
    assert plain.status_code == 200, plain.text
    assert with_terms.status_code == 413
    assert with_terms.json()["field"] == "beam_size"
    assert re.fullmatch(
        rf"\({tokens} source \+ \d+ term tokens\) × beam_size 2 = \d+; at most {tokens * beam} "
        r"a request \(send fewer texts, fewer terms or a smaller beam_size\)",
        with_terms.json()["error"],
    )
