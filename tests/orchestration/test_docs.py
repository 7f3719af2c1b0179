"""The repository's documents: every relative link of README.md and docs/*.md leads somewhere real.

A link is ``[text](target)`` or ``![alt](target)`` outside code. A relative target must name a
file of the repository (never one beside it, such as a folder the repository does not hold), and
its ``#anchor`` a heading of that file, spelled as GitHub spells heading anchors. Links to web
sites are left alone.

>>> slug("Configuration reference (`kprio.yaml`)"), slug("What heals itself, what needs a person")
('configuration-reference-kprioyaml', 'what-heals-itself-what-needs-a-person')
>>> links("See [the table](#a-b), `[not](code)` and ![plot](screenshots/x.png).\\n```\\n[no](link)\\n```\\n")
[(1, '#a-b'), (1, 'screenshots/x.png')]
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
WEB = ("http://", "https://", "mailto:")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def links(text: str) -> list[tuple[int, str]]:
    """``(line number, target)`` of every link outside fenced code blocks and inline code."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        found += [(number, target) for target in LINK.findall(prose)]
    return found


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (a repeated heading gets ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match[1])
            out.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(document: Path) -> list[str]:
    """One line per link of ``document`` that leads nowhere: a missing file, a missing anchor, outside the repository."""
    broken = []
    for number, target in links(document.read_text()):
        if target.startswith(WEB):
            continue
        where = f"{document.relative_to(ROOT)}:{number}: {target}"
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.is_relative_to(ROOT):
            broken.append(f"{where}: points outside the repository")
        elif not file.exists():
            broken.append(f"{where}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{where}: no heading #{anchor} in {file.relative_to(ROOT)}")
    return broken


def test_the_documents_are_there() -> None:
    names = {d.relative_to(ROOT).as_posix() for d in DOCUMENTS}
    assert {"README.md", "docs/architecture.md", "docs/configuration.md", "docs/operations.md",
            "docs/benchmarks.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    assert links(document.read_text()), f"{document.name} links nowhere"
    assert not broken_links(document), "\n".join(broken_links(document))
