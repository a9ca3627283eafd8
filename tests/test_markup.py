"""Inline tags and placeholders: taken out before translation, put back around the aligned
output words, the output always well-formed with exactly the input's markup."""

from __future__ import annotations

import logging
import random

import pytest
from typer.testing import CliRunner

from seq2seq.cli.app import app
from seq2seq.decode.annotate import Annotation, translate_tagged
from seq2seq.decode.markup import MalformedMarkup, parse, reinsert, same_markup
from seq2seq.decode.translator import load_translator

TAGGED = [
    "Click <b>Save</b> to keep the <i>file</i>.",
    'See <a href="x.html">the <b>full</b> manual</a> for {count} options.<br/>',
    "<span>Open</span> <span>%s</span> now",
    "Press <kbd>Ctrl</kbd>+<kbd>S</kbd>",
    "<p>Hello <!-- greeting --> {name}, welcome</p>",
]


def identity(marked, target: str) -> list[tuple[int, int]]:
    """Word i of the source aligned to word i of a same-length target."""
    return [(i, i) for i in range(min(len(marked.words), len(target.split())))]


def test_markup_is_taken_out_and_the_words_it_wraps_remembered():
    marked = parse('See <a href="x.html">the <b>full</b> manual</a> for {count} options.<br/>')
    assert marked.text.split() == ["See", "the", "full", "manual", "for", "options."]
    spans = {s.open: (s.first, s.last) for s in marked.spans}
    assert spans == {'<a href="x.html">': (1, 3), "<b>": (2, 2)}
    assert [(p.text, p.before) for p in marked.points] == [("{count}", 5), ("<br/>", 6)]


def test_a_tag_goes_back_around_the_output_word_aligned_to_the_word_it_wrapped():
    marked = parse("Click <b>Save</b> to keep the <i>file</i>.")
    target = "Cliquez pour garder le fichier sur Enregistrer"
    # Click-Cliquez, Save-Enregistrer, to-pour, keep-garder, the-le, file.-fichier
    pairs = [(0, 0), (1, 6), (2, 1), (3, 2), (4, 3), (5, 4)]
    out = reinsert(marked, target, pairs)
    assert out == "Cliquez pour garder le <i>fichier</i> sur <b>Enregistrer</b>"


def test_placeholders_and_self_closing_tags_are_copied_verbatim_where_they_stood():
    marked = parse("{user} has %s new messages.<br/>")
    assert marked.words == ["has", "new", "messages."]
    out = reinsert(marked, "a de nouveaux messages.", [(0, 0), (1, 2), (2, 3)])
    assert out == "{user} a de %s nouveaux messages. <br/>"
    glued = parse("Hello {name}!")
    assert reinsert(glued, "Bonjour !", [(0, 0), (1, 1)]) == "Bonjour {name}!"


@pytest.mark.parametrize("line", TAGGED)
def test_the_output_is_well_formed_with_the_same_markup_whatever_the_alignment(line):
    marked = parse(line)
    rng = random.Random(line)
    for _ in range(200):
        n_tgt = rng.randint(0, 8)
        target = " ".join(f"w{j}" for j in range(n_tgt))
        pairs = sorted(
            {
                (rng.randrange(len(marked.words)), rng.randrange(n_tgt))
                for _ in range(rng.randint(0, 10))
                if n_tgt and marked.words
            }
        )
        out = reinsert(marked, target, pairs)
        assert same_markup(line, out), (line, pairs, out)
        assert [w for w in parse(out).text.split()] == target.split()


def test_placeholders_the_model_writes_itself_are_dropped_so_none_is_invented():
    marked = parse("Fill <b>the</b> form {form}")
    out = reinsert(marked, "Remplissez le {nom} formulaire %s{}}", [(0, 0), (1, 1), (2, 3)])
    assert out == "Remplissez <b>le</b> formulaire } {form}"
    assert same_markup("Fill <b>the</b> form {form}", out)


