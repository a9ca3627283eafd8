"""Glossary files people already have (TSV, CSV, TBX-Basic, DeepL's entries) read by one
loader into the same term entries, with the target terms' grammar where a column gives it."""

from __future__ import annotations

import logging

import pytest

from seq2seq.decode.glossary import make_glossary, read_glossary
from seq2seq.decode.glossary_files import TermEntry, load_glossary_file, read_rows
from seq2seq.errors import UserError

# What every format below says: two pairs, the first with its grammar where the format has it.
PAIRS = [("laptop", "ordinateur portable"), ("USB stick", "clé USB")]

# TBX-Basic as Weblate (translate-toolkit) exports it: martif, a DOCTYPE, tig; with the
# grammar notes TBX-Basic defines, a synonym, a deprecated target term and a concept with no
# French term.
WEBLATE_TBX = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE martif PUBLIC "ISO 12200:1999A//DTD MARTIF core (DXFcdV04)//EN" "TBXcdv04.dtd">
<martif type="TBX" xml:lang="en">
  <martifHeader>
    <fileDesc><sourceDesc><p>Weblate</p></sourceDesc></fileDesc>
  </martifHeader>
  <text>
    <body>
      <termEntry id="1">
        <langSet xml:lang="en"><tig><term>laptop</term></tig></langSet>
        <langSet xml:lang="fr">
          <tig>
            <term>ordinateur portable</term>
            <termNote type="grammaticalGender">masculine</termNote>
            <termNote type="grammaticalNumber">singular</termNote>
          </tig>
        </langSet>
      </termEntry>
      <termEntry id="2">
        <langSet xml:lang="en"><tig><term>USB stick</term></tig></langSet>
        <langSet xml:lang="fr">
          <tig>
            <term>stick USB</term>
            <termNote type="administrativeStatus">deprecatedTerm-admn-sts</termNote>
          </tig>
          <tig><term>clé USB</term></tig>
        </langSet>
      </termEntry>
      <termEntry id="3">
        <langSet xml:lang="en"><tig><term>gadget</term></tig></langSet>
      </termEntry>
    </body>
  </text>
</martif>
"""

# TBX 3 (ISO 30042:2019), TBX-Basic dialect: tbx, conceptEntry, langSec, termSec.
TBX_3 = """<?xml version="1.0" encoding="UTF-8"?>
<tbx type="TBX-Basic" style="dca" xml:lang="en" xmlns="urn:iso:std:iso:30042:ed-2">
  <tbxHeader><fileDesc><sourceDesc><p>memoQ</p></sourceDesc></fileDesc></tbxHeader>
  <text><body>
    <conceptEntry id="c1">
      <langSec xml:lang="en-US"><termSec><term>laptop</term></termSec></langSec>
      <langSec xml:lang="fr-FR"><termSec>
        <term>ordinateur portable</term>
        <termNote type="grammaticalGender">masculine</termNote>
        <termNote type="grammaticalNumber">singular</termNote>
      </termSec></langSec>
    </conceptEntry>
    <conceptEntry id="c2">
      <langSec xml:lang="en-US"><termSec><term>USB stick</term></termSec></langSec>
      <langSec xml:lang="fr-FR"><termSec><term>clé USB</term></termSec></langSec>
    </conceptEntry>
  </body></text>
