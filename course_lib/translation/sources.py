"""Which English files have a translation, where each one's catalogue is, and what it builds.

==============================  ======================================  ==============================
English source                  catalogue (``translations/ja/...``)     built edition
==============================  ======================================  ==============================
``notebooks/<stem>.ipynb``      ``translations/ja/notebooks/<stem>.md``  ``notebooks/ja/<stem>.ipynb``
``exercises/<stem>.ipynb``      ``translations/ja/exercises/<stem>.md``  ``exercises/ja/<stem>.ipynb``
``README.md``                   ``translations/ja/README.md``           ``README.ja.md``
==============================  ======================================  ==============================

Every path here is relative to the course's top folder (``root``), so that messages name
files as the repository does, and tests can build an edition in a folder of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOTEBOOK_FOLDERS = ("notebooks", "exercises")  # the folders whose notebooks are translated
TRANSLATIONS = "translations"


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
    raise ValueError(f"{english} is not translated: only README.md and the notebooks of "
                     f"{' and '.join(folder + '/' for folder in NOTEBOOK_FOLDERS)} are")


def sources(root: Path, language: str) -> list[Source]:
    """Every English file that has (or should have) a ``language`` translation, in order."""
    english = [Path(folder, path.name) for folder in NOTEBOOK_FOLDERS
               for path in sorted((root / folder).glob("*.ipynb"))]
    if (root / "README.md").is_file():
        english.append(Path("README.md"))
    return [source_for(path, language) for path in english]


def catalogues_on_disk(root: Path, language: str) -> list[Path]:
    """Every catalogue file of ``language`` there is (some may have lost their English file)."""
    base = root / TRANSLATIONS / language
    found = [Path(TRANSLATIONS, language, folder, path.name) for folder in NOTEBOOK_FOLDERS
             for path in sorted((base / folder).glob("*.md"))]
    if (base / "README.md").is_file():
        found.append(Path(TRANSLATIONS, language, "README.md"))
    return found


def built_on_disk(root: Path, language: str) -> list[Path]:
    """Every built file of ``language`` there is (some may have lost their English file)."""
    found = [Path(folder, language, path.name) for folder in NOTEBOOK_FOLDERS
             for path in sorted((root / folder / language).glob("*.ipynb"))]
    if (root / f"README.{language}.md").is_file():
        found.append(Path(f"README.{language}.md"))
    return found
