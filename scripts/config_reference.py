"""Write the docs' config reference from the pydantic models (`--check`: fail if stale).

python scripts/config_reference.py          # rewrite the section in docs/config.md
python scripts/config_reference.py --check  # exit 1 when docs/config.md is out of date
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from seq2seq.config import Config, CorpusConfig

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "config.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin is tuple:
        return "[" + ", ".join(_type_name(a) for a in typing.get_args(annotation)) + "]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "required"
    value = field.default
    if value is PydanticUndefined or isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{'null' if value is None else value}`"


def _table(model: type[BaseModel], prefix: str) -> list[str]:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        annotation = field.annotation
        nested = _nested_model(annotation)
        if nested is not None and nested is not CorpusConfig:
            continue  # its own table follows
        kind = "corpus (below)" if nested is CorpusConfig else _type_name(annotation)
        meaning = (field.description or "").replace("|", "\\|")
        lines.append(f"| `{prefix}{name}` | {kind} | {_default(field)} | {meaning} |")
    return lines


def _nested_model(annotation) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def reference() -> str:
    """The markdown reference: one table per config section."""
    out = ["Top level:", "", *_table(Config, "")]
    for name, field in Config.model_fields.items():
        nested = _nested_model(field.annotation)
        if nested is None:
            continue
        doc = (nested.__doc__ or "").strip()
        out += ["", f"`{name}:` {doc}", "", *_table(nested, f"{name}.")]
        for key, inner in nested.model_fields.items():
            section = _nested_model(inner.annotation)
            if section not in (None, CorpusConfig):  # a section inside a section
                doc = " ".join((section.__doc__ or "").split())
                out += ["", f"`{name}.{key}:` {doc}", "", *_table(section, f"{name}.{key}.")]
    doc = (CorpusConfig.__doc__ or "").strip()
    out += ["", f"A corpus (`data.train`, `data.valid`, `data.test`): {doc}", ""]
    out += _table(CorpusConfig, "")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/config.md is stale")
    args = parser.parse_args()
    text = REFERENCE.read_text(encoding="utf-8")
    head, sep1, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not (sep1 and sep2):
        print(f"{REFERENCE}: markers {START} / {END} not found", file=sys.stderr)
        return 2
    updated = f"{head}{START}\n{reference()}{END}{tail}"
    if args.check:
        if updated != text:
            print("docs/config.md config reference is stale: run scripts/config_reference.py")
            return 1
        return 0
    REFERENCE.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
