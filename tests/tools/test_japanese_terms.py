"""One Japanese term per concept: ``translations/ja/terms.md`` is the table, and every Japanese
text a translator writes keeps to it (the catalogues, and the glossary, which lists every row).

Code is left out of the check: a fenced block or an inline `code span` is English, and output
quoted in it is the program's, not the translator's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "translations" / "ja" / "terms.md"
GLOSSARY = ROOT / "docs" / "glossary.ja.md"
NOT_CHECKED = {TABLE, ROOT / "translations" / "ja" / "style.md"}  # they quote the variants on purpose


@dataclass(frozen=True)
class Term:
    english: str
    japanese: str
    variants: tuple[re.Pattern[str], ...]


def cells(row: str) -> list[str]:
    """A table row's cells; ``\\|`` is a pipe inside a cell."""
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def variant(text: str) -> re.Pattern[str]:
    return re.compile(text[3:]) if text.startswith("re:") else re.compile(re.escape(text))


def terms() -> list[Term]:
    rows = [line for line in TABLE.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    found = []
    for row in rows[2:]:  # after the header and its rule
        english, japanese, avoid = cells(row)
        found.append(Term(english, japanese, tuple(variant(v.strip()) for v in avoid.split(" / ") if v.strip())))
    return found


def prose(text: str) -> str:
    """``text`` without fenced code blocks, inline code spans and HTML comments (the markers)."""
    text = re.sub(r"(?ms)^```.*?^```", "", text)
    text = re.sub(r"<!--.*?-->", "", text)
    return re.sub(r"`[^`\n]*`", "", text)


def japanese_files() -> list[Path]:
    files = sorted((ROOT / "translations" / "ja").rglob("*.md")) + [GLOSSARY]
    return [path for path in files if path not in NOT_CHECKED]


def test_the_table_reads_as_terms_with_variants():
    table = terms()
    assert len(table) >= 10 and len({term.english for term in table}) == len(table)
    assert all(term.japanese and term.variants for term in table)
    seconds = next(term for term in table if term.english.startswith("seconds"))
    assert seconds.variants[0].search("16.0 s ") and not seconds.variants[0].search("16.0 秒 と 4 ms ")


@pytest.mark.release
@pytest.mark.parametrize("path", japanese_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_japanese_file_uses_the_tables_one_rendering(path):
    text = path.read_text(encoding="utf-8")
    if path.name in ("checks.md", "plots.md"):  # messages, figures' words: each English (en:) as code writes it
        text = "\n".join(line for line in text.splitlines() if not line.startswith("en:"))
    text = prose(text)
    wrong = []
    for term in terms():
        for pattern in term.variants:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                wrong.append(f"{match.group(0)!r} (about line {line}): write {term.japanese} ({term.english})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.release
def test_the_glossary_lists_every_term_of_the_table():
    rows = [cells(line) for line in GLOSSARY.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    listed = {(row[0], row[1]) for row in rows if len(row) >= 2}
    missing = [f"| {term.english} | {term.japanese} |" for term in terms()
               if (term.english, term.japanese) not in listed]
    assert not missing, "docs/glossary.ja.md's table of terms lacks:\n" + "\n".join(missing)
