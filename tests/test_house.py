"""The house rules that ARCHITECTURE.md states, held by a test so the map stays true: every
package module sits in an import-linter layer, no function passes 60 lines nor a class 200,
and no test file imports another."""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "seq2seq"
MAX_FUNCTION_LINES, MAX_CLASS_LINES = 60, 200


def _layered_modules() -> set[str]:
    """Every module a layers contract of .importlinter names, as dotted names."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    named: set[str] = set()
    for section in config.sections():
        if not section.startswith("importlinter:contract:"):
            continue
        contract = config[section]
        containers = contract.get("containers", "").split() or [""]
        for line in contract.get("layers", "").splitlines():
            for name in filter(None, (part.strip() for part in line.split("|"))):
                named.update(f"{c}.{name}" if c else name for c in containers)
    return named


def _modules() -> list[str]:
    """The package's modules (not packages' __init__, nor __main__), as dotted names."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem in ("__init__", "__main__"):
            continue
        names.append(".".join(path.relative_to(REPO).with_suffix("").parts))
    return names


def test_every_package_module_sits_in_an_import_layer():
    # A folder named as a whole in the top contract does not place its own modules.
    layered = _layered_modules()
    outside = [m for m in _modules() if m not in layered]
    assert not outside, (
        f"modules in no .importlinter layers contract (add each to its folder's): {outside}"
    )


def _body_lines(node: ast.AST) -> int:
    """Lines from a definition's first body statement (its docstring included) to its end:
    a long signature (Typer's options) is not the body's length."""
    return node.end_lineno - node.body[0].lineno + 1


def _oversized() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _body_lines(node) > MAX_FUNCTION_LINES:
                    found.append(f"{where} {node.name}() {_body_lines(node)} lines")
            elif isinstance(node, ast.ClassDef) and _body_lines(node) > MAX_CLASS_LINES:
                found.append(f"{where} class {node.name} {_body_lines(node)} lines")
    return found


def test_no_function_passes_60_lines_nor_a_class_200():
    assert not _oversized(), "split these (ARCHITECTURE.md, rules of the house): " + "; ".join(
        _oversized()
    )


def test_no_test_file_imports_another():
    importing = re.compile(r"^\s*(?:from|import)\s+tests\.(test_\w+)", re.M)
    found = [
        f"{path.name} imports {name}"
        for path in sorted((REPO / "tests").glob("test_*.py"))
        for name in importing.findall(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"shared test code belongs in a helper module, not a test file: {found}"