</tbx>
"""

FORMATS = {
    "terms.tsv": "laptop\tordinateur portable\nUSB stick\tclé USB\n",
    "terms.txt": "# ours\nlaptop\tordinateur portable\n\nUSB stick\tclé USB\n",
    "terms.csv": 'laptop,ordinateur portable\n"USB stick","clé USB"\n',
    "deepl.csv": "laptop,ordinateur portable,en,fr\nUSB stick,clé USB,en,fr\n",
    "named.tsv": "source\ttarget\tgender\tnumber\nlaptop\tordinateur portable\tm\tsg\n"
    "USB stick\tclé USB\t\t\n",
    "weblate.csv": "location,source,target,id,fuzzy,context\n"
    ",laptop,ordinateur portable,,False,\n,USB stick,clé USB,,False,\n",
    "weblate.tbx": WEBLATE_TBX,
    "memoq.xml": TBX_3,
}


def test_a_glossary_tells_a_target_terms_gender_number_and_case():
    glossary = make_glossary(
        [
            TermEntry("laptop", "ordinateur portable", gender="m", number="sg", line=2),
            TermEntry("scissors", "ciseaux", number="pl", case_fixed=True, line=3),
            ("cat", "chat"),
        ]
    )
    assert glossary.info("ordinateur portable").gender == "m"
    assert glossary.info("ciseaux") == TermEntry("scissors", "ciseaux", None, "pl", True, 3)
    assert glossary.info("chat") == TermEntry("cat", "chat")
    assert glossary.info("chien") is None


def test_a_request_glossary_over_a_servers_tells_the_servers_terms_too():
    from seq2seq.decode.glossary import with_pairs

    base = make_glossary([TermEntry("laptop", "ordinateur portable", gender="m")])
    merged = with_pairs(base, [("cat", "chat")], origin="glossary")
    assert merged.info("ordinateur portable").gender == "m"
    assert merged.info("chat").source == "cat"


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_glossary_format_loads_the_same_term_pairs(tmp_path, name):
    path = tmp_path / name
    path.write_text(FORMATS[name], encoding="utf-8")
    assert [(e.source, e.target) for e in load_glossary_file(path)] == PAIRS
    assert read_glossary(path).terms_in("My laptop has a usb stick.") == [
        "ordinateur portable",
        "clé USB",
    ]


@pytest.mark.parametrize("name", ["named.tsv", "weblate.tbx", "memoq.xml"])
def test_a_glossary_files_gender_and_number_reach_the_glossary(tmp_path, name):
    path = tmp_path / name
    path.write_text(FORMATS[name], encoding="utf-8")
    glossary = read_glossary(path)
    assert glossary.info("ordinateur portable").gender == "m"
    assert glossary.info("ordinateur portable").number == "sg"
    assert glossary.info("clé USB").gender is None


def test_a_header_row_names_columns_in_any_order_with_the_accepted_values(tmp_path):
    path = tmp_path / "terms.csv"
    path.write_text(
        "Number,Target,Source,Gender,Case fixed\n"
        "plural,ciseaux,scissors,Masculine,\n"
        "sg,Linux,linux,,yes\n"
        "pl,données,data,f,no\n",
        encoding="utf-8",
    )
    assert load_glossary_file(path) == [
        TermEntry("scissors", "ciseaux", "m", "pl", False, 2),
        TermEntry("linux", "Linux", None, "sg", True, 3),
        TermEntry("data", "données", "f", "pl", False, 4),
    ]


def test_a_csv_row_over_several_lines_is_numbered_by_its_first_line(tmp_path):
    path = tmp_path / "terms.csv"
    path.write_text('cat,chat\n"two\nlines",deux\ndog,\n', encoding="utf-8")
    with pytest.raises(UserError, match="terms.csv:4: the target term is empty"):
        load_glossary_file(path)


def test_a_tbx_files_languages_are_picked_from_several_by_those_given(tmp_path):
    laptop = (
        '<langSet xml:lang="de"><tig><term>Klapprechner</term>'
        '<termNote type="grammaticalGender">masculine</termNote></tig></langSet>'
    )
    stick = '<langSet xml:lang="de"><tig><term>Stick</term></tig></langSet>'
    usb = '<langSet xml:lang="en"><tig><term>USB stick</term></tig></langSet>'
    three = WEBLATE_TBX.replace('<langSet xml:lang="fr">', laptop + '<langSet xml:lang="fr">', 1)
    three = three.replace(usb, usb + stick)
    path = tmp_path / "three.tbx"
    path.write_text(three, encoding="utf-8")
    with pytest.raises(UserError, match=r"three.tbx: terms in 3 languages \(en, de, fr\); give"):
        load_glossary_file(path)
    de = load_glossary_file(path, "en", "de_DE")
    assert [(e.source, e.target, e.gender) for e in de] == [
        ("laptop", "Klapprechner", "m"),
        ("USB stick", "Stick", None),
    ]
    fr_de = load_glossary_file(path, "fr", "de")  # each French term, the first German one
    assert [(e.source, e.target) for e in fr_de] == [("ordinateur portable", "Klapprechner")] + [
        ("stick USB", "Stick"),
        ("clé USB", "Stick"),
    ]
    with pytest.raises(UserError, match="three.tbx: no terms in 'es'; the file holds en, de, fr"):
        load_glossary_file(path, "en", "es")


def test_a_tbx_concept_without_a_target_term_is_skipped_with_one_warning(tmp_path, caplog):
    path = tmp_path / "weblate.tbx"
    path.write_text(WEBLATE_TBX, encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        load_glossary_file(path)
    assert "weblate.tbx: 1 entries without a term in each language; skipped" in caplog.text


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("g.tsv", "cat\tchat\n\ndog\t \n", "g.tsv:3: the target term is empty"),
        ("g.csv", "cat,chat\n,chien\n", "g.csv:2: the source term is empty"),
        (
            "g.tsv",
            "source\ttarget\tgender\ncat\tchat\tm\ndog\tchienne\tfem\n",
            "g.tsv:3: gender 'fem' is not one of m, masculine, f, feminine, n, neuter",
        ),
        ("g.csv", "source,target,number\ncat,chats,many\n", "g.csv:2: number 'many' is not one"),
        ("g.csv", "source,target,case\ncat,Chat,maybe\n", "g.csv:2: case 'maybe' is not one"),
        ("g.tsv", "cat\tchat\n...\tpoints\n", "g.tsv:2: source term '...' has no letter"),
        ("g.tsv", "cat\tchat\netc\t…\n", "g.tsv:2: target term '…' has no letter or digit"),
        ("g.tsv", "cat\tchat\ndog chien\n", "g.tsv:2: no tab"),
        ("g.tsv", "cat\tchat\tm\n", "g.tsv:1: 2 tabs; .* a header row naming them"),
        ("g.csv", "cat,chat,f,sg\n", "g.csv:1: 4 columns; .*DeepL's four columns"),
        ("g.csv", "source,target\ncat,chat,m\n", "g.csv:2: 3 columns; the header row names 2"),
        ("g.csv", 'cat,chat\n"dog,chien\n', "g.csv:2: malformed CSV"),
        ("g.tbx", "cat\tchat\n", "g.tbx:1: not a TBX file: syntax error"),
        (
            "g.xml",
            "<?xml version='1.0'?>\n<html><body/></html>",
            "g.xml:2: not a TBX file: its root element is <html>",
        ),
        (
            "g.tbx",
            WEBLATE_TBX.replace("masculine", "male"),
            "g.tbx:14: gender 'male' is not one of",
        ),
        (
            "g.tbx",
            WEBLATE_TBX.replace("<term>clé USB</term>", "<term> </term>"),
            "g.tbx:26: the target term is empty",
        ),
        (
            "g.tbx",
            WEBLATE_TBX.replace('<langSet xml:lang="fr">', "<langSet>"),
            "g.tbx:11: <langSet> without xml:lang",
        ),
    ],
)
def test_a_bad_glossary_file_is_one_error_naming_its_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        read_glossary(path)


def test_a_tbx_file_declaring_entities_is_refused(tmp_path):
    path = tmp_path / "g.tbx"
    path.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE martif [<!ENTITY x "laptop">]>\n'
        "<martif><text><body/></text></martif>\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError, match="g.tbx: a TBX file with entity declarations is refused"):
        read_glossary(path)


def test_deepl_entries_are_read_by_the_same_parser_without_header_or_comments():
    entries = read_rows(
        "source\ttarget\n#tag\t#mot\n",
        "tsv",
        origin="entries",
        header=False,
        comments=False,
        row=" row ",
    )
    assert [(e.source, e.target, e.line) for e in entries] == [
        ("source", "target", 1),
        ("#tag", "#mot", 2),
    ]
    with pytest.raises(UserError, match="entries row 2: the target term is empty"):
        read_rows("a,b\nc,\n", "csv", origin="entries", header=False, comments=False, row=" row ")


@pytest.mark.parametrize(
    "entries, fmt, message",
    [
        ("cat\tchat\ndog\n", "tsv", "no tab; each line is `source term<TAB>target term`"),
        ("cat,chat\nwow,!!!\n", "csv", "target term '!!!' has no letter or digit"),
        ("cat,chat\ndog,chien,m,sg\n", "csv", "4 columns; a row is a source term and a target"),
    ],
)
def test_deepl_entries_are_refused_with_a_glossary_files_message(entries, fmt, message):
    from seq2seq.serve.glossaries import read_entries
    from seq2seq.serve.schema import RequestError

    with pytest.raises(RequestError) as refused:
        read_entries(entries, fmt)
    assert refused.value.status == 400 and refused.value.field == "entries"
    assert refused.value.message.startswith(f"entries row 2: {message}")


def _translate(*args: str):
    from typer.testing import CliRunner

    from seq2seq.cli.app import app

    return CliRunner().invoke(app, ["--quiet", "translate", *args], input="The umbrella is blue.\n")


# The tiny run's terms (tests/test_terminology.py) in a TBX file of three languages, with a
# target term the run's vocabulary cannot spell.
TINY_TBX = """<?xml version="1.0" encoding="UTF-8"?>
<martif type="TBX" xml:lang="en"><text><body>
<termEntry><langSet xml:lang="en"><tig><term>umbrella</term></tig></langSet>
<langSet xml:lang="de"><tig><term>Schirm</term></tig></langSet>
<langSet xml:lang="fr"><tig><term>parapluie</term>
<termNote type="grammaticalGender">masculine</termNote></tig></langSet></termEntry>
<termEntry><langSet xml:lang="en"><tig><term>blue</term></tig></langSet>
<langSet xml:lang="fr"><tig><term>猫咪</term></tig></langSet></termEntry>
</body></text></martif>
"""


@pytest.mark.slow
def test_translate_takes_a_tbx_glossary_and_goes_on_past_a_term_it_cannot_spell(
    trained_tiny_run, tmp_path
):
    path = tmp_path / "terms.tbx"
    path.write_text(TINY_TBX, encoding="utf-8")
    run, languages = str(trained_tiny_run), ["--src-lang", "en", "--tgt-lang", "fr"]
    result = _translate("--run", run, "--glossary", str(path), *languages)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert line.count("parapluie") == 1 and "猫咪" not in line
    warned = "input line 1: glossary term '猫咪' has pieces the model cannot output; skipped"
    assert warned in result.output


@pytest.mark.slow
def test_translate_with_a_file_that_is_not_tbx_stops_naming_its_line(trained_tiny_run, tmp_path):
    path = tmp_path / "terms.tbx"
    path.write_text("umbrella\tparapluie\n", encoding="utf-8")
    result = _translate("--run", str(trained_tiny_run), "--glossary", str(path))
    assert result.exit_code == 1
    assert f"{path}:1: not a TBX file" in result.output
