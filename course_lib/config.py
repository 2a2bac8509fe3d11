"""Every setting the course reads from the environment, in one place.

=====================  ==========================================================  ==================
variable               what it does                                                read by
=====================  ==========================================================  ==================
``COURSE_MODEL``       the registry model the embedded server loads                ``models``, ``runtime``
                       (default ``qwen2.5-coder:0.5b``)
``COURSE_MODEL_PATH``  any other GGUF file to serve instead (not checked)          ``models``, ``runtime``
``COURSE_CACHE_DIR``   where fetched models are kept (default                      ``models``
                       ``$XDG_CACHE_HOME/course-tool-calling``, else ``~/.cache/...``)
``COURSE_EMBEDDED``    ``1``: never use a running Ollama, always the embedded       ``runtime``, ``gradebook``
                       server (the tests set it)
``COURSE_QUICK``       ``1``: experiments run small, for CI (a command's           ``experiments`` and the lessons
                       ``--quick`` says the same for that command only)
``COURSE_WORKERS``     cases an experiment sends at once (default 4; 1: one after   ``experiments`` and the lessons
                       another; the embedded server has 3 slots on 2 cores)
``COURSE_THREADS``     CPU threads each embedded server's model uses (default:      ``course_server.model``
                       every core; the test suite sets it to share the cores
                       between its workers, each with a server of its own)
``COURSE_ORIGINS``     more web origins the server accepts (comma-separated,       ``course_server.guard``
                       wildcards), like ``OLLAMA_ORIGINS``
``COURSE_SERVER_LOG``  the embedded server's log level (default ``warning``)       ``course_server.app``
``OLLAMA_HOST``        where to look for a running server                          ``client``
``COURSE_API_KEY``     the key a room's server requires (``--api-key``), and the    ``course_server.app``,
                       key the course's clients send as ``Authorization: Bearer``   ``client``, ``runtime``
``HF_ENDPOINT``        the Hugging Face hub models are downloaded from (default     ``models``
                       ``https://huggingface.co``; a mirror's address instead), as
                       for Hugging Face's own tools
``COURSE_LANG``        the language of the edition a kernel runs (``en``, the       ``checks``, ``grading``
                       default, or ``ja``): what the checks print in; set by
                       ``course.py lab --lang ja`` and by the grader
``COURSE_FIGURE_       the translated editions an English kernel also draws each     ``display.figures``
EDITIONS``             figure for (comma-separated, e.g. ``ja``; default none):
                       set by ``course_tools refresh``, whose outputs are committed
=====================  ==========================================================  ==================

Each is read when it is needed, not at import time, so a notebook or a test can change
one and the next call sees it.

Also here: where the course's files are. A code cell names a course file with
``course_file("data/products.json")``, from the course's top folder, instead of
``"../data/products.json"``, which holds only in a folder one level below the top: the
Japanese edition's notebooks run from ``notebooks/ja/``, two levels below.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT_MODEL = "qwen2.5-coder:0.5b"


def model_name() -> str:
    """``COURSE_MODEL``, else the default model."""
    return os.environ.get("COURSE_MODEL") or DEFAULT_MODEL


def model_path() -> Path | None:
    """``COURSE_MODEL_PATH``, if set."""
    custom = os.environ.get("COURSE_MODEL_PATH")
    return Path(custom).expanduser() if custom else None


def cache_dir() -> Path:
    """The folder that holds fetched models."""
    if configured := os.environ.get("COURSE_CACHE_DIR"):
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "course-tool-calling"


def model_threads() -> int | None:
    """``COURSE_THREADS``, if set: the CPU threads a server's model uses."""
    configured = os.environ.get("COURSE_THREADS")
    return max(1, int(configured)) if configured else None


def embedded_only() -> bool:
    """``COURSE_EMBEDDED=1``: skip any running Ollama."""
    return os.environ.get("COURSE_EMBEDDED") == "1"


