"""The XLIFF seq2seq writes validates (issue 54, tests and checks): each file translated through
`document.xliff` is checked with lxml's XMLSchema against the XLIFF 1.2 (strict) and 2.0/2.1
core schemas in tests/data/xliff/, the input first (so a failure is the writer's) and then the
output. Those schemas are derived from the OASIS specifications, not the OASIS files, which no
package this project can install ships: tests/data/xliff/README.md says what they cover."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from seq2seq.document import xliff
from tests.document_cases import XLIFF_2, XLIFF_12, XLIFF_SEGMENTED, translated

SCHEMAS = Path(__file__).parent / "data" / "xliff"

# Every structural element around the units, and every inline element, as CAT tools write them.
XLIFF_12_FULL = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"
       xmlns:okp="okapi-framework:xliff-extensions">
 <file original="ui.properties" source-language="en" target-language="fr" datatype="x-properties"
       date="2026-11-28T10:00:00Z" product-name="App">
  <header><tool tool-id="t" tool-name="Tool"/><note>exported</note></header>
  <body>
   <group id="g1" resname="menus" xml:space="preserve">
    <note from="dev">File menu</note>
    <trans-unit id="1" resname="open" okp:hint="x">
     <source>Open <bpt id="1">&lt;b&gt;</bpt>recent<ept id="1">&lt;/b&gt;</ept> files</source>
     <note priority="2">Shown in the menu.</note>
     <alt-trans match-quality="80"><target>Ouvrir les fichiers</target></alt-trans>
    </trans-unit>
    <trans-unit id="2"><source>Save <it id="2" pos="open">&lt;i&gt;</it>as</source>
     <target state="new"/></trans-unit>
   </group>
   <trans-unit id="3"><source>Hello <ph id="3">&lt;a href="<sub>x</sub>"&gt;</ph>world\
<mrk mtype="protected">Acme</mrk> <mrk mtype="term">box</mrk></source></trans-unit>
   <trans-unit id="4" translate="no"><source>KEEP</source></trans-unit>
   <trans-unit id="5"><source><g id="5" ctype="bold">All bold</g></source><target></target>
    <note>empty target</note></trans-unit>
   <trans-unit id="6"><source>First one. Second one.</source>
    <seg-source><mrk mtype="seg" mid="1">First one.</mrk> <mrk mtype="seg" mid="2">Second one.\
</mrk></seg-source>
    <target state="translated"><mrk mtype="seg" mid="1">Premier.</mrk></target>
   </trans-unit>
  </body>
 </file>
</xliff>
"""

XLIFF_2_FULL = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.1" srcLang="en" trgLang="fr"
       xmlns:mda="urn:oasis:names:tc:xliff:metadata:2.0">
 <file id="f1" original="app.json">
  <notes><note id="n1">exported</note></notes>
  <group id="g1" name="menus">
   <unit id="u1" name="open">
    <mda:metadata><mda:metaGroup><mda:meta type="k">v</mda:meta></mda:metaGroup></mda:metadata>
    <notes><note appliesTo="source" priority="2">Shown in the menu.</note></notes>
    <originalData><data id="d1">&lt;b&gt;</data><data id="d2">&lt;/b&gt;</data></originalData>
    <segment id="s1"><source>Open <sc id="1" dataRef="d1"/>recent<ec startRef="1" \
dataRef="d2"/> files.</source></segment>
    <ignorable><source> </source></ignorable>
    <segment id="s2" state="initial"><source>Save <pc id="2" type="fmt">as<cp hex="0001"/></pc>\
 <sm id="m1" type="term"/>box<em startRef="m1"/></source><target/></segment>
   </unit>
  </group>
  <unit id="u2" translate="no"><segment><source>KEEP</source></segment></unit>
  <unit id="u3"><segment><source>Hello <mrk id="m2" type="term" ref="#t">world</mrk></source>
  </segment></unit>
 </file>
</xliff>
"""


@pytest.fixture(scope="module")
def schema_12() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(SCHEMAS / "xliff-core-1.2-subset.xsd")))


@pytest.fixture(scope="module")
def schema_2() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(SCHEMAS / "xliff-core-2.0-subset.xsd")))


def _errors(schema: etree.XMLSchema, data: bytes) -> list[str]:
    """The schema's complaints about `data`, one line each (none when it validates)."""
    schema.validate(etree.fromstring(data))
    return [f"line {e.line}: {e.message}" for e in schema.error_log]


@pytest.mark.parametrize(
    "data", [XLIFF_12, XLIFF_SEGMENTED, XLIFF_12_FULL], ids=["inline", "seg-source", "full"]
)
def test_translated_xliff_12_validates_against_the_strict_schema(schema_12, data):
    assert _errors(schema_12, data) == []  # the input is valid: what follows is the writer's
    segments, out = translated(xliff.read, data)
    assert segments and _errors(schema_12, out) == []


@pytest.mark.parametrize("data", [XLIFF_2, XLIFF_2_FULL], ids=["inline", "full"])
def test_translated_xliff_2_validates_against_the_core_schema(schema_2, data):
    assert _errors(schema_2, data) == []
    segments, out = translated(xliff.read, data)
    assert segments and _errors(schema_2, out) == []


def test_the_full_files_are_translated_where_they_should_be(schema_12, schema_2):
    """The full files above reach every place a target goes: a unit with a note, an empty
    target, a seg-source's missing mrk; in 2.x a segment beside an ignorable."""
    segments, out = translated(xliff.read, XLIFF_12_FULL)
    assert len(segments) == 5 and "KEEP" not in segments
    ns = {"x": xliff.NS_12}
    targets = etree.fromstring(out).findall(".//x:trans-unit/x:target", ns)
    assert len(targets) == 5  # unit 4 is translate="no"
    assert all(t.get("state") == "needs-review-translation" for t in targets)
    segments, out = translated(xliff.read, XLIFF_2_FULL)
    assert len(segments) == 3
    states = [s.get("state") for s in etree.fromstring(out).iter(f"{{{xliff.NS_2}}}segment")]
    assert states == ["translated", "translated", None, "translated"]


@pytest.mark.parametrize(
    ("version", "change"),
    [
        ("1.2", (b'<target state="new"/>', b'<target state="machine"/>')),
        ("1.2", (b'<trans-unit id="4"', b"<trans-unit")),
        ("1.2", (b'<it id="2" pos="open">', b'<it id="2">')),
        ("2.0", (b'state="initial"', b'state="machine"')),
        ("2.0", (b'<segment id="s1"><source>', b'<segment id="s1"><target/><source>')),
        ("2.0", (b'<pc id="2" type="fmt">', b'<pc id="2" type="bold">')),
    ],
    ids=["1.2 state", "1.2 unit id", "1.2 it pos", "2.x state", "2.x order", "2.x pc type"],
)
def test_the_schemas_refuse_what_the_specifications_refuse(schema_12, schema_2, version, change):
    """The schemas have teeth: one thing the specification forbids, and the file is invalid."""
    schema, data = (schema_12, XLIFF_12_FULL) if version == "1.2" else (schema_2, XLIFF_2_FULL)
    assert change[0] in data
    assert _errors(schema, data.replace(*change)) != []
