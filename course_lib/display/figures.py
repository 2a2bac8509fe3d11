"""Figures in each edition's language: the same plot, its words in English or in Japanese.

A lesson's plotting code is the same in every edition, and writes its titles and labels in
English. When a notebook shows a matplotlib figure, IPython asks ``bundle`` for it (``course_lib``
registers it on import inside IPython): in a Japanese kernel (``COURSE_LANG=ja``) the figure is
drawn with every text (title, axis and tick labels, legend, annotations) replaced by its
translation from ``translations/ja/plots.md`` (the check messages' format: ``en:`` and ``ja:``
lines, an f-string's words as a template with ``{placeholders}``), in a font that has Japanese
characters (IPAexGothic, from the ``matplotlib-fontja`` package the course installs).

The committed notebooks are made by ``course_tools refresh``, whose kernel has
``COURSE_FIGURE_EDITIONS`` set to the translated editions (those with a ``plots.md``): there an
English kernel draws the English figure and, beside it in the output's metadata, the same figure
in each of them. The translated notebooks' outputs are the English run's
(``course_tools/translation/build.py``), so their figures are the ones measured, in their words.
A text with English words and no translation is listed in the metadata (``untranslated``),
which a test keeps empty. A learner's English kernel draws English only.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from course_lib.check_messages import TRANSLATIONS, translate, translation_of, translations
from course_lib.config import COURSE_ROOT, course_language, figure_editions

CATALOGUE = "plots.md"  # beside checks.md in translations/<language>/
FONTS = {"ja": ("IPAexGothic", "matplotlib_fontja", "fonts/ipaexg.ttf")}  # family, package, file in it
METADATA = "course_translations"  # output metadata: {language: {"image/png": ..., "untranslated": [...]}}
ENGLISH_WORD = re.compile(r"(?<![\w.-])(?=[A-Z]?[a-z])[A-Za-z]{3,}(?![\w.(-])")  # not ASR, get_time, now()


def editions() -> list[str]:
    """The languages with a figure catalogue besides English (``translations/<language>/plots.md``):
    what ``course_tools refresh`` asks an English kernel to draw too."""
    folder = COURSE_ROOT / TRANSLATIONS
    return sorted(path.parent.name for path in folder.glob(f"*/{CATALOGUE}")) if folder.is_dir() else []


@cache
def words(language: str) -> dict[str, str]:
    return translations(language, name=CATALOGUE)


def translated(text: str, language: str) -> str:
    """``text`` in ``language``: line by line, each line's translation, or a template it fills
    with its values translated too where the catalogue has them (a task's question in a title)."""
    catalogue = words(language)
    lines = []
    for line in text.split("\n"):
        start = len(line) - len(line.lstrip())
        kept, body = line[:start], line[start:]
        lines.append(kept + translate(body, catalogue, value=lambda value: catalogue.get(value, value)))
    return "\n".join(lines)


def english_words(text: str) -> list[str]:
    """The English words in a text: runs of three letters or more with a small letter, not part of
    an identifier (``get_time``, ``SKU-00042``, ``qwen2.5-coder``) or a call (``now()``)."""
    return ENGLISH_WORD.findall(text)


def unknown_lines(text: str, language: str) -> list[str]:
    """The lines of ``text`` with English words that the catalogue neither has nor fills as a template."""
    return [line.strip() for line in text.split("\n")
            if english_words(line) and translation_of(line.strip(), words(language)) is None]


@cache
def font_family(language: str) -> str | None:
    """The font family for ``language``'s characters, added to matplotlib from its package; None
    if the package is not installed (the figure is then drawn with matplotlib's own fonts)."""
    if language not in FONTS:
        return None
    family, package, file = FONTS[language]
    spec = importlib.util.find_spec(package)  # found without importing it: its import changes the default font
    if spec is None or spec.origin is None:
        return None
    from matplotlib import font_manager

    font_manager.fontManager.addfont(str(Path(spec.origin).parent / file))
    return family


@contextmanager
def in_language(figure: Any, language: str) -> Iterator[Callable[[], list[str]]]:
    """``figure`` with its texts in ``language`` and the font for it, put back as it was on leaving;
    yields a function that lists, once the figure has been drawn, the lines that kept English
    words (no translation in the catalogue): tick labels are written only when it is drawn."""
    from matplotlib.axis import Axis
    from matplotlib.text import Text

    family = font_family(language)
    restore: list[Any] = []
    originals: list[str] = []  # every English text drawn, to list those without a translation
    for axis in figure.findobj(Axis):  # tick labels are written by the formatter at each draw
        for ticker in (axis.major, axis.minor):
            restore.append((ticker, "formatter", ticker.formatter))
            ticker.formatter = _translating(ticker.formatter, language, originals)
    for text in figure.findobj(Text):
        original = text.get_text()
        restore.append((text, "properties", (original, text.get_fontproperties().copy())))
        if original:
            originals.append(original)
            text.set_text(translated(original, language))
        if family:
            text.set_fontfamily([family, "DejaVu Sans"])
    def untranslated() -> list[str]:
        return list(dict.fromkeys(line for original in originals for line in unknown_lines(original, language)))

    try:
        yield untranslated
    finally:
        for owner, what, value in reversed(restore):
            if what == "formatter":
                owner.formatter = value
            else:
                owner.set_text(value[0])
                owner.set_fontproperties(value[1])


def _translating(formatter: Any, language: str, originals: list[str]) -> Any:
    """A tick formatter that writes ``formatter``'s labels in ``language``, keeping the English in ``originals``."""
    from matplotlib.ticker import Formatter

    class Translating(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return translated(formatter(x, pos), language)

        def format_ticks(self, values: list[float]) -> list[str]:
            labels = formatter.format_ticks(values)
            originals.extend(labels)
            return [translated(label, language) for label in labels]

        def set_locs(self, locs: list[float]) -> None:
            formatter.set_locs(locs)

        def get_offset(self) -> str:
            return formatter.get_offset()

    return Translating()


def png(figure: Any) -> str:
    """The figure as IPython's inline backend draws it: a PNG, base64, cropped to what is drawn."""
    buffer = io.BytesIO()
    figure.canvas.print_figure(buffer, format="png", bbox_inches="tight", facecolor=figure.get_facecolor())
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def bundle(figure: Any, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
    """IPython's display of a figure: drawn in this kernel's edition's language; an English kernel
    adds the drawing of each edition in ``COURSE_FIGURE_EDITIONS`` to the metadata (``METADATA``)."""
    language = course_language()
    if language != "en":
        with in_language(figure, language):
            return {"image/png": png(figure), "text/plain": repr(figure)}, {}
    data = {"image/png": png(figure), "text/plain": repr(figure)}
    others = {}
    for edition in figure_editions():
        with in_language(figure, edition) as untranslated:
            others[edition] = {"image/png": png(figure), "untranslated": untranslated()}
    return data, ({METADATA: others} if others else {})