def quick_mode(chosen: bool | None = None) -> bool:
    """Quick mode (experiments run small, for CI): ``chosen``, when the caller chose (a command's
    ``--quick``), else ``COURSE_QUICK=1``.

    A command passes its ``--quick`` down as an argument and never writes it into
    ``os.environ``: there it would outlive the command, and switch every later experiment of the
    same process (a test that calls the command's ``main``) into quick mode. The functions that
    shrink their work take ``quick: bool | None = None`` and ask ``quick_mode(quick)``, so a
    lesson that passes nothing still gets ``COURSE_QUICK``."""
    if chosen is not None:
        return chosen
    return os.environ.get("COURSE_QUICK") == "1"


def workers() -> int:
    """``COURSE_WORKERS``: how many cases an experiment runs at once (default 4)."""
    value = os.environ.get("COURSE_WORKERS", "4")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"COURSE_WORKERS must be a whole number of at least 1, not {value!r}")
    return int(value)


def extra_origins() -> list[str]:
    """The origins ``COURSE_ORIGINS`` adds to those of this machine."""
    return [item.strip() for item in os.environ.get("COURSE_ORIGINS", "").split(",") if item.strip()]


def server_log_level() -> str:
    return os.environ.get("COURSE_SERVER_LOG", "warning")


def ollama_host() -> str | None:
    return os.environ.get("OLLAMA_HOST")


def api_key() -> str | None:
    """``COURSE_API_KEY``: the room server's key, which the course's clients send (None: no key)."""
    return os.environ.get("COURSE_API_KEY") or None


def hub_endpoint() -> str:
    """``HF_ENDPOINT``: the Hugging Face hub to download models from (a mirror), else huggingface.co."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def course_language() -> str:
    """``COURSE_LANG``: the language of the edition this process runs (``en`` or ``ja``).

    Without it, a process whose folder is a ``ja`` folder of ``notebooks/`` or ``exercises/``
    (a kernel runs in its notebook's folder) is in the Japanese edition; anything else, English.
    """
    if value := os.environ.get("COURSE_LANG"):
        if not re.fullmatch(r"[a-z]{2}", value):
            raise ValueError(f"COURSE_LANG is a two-letter language code such as en or ja, not {value!r}")
        return value
    here = Path.cwd()
    return "ja" if here.name == "ja" and here.parent.name in ("notebooks", "exercises") else "en"


def figure_editions() -> list[str]:
    """``COURSE_FIGURE_EDITIONS``: the languages an English kernel draws each figure in besides
    English, for the translated notebooks built from its outputs; none unless it is set."""
    languages = [value.strip() for value in os.environ.get("COURSE_FIGURE_EDITIONS", "").split(",") if value.strip()]
    if wrong := [value for value in languages if not re.fullmatch(r"[a-z]{2}", value)]:
        raise ValueError(f"COURSE_FIGURE_EDITIONS lists two-letter language codes such as ja, not {wrong[0]!r}")
    return languages


COURSE_ROOT = Path(__file__).resolve().parent.parent  # the course's top folder (the clone)


def course_file(name: str | os.PathLike[str]) -> Path:
    """The course's file (or folder) ``name``, given from the course's top folder, as a path
    that works from the folder this code runs in::

        PRODUCTS = json.loads(course_file("data/products.json").read_text())

    ``"../data/products.json"`` works only one folder below the top (``notebooks/``), not in
    the Japanese edition's ``notebooks/ja/``. This looks for ``name`` the way ``../`` did, at
    any depth: in the current folder, then in each folder above it; the first that holds it
    wins, so a copy of the course (the grader's scratch folder, with its own ``data/``) uses its
    own files. When none holds it (a file still to be written), it is the one in the course's
    top folder. The path is relative to the current folder when there is one (so a printed path
    shows no machine's folders), else absolute (another drive, on Windows).
    """
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ValueError(f"course_file takes a path from the course's top folder, like 'data/products.json', "
                         f"not {name!r}")
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / relative).exists():
            return _from_here(folder / relative, here)
    return _from_here(COURSE_ROOT / relative, here)


def _from_here(path: Path, here: Path) -> Path:
    """``path`` relative to ``here`` when one exists, else as it is."""
    try:
        return Path(os.path.relpath(path, here))
    except ValueError:  # another drive (Windows): no relative path
        return path
