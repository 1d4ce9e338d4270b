"""The documentation stays true to the code: layout, settings, links and the code's citations."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

import followup_pipeline
from followup_pipeline.settings import Settings

PACKAGE = Path(followup_pipeline.__file__).parent
#: Folders whose modules the layout sums up in a phrase instead of naming each one.
SUMMED_UP = {"sandbox", "migrations"}
#: Where the code may cite the documentation, and the files there that are read.
CITING = ("followup_pipeline", "benchmarks", "followup_pipeline_tests", ".ci")
CITING_FILES = ("Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".sql", ".yaml", ".yml", ".toml", ".j2", ".lua", ".txt", ".md", ""}

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
CITED_PATH = re.compile(r"\bdocs/[A-Za-z0-9_./-]*")
#: A citation of one section of a page: by its number after the page (``§3``), or by its name
#: after the page and a comma, inside parentheses.
CITED_NUMBER = re.compile(r"\bdocs/([A-Za-z0-9_./-]+\.md) §(\d+)")
CITED_NAME = re.compile(r"\(docs/([A-Za-z0-9_./-]+\.md), ([^()\n]+?)\)")


def _section(text: str, heading: str) -> str:
    """The text of the level-2 section ``heading`` (up to the next level-2 heading)."""
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _layout(repo_root: Path) -> str:
    text = (repo_root / "docs" / "development.md").read_text(encoding="utf-8")
    return _section(text, "## Layout")


def _documents(repo_root: Path) -> list[Path]:
    """The README and every page under docs/."""
    return [repo_root / "README.md", *sorted((repo_root / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    """Markdown without its code: fenced blocks and inline code spans."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    kept = "".join(
        char for char in text if char in " -_" or unicodedata.category(char)[0] in ("L", "N")
    )
    return kept.replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets ``-1``, ``-2``, … as on GitHub)."""
    seen: dict[str, int] = {}
    anchors = set()
    for _, title in HEADING.findall(FENCE.sub("", document.read_text(encoding="utf-8"))):
        slug = _slug(title)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(repo_root: Path) -> Iterator[tuple[Path, str, str]]:
    """Each relative link of the documents: the page, the target path, the anchor (or "")."""
    for document in _documents(repo_root):
        for target in LINK.findall(_prose(document.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            yield document, path, anchor


def _citing_files(repo_root: Path) -> Iterator[Path]:
    for folder in CITING:
        for path in sorted((repo_root / folder).rglob("*")):
            readable = path.is_file() and path.suffix in TEXT_SUFFIXES
            if readable and "__pycache__" not in path.parts:
                yield path
    for name in CITING_FILES:
        yield repo_root / name


def _env_names(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str]]:
    """(field, environment variable) for every field of a settings model, nested ones walked."""
    config = model.model_config
    nested = config.get("env_nested_delimiter") or ""
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            inner = str(kind.model_config.get("env_prefix", ""))
            yield from _env_names(kind, inner)
        elif nested and isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _env_names(kind, f"{prefix}{name}{nested}".upper())
        else:
            yield name, _alias(field) or f"{prefix}{name}".upper()


def _alias(field: FieldInfo) -> str | None:
    """The variable a field's alias names, when it has one."""
    alias = field.validation_alias or field.alias
    if isinstance(alias, str):
        return alias.upper()
    choices = getattr(alias, "choices", None)
    if choices and isinstance(choices[0], str):
        return choices[0].upper()
    return None


def test_layout_names_every_folder_and_module(repo_root: Path) -> None:
    layout = _layout(repo_root)
    missing = []
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if "__pycache__" in relative.parts or path.name in ("__init__.py", "py.typed"):
            continue
        if path.is_dir():
            if f"{path.name}/" not in layout:
                missing.append(f"{relative}/")
        elif (
            path.suffix == ".py" and not SUMMED_UP & set(relative.parts) and path.name not in layout
        ):
            missing.append(str(relative))
    assert missing == []


def test_layout_names_no_module_that_is_gone(repo_root: Path) -> None:
    named = set(re.findall(r"\b([a-z_]+\.py)\b", _layout(repo_root)))
    present = {path.name for path in PACKAGE.rglob("*.py")}
    assert named
    assert sorted(named - present) == []


def test_configuration_names_every_setting(repo_root: Path) -> None:
    page = (repo_root / "docs" / "configuration.md").read_text(encoding="utf-8")
    prefix = str(Settings.model_config.get("env_prefix", ""))
    variables = sorted(_env_names(Settings, prefix))
    assert len(variables) > 50
    missing = [
        f"{field} ({variable})"
        for field, variable in variables
        if not re.search(rf"^\| `{re.escape(variable)}` \|", page, re.MULTILINE)
    ]
    assert missing == []


def test_docs_relative_links_exist(repo_root: Path) -> None:
    broken = [
        f"{document.relative_to(repo_root)}: {path}"
        for document, path, _ in _relative_links(repo_root)
        if path and not (document.parent / path).exists()
    ]
    assert broken == []


def test_docs_link_anchors_name_headings(repo_root: Path) -> None:
    broken = []
    for document, path, anchor in _relative_links(repo_root):
        target = (document.parent / path) if path else document
        page = anchor and target.suffix == ".md" and target.exists()
        if page and anchor not in _anchors(target):
            broken.append(f"{document.relative_to(repo_root)}: {path}#{anchor}")
    assert broken == []


def test_code_cites_only_docs_that_exist(repo_root: Path) -> None:
    missing = set()
    for path in _citing_files(repo_root):
        for cited in CITED_PATH.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited = cited.rstrip(".")
            if not (repo_root / cited).exists():
                missing.add(f"{path.relative_to(repo_root)}: {cited}")
    assert sorted(missing) == []


def test_code_cites_only_sections_that_exist(repo_root: Path) -> None:
    missing = set()
    for path in _citing_files(repo_root):
        text = path.read_text(encoding="utf-8", errors="replace")
        numbers = [(page, f"§{number}") for page, number in CITED_NUMBER.findall(text)]
        names = [(page, name.strip().strip("\"'")) for page, name in CITED_NAME.findall(text)]
        for page, section in numbers + names:
            document = repo_root / "docs" / page
            if not document.exists():
                continue  # test_code_cites_only_docs_that_exist names it
            body = FENCE.sub("", document.read_text(encoding="utf-8"))
            titles = [title.replace("`", "").lower() for _, title in HEADING.findall(body)]
            if section.startswith("§"):
                found = any(title.startswith(f"{section[1:]}. ") for title in titles)
            else:
                found = any(section.lower() in title for title in titles)
            if not found:
                missing.add(f"{path.relative_to(repo_root)}: docs/{page}, {section}")
    assert sorted(missing) == []