def test_text_is_unescaped_for_the_model_and_escaped_in_the_output():
    marked = parse("Fish &amp; <b>chips</b>")
    assert marked.text == "Fish & chips"
    assert reinsert(marked, "Poisson & frites", [(0, 0), (1, 1), (2, 2)]) == (
        "Poisson &amp; <b>frites</b>"
    )


@pytest.mark.parametrize(
    "line", ["Open <b>the file", "Open </b>file", "<b>Open <i>the</b> file</i>"]
)
def test_unclosed_stray_and_crossing_tags_are_malformed(line):
    with pytest.raises(MalformedMarkup):
        parse(line)


def test_void_elements_need_no_slash_in_html_but_do_in_xml():
    assert [p.text for p in parse("one<br>two", "html").points] == ["<br>"]
    with pytest.raises(MalformedMarkup):
        parse("one<br>two", "xml")


@pytest.mark.slow
def test_a_malformed_line_is_translated_as_text_with_a_warning(
    trained_tiny_run, caplog, monkeypatch
):
    # The CLI, run in-process by other tests, stops seq2seq's records from reaching caplog.
    monkeypatch.setattr(logging.getLogger("seq2seq"), "propagate", True)
    translator, _ = load_translator(trained_tiny_run, device="cpu")
    lines = ["I have <b>three</b> cats.", "I have <b>three cats."]
    with caplog.at_level(logging.WARNING, logger="seq2seq.decode.markup"):
        found = translate_tagged(translator, lines, Annotation(alignments=True), "html")
    assert same_markup(lines[0], found[0].text)
    assert "line 2: malformed markup" in caplog.text
    assert found[1].text == translator.translate([lines[1]])[0]


@pytest.mark.slow
def test_translate_tags_keeps_every_tag_of_every_line(trained_tiny_run):
    result = CliRunner().invoke(
        app,
        ["translate", "--run", str(trained_tiny_run), "--device", "cpu", "--tags"],
        input="\n".join(TAGGED) + "\n",
    )
    assert result.exit_code == 0, result.output
    outputs = result.stdout.splitlines()
    assert len(outputs) == len(TAGGED)
    for line, out in zip(TAGGED, outputs):
        assert same_markup(line, out), (line, out)


def test_a_tag_around_a_word_with_no_alignment_takes_the_output_word_between_its_neighbours():
    marked = parse("Click <b>Save</b> now")
    # Save has no link; Click and now frame one output word.
    assert reinsert(marked, "Cliquez Enregistrer maintenant", [(0, 0), (2, 2)]) == (
        "Cliquez <b>Enregistrer</b> maintenant"
    )
    # At the ends of the line the line's ends frame it.
    assert reinsert(parse("<b>Save</b> now"), "Enregistrer maintenant", [(1, 1)]) == (
        "<b>Enregistrer</b> maintenant"
    )
    assert reinsert(parse("Click <b>Save</b>"), "Cliquez Enregistrer", [(0, 0)]) == (
        "Cliquez <b>Enregistrer</b>"
    )


def test_two_sibling_tags_aligned_to_one_word_take_it_and_the_word_after():
    marked = parse("if you <b>know</b> the <i>name</i> and place")
    pairs = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 2), (5, 4), (6, 5)]  # know, name → "le"
    assert reinsert(marked, "si vous le nom et lieu", pairs) == (
        "si vous <b>le</b> <i>nom</i> et lieu"
    )
    taken = [(0, 0), (1, 1), (2, 3), (4, 3)]  # both → the last word: the one before it
    assert reinsert(marked, "si vous savez nom", taken) == "si vous <i>savez</i> <b>nom</b>"


def test_a_tag_with_no_alignment_and_no_word_between_its_neighbours_stays_empty():
    marked = parse("Click <b>Save</b> now")
    assert reinsert(marked, "Cliquez maintenant", [(0, 0), (2, 1)]) == (
        "Cliquez <b></b> maintenant"
    )
