"""The documentation (issue 28, item 20): README.md is the quick start and the map, docs/ the reference, built as an
MkDocs site.  ``mkdocs build --strict`` fails on a link to a missing page, a missing anchor or a page left out of
the navigation (mkdocs.yml's ``validation``); the README, which the site does not include, has its links checked here,
and every anchor a link names must be the same on GitHub and on the site (their heading slugs differ on punctuation)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
"""A Markdown link's target (not an image's)."""


def _prose(text: str) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _heading_text(line: str) -> str:
    text = line.lstrip("#").strip()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link shows its text
    return text.replace("`", "").replace("**", "")


def site_slug(text: str) -> str:
    """Python-Markdown's toc slug (MkDocs): ASCII, punctuation dropped, runs of spaces and hyphens one hyphen."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, every space a hyphen (runs kept)."""
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors both renderings give a page's headings (GitHub's where it agrees with MkDocs')."""
    found = set()
    for line in _prose(page.read_text(encoding="utf-8")):
        if re.match(r"#{1,6} ", line):
            text = _heading_text(line)
            if site_slug(text) == github_slug(text):
                found.add(site_slug(text))
    return found


def _broken_links(page: Path) -> list[str]:
    broken = []
    for line in _prose(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} (no heading with that anchor on both GitHub and the site)")
    return broken


def test_readme_is_a_map_of_the_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250, "the README is the quick start and the map; the reference goes in docs/"
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(readme) if t.startswith("docs/")}
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - linked == set(), "pages the README's map does not name"


def test_links_and_anchors_resolve_on_github_and_the_site():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    assert [b for page in pages for b in _broken_links(page)] == []


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w-]+\.md)\s*$", nav, flags=re.M))
    assert {p.name for p in DOCS.glob("*.md")} == listed


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install '.[test]' brings it): the site is not built")
def test_mkdocs_builds_strict(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
