"""Shared cases of the document tests: a stub translation and XLIFF files of each version."""

from __future__ import annotations

import html
import re

from seq2seq.decode.markup import parse

# A gettext catalog's header as Weblate or xgettext writes it, French plurals.
PO_METADATA = {
    "Project-Id-Version": "demo 1.0",
    "Language": "fr",
    "MIME-Version": "1.0",
    "Content-Type": "text/plain; charset=UTF-8",
    "Content-Transfer-Encoding": "8bit",
    "Plural-Forms": "nplurals=2; plural=(n > 1);",
}


def shout(segment: str) -> str:
    """A stub translation: the text upper-cased, the tags as they were."""
    return re.sub(
        r"(<[^>]+>)|([^<]+)",
        lambda m: m.group(1) or html.escape(html.unescape(m.group(2)).upper(), quote=False),
        segment,
    )


def translated(read, data: bytes) -> tuple[list[str], bytes]:
    document = read(data)
    for segment in document.segments:
        parse(segment, "xml")  # every segment is well-formed for the tag machinery
    return document.segments, document.rebuild([shout(s) for s in document.segments])


XLIFF_12 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
 <file source-language="en" target-language="fr" datatype="plaintext" original="app">
  <body>
   <trans-unit id="1"><source>Press <g id="1">Save</g> now<x id="2"/>.</source></trans-unit>
   <trans-unit id="2"><source>Done</source><target>Fait</target></trans-unit>
   <trans-unit id="3"><source><bx id="3"/>Bold<ex id="3"/> text <ph id="4">%s</ph></source>
   </trans-unit>
  </body>
 </file>
</xliff>
"""

XLIFF_2 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="fr">
 <file id="f1"><unit id="u1"><segment><source>Click <pc id="1">here</pc> <ph id="2"/></source>
 </segment></unit></file>
</xliff>
"""

XLIFF_SEGMENTED = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
 <file source-language="en" target-language="fr" datatype="plaintext" original="app"><body>
  <trans-unit id="1"><source>First one. Second <g id="1">one</g>.</source>
   <seg-source><mrk mtype="seg" mid="1">First one.</mrk> <mrk mtype="seg" mid="2">Second \
<g id="1">one</g>.</mrk></seg-source>
  </trans-unit>
 </body></file>
</xliff>
"""
