#!/usr/bin/env python3
"""Set up the course and run it: the only two commands a learner needs.

    python3 course.py lab     # install what is missing, fetch the model, open JupyterLab
    python3 course.py test    # install what is missing, fetch the model, run every test

Also: ``python3 course.py grade exercises/01_the_wire.ipynb`` (one line per exercise:
passed, failed with the check's message, or not attempted; ``-v`` for nbval's raw
output; no notebook: a table over all of them; ``--class DIR --out OUT``: an
instructor's gradebook, see ``course_lib/gradebook.py``), ``python3 course.py setup`` (only install and fetch) and
``python3 course.py check`` (say what is there and what is missing). Arguments after
``test`` go to pytest.

Everything is installed into ``.venv`` next to this file, unless you run this script
from an environment you activated yourself (a venv or conda), which is then used.
The first install compiles llama-cpp-python from source: about 5 minutes on 2 cores,
once (pip keeps the built wheel in its cache).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"


def in_own_environment() -> bool:
    return sys.prefix != sys.base_prefix or "CONDA_PREFIX" in os.environ


def python() -> Path:
    """The interpreter the course runs on."""
    if in_own_environment():
        return Path(sys.executable)
    bindir = "Scripts" if os.name == "nt" else "bin"
    return VENV / bindir / ("python.exe" if os.name == "nt" else "python")


def run(*args: str | Path) -> None:
    print("$", " ".join(str(a) for a in args), flush=True)
    done = subprocess.run([str(a) for a in args], cwd=ROOT)
    if done.returncode != 0:
        sys.exit(done.returncode)


def install() -> None:
    """Create the venv and install the course (editable) with its test tools, if needed."""
    if sys.version_info < (3, 10):
        sys.exit(f"The course needs Python 3.10 or newer; this is {sys.version.split()[0]}.")
    if not in_own_environment() and not python().exists():
        print(f"Creating a virtual environment in {VENV.name}/ ...", flush=True)
        venv.create(VENV, with_pip=True)
    stamp = Path(subprocess.check_output([str(python()), "-c", "import sys; print(sys.prefix)"],
                                         text=True).strip()) / "course-install.stamp"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return
    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang") or os.name == "nt"):
        print("warning: no C compiler found; llama-cpp-python is built from source and needs one "
              "(Debian/Ubuntu: apt-get install build-essential cmake).", flush=True)
    print("Installing the course's packages. The first time, pip compiles llama-cpp-python "
          "from source (about 5 minutes on 2 cores).", flush=True)
    run(python(), "-m", "pip", "install", "--upgrade", "pip")
    run(python(), "-m", "pip", "install", "-e", ".[test]")
    stamp.write_text(wanted)


def setup() -> None:
    install()
    run(python(), "-m", "course_lib.models", "fetch")


MODEL_IS_HERE = ("import os, sys; from course_lib.models import DEFAULT_MODEL, is_fetched, spec_for; "
                 "sys.exit(0 if os.environ.get('COURSE_MODEL_PATH') "
                 "or is_fetched(spec_for(os.environ.get('COURSE_MODEL', DEFAULT_MODEL))) else 1)")


def model_fetched() -> bool:
    """Whether the model the course will use is here and verified (size and checksum)."""
    return subprocess.run([str(python()), "-c", MODEL_IS_HERE], capture_output=True, cwd=ROOT).returncode == 0


def check() -> int:
    """Say OK or FAIL for each requirement, without changing anything."""
    checks = [
        ("Python >= 3.10", sys.version_info >= (3, 10)),
        ("a C compiler (to build llama-cpp-python)", bool(shutil.which("cc") or shutil.which("gcc"))),
        ("course environment", python().exists()),
    ]
    if python().exists():
        probe = subprocess.run([str(python()), "-c", "import course_lib, llama_cpp, jupyterlab, nbval"],
                               capture_output=True, cwd=ROOT)
        checks.append(("course packages installed", probe.returncode == 0))
        checks.append(("the chosen model fetched (COURSE_MODEL, default the 0.5B one)", model_fetched()))
    for label, ok in checks:
        print(f"[{'OK' if ok else 'FAIL'}] {label}")
    return 0 if all(ok for _, ok in checks) else 1


def grade(args: list[str]) -> int:
    """Grade exercise notebooks (``course_lib.gradebook``); set up first, quietly if all is there.

    The report is the only output when nothing is missing, so it can be piped or saved.
    """
    install()
    if not model_fetched():
        run(python(), "-m", "course_lib.models", "fetch")
    return subprocess.run([str(python()), "-m", "course_lib.gradebook", *args]).returncode


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "lab":
        setup()
        as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # e.g. in a container
        run(python(), "-m", "jupyter", "lab", "notebooks", *as_root, *rest)
    elif command == "test":
        setup()
        run(python(), "-m", "pytest", *rest)
    elif command == "grade":
        return grade(rest)
    elif command == "setup":
        setup()
    elif command == "check":
        return check()
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
