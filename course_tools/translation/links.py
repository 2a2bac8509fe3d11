"""Relative links in Markdown: which ones a file has, which ones lead nowhere, and how they
read from another folder.

A built Japanese notebook lives one folder deeper than its English one
(``notebooks/ja/``), so a link written for ``notebooks/`` (``../data/products.json``) is
wrong there. Translators write links as they must read from the built file's folder;
``broken`` finds the ones that do not, and ``moved`` rewrites the links of English text shown
in a Japanese file (``build --allow-english``) so that they still lead where they did.

Links are read outside code: fenced blocks and inline code spans are skipped
(``tools[name](arguments)`` in a code span is not a link). The forms read are inline links
and images (``[text](target "title")``), reference definitions (``[name]: target``) and
HTML ``src=``/``href=`` attributes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.MULTILINE)
HTML = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)""", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)


def _prose(markdown: str) -> str:
    """``markdown`` with its code (fenced blocks, inline spans) blanked out, same length."""
    blank: Callable[[re.Match[str]], str] = lambda found: re.sub(r"[^\n]", " ", found.group(0))  # noqa: E731
    return CODE_SPAN.sub(blank, FENCE.sub(blank, markdown))


def _found(markdown: str) -> Iterator[re.Match[str]]:
    """Every link target outside code, as a match whose group 1 is the target."""
    prose = _prose(markdown)
    for pattern in (INLINE, REFERENCE, HTML):
        yield from pattern.finditer(prose)


def is_relative(target: str) -> bool:
    """Whether ``target`` names a file by a path from the linking file's folder (not a web
    address, not ``#a-heading`` in the same file, not an absolute path)."""
    return not (SCHEME.match(target) or target.startswith(("#", "/", "\\")))


def file_part(target: str) -> str:
    """The path of a link target, without its ``#heading`` or ``?query``, with ``%20`` decoded."""
    return unquote(re.split(r"[#?]", target, maxsplit=1)[0])


def relative_links(markdown: str) -> list[str]:
    """The relative link targets of ``markdown``, in order of kind then place."""
    return [found.group(1) for found in _found(markdown) if is_relative(found.group(1))]


def broken(markdown: str, folder: Path, also_there: frozenset[Path] = frozenset()) -> list[str]:
    """The relative links of ``markdown``, written in ``folder``, that lead to no file or folder
    (``also_there``: absolute paths that count as existing, such as files about to be built)."""
    missing = []
    for target in relative_links(markdown):
        path = Path(os.path.normpath(folder / file_part(target)))
        if file_part(target) and not path.exists() and path not in also_there:
            missing.append(target)
    return missing


def moved(markdown: str, old_folder: Path, new_folder: Path) -> str:
    """``markdown`` written in ``old_folder`` with its relative links rewritten to lead to the
    same files from ``new_folder`` (``../data/x.json`` from ``notebooks/`` becomes
    ``../../data/x.json`` from ``notebooks/ja/``)."""
    changes = []
    for found in _found(markdown):
        target = found.group(1)
        path = file_part(target)
        if not is_relative(target) or not path:
            continue
        rest = target[len(target.split("#")[0].split("?")[0]):]  # the #heading or ?query, kept as it was
        new = Path(os.path.relpath(os.path.normpath(old_folder / path), new_folder)).as_posix()
        changes.append((found.start(1), found.end(1), new.replace(" ", "%20") + rest))
    for start, end, new in sorted(changes, reverse=True):
        markdown = markdown[:start] + new + markdown[end:]
    return markdown
