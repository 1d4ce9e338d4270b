"""The README is the front door: short, and it leads to every page of the documentation."""

from __future__ import annotations

from pathlib import Path

#: The most lines the README may have; the rest belongs in docs/.
MAX_LINES = 200


def test_readme_is_the_front_door(repo_root: Path) -> None:
    lines = (repo_root / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES


def test_readme_keeps_the_two_commands(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    assert "make run" in text
    assert "make test" in text


def test_readme_links_every_doc(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Where to read on\n")
    end = text.find("\n## ", start + 1)
    reading = text[start : end if end != -1 else len(text)]
    pages = sorted(path.relative_to(repo_root) for path in (repo_root / "docs").glob("*.md"))
    unlinked = [str(page) for page in pages if f"]({page})" not in reading]
    assert unlinked == []
