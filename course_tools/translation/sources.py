"""Which English files have a translation, where each one's catalogue is, and what it builds.

==============================  ======================================  ==============================
English source                  catalogue (``translations/ja/...``)     built edition
==============================  ======================================  ==============================
``notebooks/<stem>.ipynb``      ``translations/ja/notebooks/<stem>.md``  ``notebooks/ja/<stem>.ipynb``
``exercises/<stem>.ipynb``      ``translations/ja/exercises/<stem>.md``  ``exercises/ja/<stem>.ipynb``
``README.md``                   ``translations/ja/README.md``           ``README.ja.md``
``docs/<page>.md``              ``translations/ja/docs/<page>.md``      ``docs/<page>.ja.md``
``docs/instructors/<page>.md``  ``translations/ja/docs/instructors/…``  ``docs/instructors/<page>.ja.md``
==============================  ======================================  ==============================

The pages of ``docs/`` translated are those at its top (``docs/measured.md``: what the README
links to for the details) and every page of the instructor's kit in ``docs/instructors/`` (its
agendas, setup mail, troubleshooting and the checks for understanding, which the lessons'
self-checks read); a page named with a language (``docs/glossary.ja.md``) is written in that
language and is nobody's translation.

Every path here is relative to the course's top folder (``root``), so that messages name
files as the repository does, and tests can build an edition in a folder of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOTEBOOK_FOLDERS = ("notebooks", "exercises")  # the folders whose notebooks are translated
DOCS = "docs"  # the folder whose top-level Markdown pages are translated
KIT = Path(DOCS, "instructors")  # the instructor's kit: every English page of it is translated
TRANSLATIONS = "translations"
GENERATED_MARK = "<!-- Generated from "  # how a built Markdown file begins (build.GENERATED)


@dataclass(frozen=True)
class Source:
    """One English file, with the catalogue of its translation and the file that translation builds."""

    english: Path
    catalogue: Path
    built: Path

    @property
    def is_notebook(self) -> bool:
        return self.english.suffix == ".ipynb"


def source_for(english: Path, language: str) -> Source:
    """Where the translation of ``english`` (a path from the top folder) into ``language`` lives."""
    if english == Path("README.md"):
        return Source(english, Path(TRANSLATIONS, language, "README.md"), Path(f"README.{language}.md"))
    if english.suffix == ".ipynb" and len(english.parts) == 2 and english.parts[0] in NOTEBOOK_FOLDERS:
        folder, name = english.parts
        return Source(english, Path(TRANSLATIONS, language, folder, english.stem + ".md"), Path(folder, language, name))
    if is_doc_page(english):
        built = Path(DOCS, f"{english.stem}.{language}.md")
        return Source(english, Path(TRANSLATIONS, language, DOCS, english.name), built)
    if english.parent == KIT and english.suffix == ".md" and "." not in english.stem:
        return Source(english, Path(TRANSLATIONS, language, KIT, english.name), KIT / f"{english.stem}.{language}.md")
    raise ValueError(f"{english} is not translated: only README.md, the pages at the top of {DOCS}/ and the "
                     f"notebooks of {' and '.join(folder + '/' for folder in NOTEBOOK_FOLDERS)} are")


def is_doc_page(path: Path) -> bool:
    """Whether ``path`` is an English page at the top of ``docs/`` (not ``docs/<page>.ja.md``)."""
    return path.suffix == ".md" and len(path.parts) == 2 and path.parts[0] == DOCS and "." not in path.stem


def sources(root: Path, language: str) -> list[Source]:
    """Every English file that has (or should have) a ``language`` translation, in order."""
    english = [Path(folder, path.name) for folder in NOTEBOOK_FOLDERS
               for path in sorted((root / folder).glob("*.ipynb"))]
    if (root / "README.md").is_file():
        english.append(Path("README.md"))
    pages = [Path(DOCS, path.name) for path in sorted((root / DOCS).glob("*.md"))]
    english += [page for page in pages if is_doc_page(page)]
    english += [KIT / path.name for path in sorted((root / KIT).glob("*.md")) if "." not in path.stem]
    return [source_for(path, language) for path in english]


def catalogues_on_disk(root: Path, language: str) -> list[Path]:
    """Every catalogue file of ``language`` there is (some may have lost their English file)."""
    base = root / TRANSLATIONS / language
    found = [Path(TRANSLATIONS, language, folder, path.name) for folder in NOTEBOOK_FOLDERS
             for path in sorted((base / folder).glob("*.md"))]
    if (base / "README.md").is_file():
        found.append(Path(TRANSLATIONS, language, "README.md"))
    found += [Path(TRANSLATIONS, language, DOCS, path.name) for path in sorted((base / DOCS).glob("*.md"))]
    found += [Path(TRANSLATIONS, language, KIT, path.name) for path in sorted((base / KIT).glob("*.md"))]
    return found


def built_on_disk(root: Path, language: str) -> list[Path]:
    """Every built file of ``language`` there is (some may have lost their English file)."""
    found = [Path(folder, language, path.name) for folder in NOTEBOOK_FOLDERS
             for path in sorted((root / folder / language).glob("*.ipynb"))]
    if (root / f"README.{language}.md").is_file():
        found.append(Path(f"README.{language}.md"))
    found += [folder / path.name for folder in (Path(DOCS), KIT)
              for path in sorted((root / folder).glob(f"*.{language}.md"))
              if path.read_text(encoding="utf-8").startswith(GENERATED_MARK)]  # not a page written in the language
    return found
