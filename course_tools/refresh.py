"""Re-execute a notebook top to bottom, in full mode, and keep its outputs (for maintainers).

    python -m course_tools refresh notebooks/08_experiments.ipynb [more notebooks]

This is how the committed notebooks are produced: a fresh kernel in the notebook's own
folder, ``COURSE_QUICK=0`` (full experiments), no time limit per cell, each figure drawn in the
translated editions too (``COURSE_FIGURE_EDITIONS``, for their notebooks' outputs). Progress bars are
transient, so their outputs (and the widget state they leave, about a megabyte for a
long experiment) are dropped; any other widget, such as lesson 9's approval panel, stays.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_lib.display.figures import editions

WIDGET = "application/vnd.jupyter.widget-view+json"
PROGRESS_BAR = re.compile(r"\d+%\|.*\|")


def kernel_environment() -> dict[str, str]:
    """The environment a refreshed notebook's kernel runs in: this one, in full mode, drawing each
    figure in the translated editions too (``course_lib.display.figures``)."""
    return {**os.environ, "COURSE_QUICK": "0", "COURSE_FIGURE_EDITIONS": ",".join(editions())}


def without_progress_bars(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop tqdm widget outputs; drop the saved widget state too if no other widget is left."""
    widgets_left = False
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            data = output.get("data", {})
            if WIDGET in data and PROGRESS_BAR.search(data.get("text/plain", "")):
                continue
            widgets_left |= WIDGET in data
            kept.append(output)
        cell.outputs = kept
    if not widgets_left:
        notebook.metadata.pop("widgets", None)
    return notebook


def refresh(path: Path) -> None:
    """Run ``path`` in full on a fresh kernel and write it back with its new outputs.

    ``COURSE_QUICK=0`` is given to the kernel's environment only: this process's own
    ``os.environ`` is left as it was, so whatever runs after it here is not switched out of
    quick mode."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=None, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute(env=kernel_environment())
    nbformat.write(without_progress_bars(notebook), path)
    print("refreshed", path)


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    if not names:
        print(__doc__)
        return 2
    for name in names:
        refresh(Path(name))
    return 0
