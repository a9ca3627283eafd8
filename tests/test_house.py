"""The house rules that ARCHITECTURE.md states, held by a test so the map stays true: every
package module sits in an import-linter layer and no test file imports another."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "seq2seq"


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


def test_no_test_file_imports_another():
    importing = re.compile(r"^\s*(?:from|import)\s+tests\.(test_\w+)", re.M)
    found = [
        f"{path.name} imports {name}"
        for path in sorted((REPO / "tests").glob("test_*.py"))
        for name in importing.findall(path.read_text(encoding="utf-8"))
    ]
    assert not found, f"shared test code belongs in a helper module, not a test file: {found}"
