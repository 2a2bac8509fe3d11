"""Slides made from the lessons themselves: one reveal.js deck per lesson, never a hand-written copy.

    python -m course_tools slides OUT                  # every notebook in notebooks/ (the appendix too)
    python -m course_tools slides OUT --lang ja        # the Japanese edition's, from notebooks/ja/
    python -m course_tools slides OUT notebooks/01_the_wire.ipynb [more notebooks]

writes ``OUT/01_the_wire.slides.html`` and so on, with nbconvert's ``SlidesExporter``. The
appendix for the curious gets a deck too: no agenda presents it, but a learner who asks about
the server's cache can be shown its slides. A slide deck needs to know where each slide
starts, which a notebook says in each cell's ``slideshow`` metadata; the lessons carry none,
so a copy of each lesson gets it here:

- a ``#`` or ``##`` heading starts a new slide (left to right): a markdown cell that holds one
  further down is split in two before it (``at_headings``);
- every other cell joins the slide above it while that stays short (``MAX_LINES`` lines of
  text, code and output), and otherwise starts a sub-slide below it (down);
- an output longer than ``MAX_OUTPUT_LINES`` lines is cut, and says how many lines were left
  out (the whole output is in the lesson), and widgets, which need a live kernel, leave their
  text form.

The test suite's markers (``# NBVAL_CHECK_OUTPUT``) are left out of the code shown. The lessons
are not modified: the copy lives in memory. The decks show the committed outputs, so nothing is
run and no model is needed.

A deck loads nothing from the web, so it opens in a room without a network: the course ships
what reveal.js needs (``course_tools/slides_assets/``: reveal.js 4, RequireJS and jQuery from
their npm packages, and the theme's font), and ``write_slides`` copies it into ``OUT/assets/``
beside the decks; copy the whole ``OUT`` folder to the room's machine. The decks are made with
the course's own template (``slides_assets/template/``), nbconvert's reveal.js template without
MathJax, Mermaid and the widget renderer, which it would fetch from CDNs and the lessons do not
use. ``--assets URL`` points the decks at another copy of the same files (a web server of
yours) instead, and then nothing is copied.
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import nbformat

from course_grading.grading import EDITIONS
from course_lib.config import course_language

LESSONS = Path(__file__).resolve().parent.parent / "notebooks"
ASSETS = Path(__file__).resolve().parent / "slides_assets"  # reveal.js, RequireJS, jQuery and the deck template
MAX_LINES = 22  # what fits on a slide at the exporter's size, about
MAX_OUTPUT_LINES = 12
IMAGE_LINES = 14  # the room a plot takes on a slide, counted in lines of text
WIDGET = "application/vnd.jupyter.widget-view+json"
HEADING = re.compile(r"^(#{1,6})\s+\S")
TEST_MARKER = re.compile(r"^\s*# NBVAL_\w+\s*$")


def heading_level(cell: Any) -> int | None:
    """The level of the heading a markdown cell starts with (1 for ``#``), or None."""
    if cell.cell_type != "markdown":
        return None
    first_line = next((line for line in cell.source.splitlines() if line.strip()), "")
    match = HEADING.match(first_line)
    return len(match.group(1)) if match else None


def at_headings(markdown: str, deepest: int = 2) -> list[str]:
    """``markdown`` cut before each heading of level ``deepest`` or less (``#`` is 1) that does not
    start it; a ``#`` line inside a fenced code block (a shell comment) is no heading."""
    parts: list[list[str]] = [[]]
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match and len(match.group(1)) <= deepest and any(text.strip() for text in parts[-1]):
            parts.append([])
        parts[-1].append(line)
    return ["\n".join(part).strip("\n") for part in parts]


def lesson_title(notebook: Any) -> str | None:
    """The text of the notebook's first ``#`` heading, without Markdown's backticks (None if it has none)."""
    for cell in notebook.cells:
        if heading_level(cell) == 1:
            first_line = next(line for line in cell.source.splitlines() if line.strip())
            return first_line.lstrip("#").strip().replace("`", "")
    return None


def cut(text: str, max_lines: int) -> str:
    """``text`` with at most ``max_lines`` lines, and a last line saying how many were left out."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text
    left_out = len(lines) - max_lines
    return "\n".join([*lines[:max_lines], f"… {left_out} more line{'s' * (left_out > 1)} in the lesson"]) + "\n"


def trimmed_output(output: Any, max_lines: int = MAX_OUTPUT_LINES) -> Any:
    """A copy of one output fit for a slide: text cut to ``max_lines``, widgets as their text form.

    An HTML or Markdown output too long for a slide is replaced by its cut plain text, since
    cutting HTML in the middle would break its tags."""
    output = copy.deepcopy(output)
    if output.output_type == "stream":
        output.text = cut(output.text, max_lines)
    elif output.output_type in ("execute_result", "display_data"):
        data = output.data
        data.pop(WIDGET, None)
        for rich in ("text/html", "text/markdown", "text/latex"):
            if rich in data and len(str(data[rich]).splitlines()) > max_lines:
                del data[rich]
        if "text/plain" in data:
            data["text/plain"] = cut(str(data["text/plain"]), max_lines)
    elif output.output_type == "error":
        output.traceback = output.traceback[-max_lines:]
    return output


def lines_on_slide(cell: Any) -> int:
    """About how many lines of the slide a cell (source and outputs) takes."""
    lines = len(cell.source.splitlines())
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if any(kind.startswith("image/") for kind in data):
            lines += IMAGE_LINES
        else:
            text = output.get("text") or next((str(data[k]) for k in ("text/markdown", "text/html", "text/plain")
                                               if k in data), "")
            lines += len(text.splitlines())
    return lines


def as_slides(notebook: Any, max_lines: int = MAX_LINES, max_output_lines: int = MAX_OUTPUT_LINES) -> Any:
    """A copy of ``notebook`` with every cell's ``slideshow`` metadata set and long outputs cut."""
    deck = copy.deepcopy(notebook)
    deck.cells = [nbformat.v4.new_markdown_cell(part) if cell.cell_type == "markdown" else cell
                  for cell in deck.cells
                  for part in (at_headings(cell.source) if cell.cell_type == "markdown" else [cell])]
    title = lesson_title(notebook)
    if title:  # the page's <title>; without it nbconvert uses the file's name
        deck.metadata["title"] = title
    deck.metadata.pop("widgets", None)  # widget state: the widgets themselves are gone
    used = max_lines  # lines already on the current (sub)slide; full before the first cell
    for cell in deck.cells:
        if cell.cell_type == "code":
            cell.source = "\n".join(line for line in cell.source.splitlines() if not TEST_MARKER.match(line))
            cell.outputs = [trimmed_output(output, max_output_lines) for output in cell.outputs]
        lines = lines_on_slide(cell)
        level = heading_level(cell)
        if level is not None and level <= 2:
            slide_type, used = "slide", lines
        elif used + lines > max_lines:
            slide_type, used = "subslide", lines
        else:
            slide_type, used = "-", used + lines
        cell.metadata["slideshow"] = {"slide_type": slide_type}
    return deck


def slides_html(notebook: Any, name: str = "slides", assets: str = "assets") -> str:
    """The reveal.js deck of one notebook, as one HTML page (``name``: its title if it has no ``#`` heading).

    ``assets``: where the deck loads reveal.js, RequireJS and jQuery from (a folder relative to
    the deck, or a URL), laid out as ``slides_assets/`` is. The page's language (``<html lang>``,
    which a browser's fonts and a screen reader follow) is the edition the notebook says it
    belongs to (a translated notebook's ``course.language``), else English."""
    from nbconvert import SlidesExporter  # nbconvert is slow to import; only this function needs it

    base = assets.rstrip("/")
    exporter = SlidesExporter(extra_template_basedirs=[str(ASSETS)], template_name="template",
                              reveal_theme="white",  # its font ships with it ("simple" fetches Google's)
                              reveal_url_prefix=f"{base}/reveal.js", require_js_url=f"{base}/require.js",
                              jquery_url=f"{base}/jquery.min.js",
                              language_code=notebook.metadata.get("course", {}).get("language", "en"))
    html, _ = exporter.from_notebook_node(as_slides(notebook), resources={"metadata": {"name": name}})
    return html


def copy_assets(out: Path) -> Path:
    """Copy what a deck loads (``slides_assets/`` without the template) into ``OUT/assets/``."""
    target = out / "assets"
    shutil.copytree(ASSETS, target, ignore=shutil.ignore_patterns("template", "README.md"), dirs_exist_ok=True)
    return target


def write_slides(out: Path, notebooks: list[Path], assets: str | None = None) -> list[Path]:
    """Write ``OUT/<lesson>.slides.html`` for each notebook, and what they load into
    ``OUT/assets/`` unless ``assets`` names another copy; return the decks written.

    Every notebook is read before anything is written, so a wrong name stops the run at once."""
    read = []
    for path in notebooks:
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"{path} is not a notebook file (.ipynb)")
        try:
            read.append((path, nbformat.read(path, as_version=4)))
        except Exception as error:  # nbformat raises several kinds for a broken file
            raise ValueError(f"{path} could not be read as a notebook: {error}") from error
    out.mkdir(parents=True, exist_ok=True)
    if assets is None:
        copy_assets(out)
    written = []
    for path, notebook in read:
        target = out / f"{path.stem}.slides.html"
        target.write_text(slides_html(notebook, path.stem, assets or "assets"), encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools slides", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder the decks are written to (made if missing)")
    parser.add_argument("notebooks", type=Path, nargs="*",
                        help="notebooks to convert (default: every notebook in notebooks/, the appendix too)")
    parser.add_argument("--lang", choices=("en", *EDITIONS), default=None,
                        help="the edition whose lessons become decks when no notebook is named (notebooks/ja/ "
                             "for ja; default: COURSE_LANG, which `course.py lab --lang ja` sets, else en)")
    parser.add_argument("--assets", help="load reveal.js/, require.js and jquery.min.js from this folder (a URL, or "
                                         "a path relative to OUT) instead of the copy written into OUT/assets/")
    args = parser.parse_intermixed_args(argv)
    language = args.lang or course_language()
    notebooks = args.notebooks or sorted((LESSONS if language == "en" else LESSONS / language).glob("*.ipynb"))
    try:
        written = write_slides(args.out, notebooks, args.assets)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0
