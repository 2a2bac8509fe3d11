"""Lessons executed against servers started with different flags, side by side.

    python -m course_tools benchmark notebooks_by_server 08_experiments.ipynb 05_validation.ipynb \
        [--arms "--prompt-cache 0;--prompt-cache 8"] [--full]

Each arm starts one embedded server with its flags and executes copies of the named
notebooks (from notebooks/, in quick mode unless ``--full``) against it, through
``OLLAMA_HOST``, one arm after the other, in one run (machines are noisy: read the
ratio). The seconds of each notebook, kernel start included, are printed with their ratio
to the first arm's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course_lib.runtime import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path) -> float:
    """Seconds to execute the notebook at ``path`` top to bottom in a fresh kernel."""
    notebook = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(notebook, timeout=None, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--arms", default="--prompt-cache 0;--prompt-cache 8")
    parser.add_argument("--full", action="store_true", help="full mode (COURSE_QUICK=0)")
    args = parser.parse_args()
    arms = [arm.split() for arm in args.arms.split(";")]
    os.environ["COURSE_QUICK"] = "0" if args.full else "1"
    os.environ.pop("COURSE_EMBEDDED", None)  # the notebooks must use the server of the arm
    seconds: dict[str, dict[str, float]] = {name: {} for name in args.notebooks}
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder)
        shutil.copytree(ROOT / "notebooks", copy / "notebooks")
        shutil.copytree(ROOT / "data", copy / "data")
        for flags in arms:
            server = EmbeddedServer(*flags)
            os.environ["OLLAMA_HOST"] = server.url
            try:
                for name in args.notebooks:
                    seconds[name][" ".join(flags)] = execute(copy / "notebooks" / name)
                    print(f"{' '.join(flags):20} {name:32} {seconds[name][' '.join(flags)]:7.1f} s", flush=True)
            finally:
                server.stop()
    for name, by_arm in seconds.items():
        first = next(iter(by_arm.values()))
        print(name + ": " + ", ".join(f"{arm} {value:.1f} s ({value / first:.2f}x)" for arm, value in by_arm.items()))
