"""The documentation: the generated command reference is current, the README stays short, and
every relative link outside docs/ (which `make docs` checks) points at a file and heading."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS_COMMAND = "seq2seq.cli.app utils docs --name seq2seq --output"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _headings(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (fenced code skipped)."""
    anchors, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _broken_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _headings(resolved):
            broken.append(f"{target} (no such heading)")
    return broken


def test_cli_reference_matches_the_typer_app(tmp_path):
    out = tmp_path / "cli.md"
    # The same command as `make docs-reference`; its output does not depend on the terminal.
    subprocess.run(
        [sys.executable, "-m", "typer", *DOCS_COMMAND.split(), str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    expected = out.read_text(encoding="utf-8")
    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == expected, "docs/cli.md is stale: run `make docs-reference`"


def test_readme_stays_a_page_a_newcomer_reads_through():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300


def test_readme_keeps_the_install_and_test_commands_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "make install" in readme and "make test" in readme
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci.index("make install") < ci.index("make docs") < ci.index("make test")


def test_relative_links_of_readme_and_architecture_reach_a_file_and_heading():
    for name in ("README.md", "ARCHITECTURE.md"):
        assert _broken_links(REPO / name) == [], name


def test_link_checker_reports_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Real heading\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#real-heading) [y](a.md#nope) [z](gone.md)\n", encoding="utf-8")
    assert _broken_links(page) == ["a.md#nope (no such heading)", "gone.md (no such file)"]


def test_every_docs_page_is_in_the_mkdocs_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = {page for entry in config["nav"] for page in entry.values()}
    on_disk = {p.name for p in (REPO / "docs").glob("*.md")}
    assert in_nav == on_disk
    assert config["strict"] is True
