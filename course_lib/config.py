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
``COURSE_QUICK``       ``1``: experiments run small, for CI                         ``experiments`` and the lessons
``COURSE_WORKERS``     cases an experiment sends at once (default 4; 1: one after   ``experiments`` and the lessons
                       another; the embedded server has 3 slots on 2 cores)
``COURSE_ORIGINS``     more web origins the server accepts (comma-separated,       ``server.guard``
                       wildcards), like ``OLLAMA_ORIGINS``
``COURSE_SERVER_LOG``  the embedded server's log level (default ``warning``)       ``server.app``
``OLLAMA_HOST``        where to look for a running server                          ``client``
``COURSE_API_KEY``     the key a room's server requires (``--api-key``), and the    ``server.app``,
                       key the course's clients send as ``Authorization: Bearer``   ``client``, ``runtime``
``HF_ENDPOINT``        the Hugging Face hub models are downloaded from (default     ``models``
                       ``https://huggingface.co``; a mirror's address instead), as
                       for Hugging Face's own tools
=====================  ==========================================================  ==================

Each is read when it is needed, not at import time, so a notebook or a test can change
one and the next call sees it.
"""

from __future__ import annotations

import os
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


def embedded_only() -> bool:
    """``COURSE_EMBEDDED=1``: skip any running Ollama."""
    return os.environ.get("COURSE_EMBEDDED") == "1"


def quick_mode() -> bool:
    """True when ``COURSE_QUICK=1``: run small, for CI."""
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
