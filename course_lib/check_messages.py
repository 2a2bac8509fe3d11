"""The check messages' translations, as the checks read them when they speak a learner's language.

A check cell's code is the same in every edition, so what it says (the ``what`` and ``hint`` of
``check``, ``check_equal`` and ``check_close``) is translated when it is shown
(``course_lib.checks.said``), from the catalogue ``translations/<language>/checks.md``: each
English message on an ``en:`` line, its translation on the ``ja:`` line after it. A message
written as an f-string is listed as its template (``{cost_now}`` where the value goes), and the
translation keeps the same placeholders where its grammar puts them.

Reading the catalogue is all the learner's library needs; which messages still lack a
translation is a maintainers' question (``python -m course_tools translation messages ja``,
``course_tools/translation/messages.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from course_lib.config import COURSE_ROOT

TRANSLATIONS = "translations"  # the folder of the catalogues, one subfolder per language


CHECKS = "checks.md"  # the check messages; ``plots.md`` beside it holds the figures' words (same format)


def catalogue_path(language: str, root: Path = COURSE_ROOT, name: str = CHECKS) -> Path:
    return root / TRANSLATIONS / language / name


def template_parts(template: str) -> tuple[list[str], list[str]]:
    """A message template's fixed texts and the placeholders between them, as an f-string
    reads: ``"{n} of {total} passed"`` is ``(["", " of ", " passed"], ["n", "total"])``;
    ``{{`` and ``}}`` are a brace. There is always one more fixed text than placeholders."""
    texts, names, current, index = [], [], "", 0
    while index < len(template):
        two = template[index:index + 2]
        if two in ("{{", "}}"):
            current += two[0]
            index += 2
        elif template[index] == "{":
            depth, end = 1, index + 1
            while end < len(template) and depth:
                depth += {"{": 1, "}": -1}.get(template[end], 0)
                end += 1
            if depth:
                raise ValueError(f"an unclosed {{ in the message {template!r}")
            texts.append(current)
            names.append(template[index + 1:end - 1])
            current, index = "", end
        else:
            current += template[index]
            index += 1
    texts.append(current)
    return texts, names


def parse(text: str, name: str = "checks.md") -> dict[str, str]:
    """The pairs of a message catalogue's ``text``: English template to translated template."""
    pairs: dict[str, str] = {}
    lines = text.replace("\r\n", "\n").rstrip("\n").split("\n")
    english: tuple[str, int] | None = None
    for number, line in enumerate(lines, start=1):
        if english is None:
            if not line.strip() or line.startswith("#"):
                continue
            if not line.startswith("en: "):
                raise ValueError(f"{name}, line {number}: expected `en: ` and an English message, a `# heading` "
                                 f"or a blank line, not {line[:60]!r}")
            text_en = line[4:].rstrip()
            if text_en in pairs:
                raise ValueError(f"{name}, line {number}: {text_en!r} is given twice")
            english = (text_en, number)
            continue
        if not line.startswith("ja: ") or not line[4:].strip():
            raise ValueError(f"{name}, line {number}: the English message on line {english[1]} needs its "
                             "translation on the next line, as `ja: ...`")
        translated = line[4:].rstrip()
        try:
            wanted, given = sorted(set(template_parts(english[0])[1])), sorted(set(template_parts(translated)[1]))
        except ValueError as problem:
            raise ValueError(f"{name}, line {number}: {problem}") from None
        if wanted != given:
            raise ValueError(f"{name}, line {number}: the translation's placeholders {given} are not the "
                             f"English message's {wanted} (line {english[1]})")
        pairs[english[0]] = translated
        english = None
    if english is not None:
        raise ValueError(f"{name}, line {english[1]}: the English message has no `ja: ` line after it")
    return pairs


def filled(text: str, english: str, translated: str, value: Callable[[str], str] = str) -> str | None:
    """``translated`` with the values ``text`` holds where the template ``english`` has its
    placeholders (each passed through ``value``), if ``text`` is ``english`` with some values in
    them; else None."""
    texts, names = template_parts(english)
    if not names:
        return template_parts(translated)[0][0] if text == texts[0] else None
    if not (text.startswith(texts[0]) and text.endswith(texts[-1]) and len(text) >= len(texts[0]) + len(texts[-1])):
        return None
    values: dict[str, str] = {}
    start, end = len(texts[0]), len(text) - len(texts[-1])
    for name, following in zip(names, texts[1:-1]):
        found = text.find(following, start, end)
        if found < 0:
            return None
        values.setdefault(name, text[start:found])
        start = found + len(following)
    values.setdefault(names[-1], text[start:end])
    parts, wanted = template_parts(translated)
    return parts[0] + "".join((value(values[name]) if name in values else "{" + name + "}") + part
                              for name, part in zip(wanted, parts[1:]))


def translation_of(text: str, messages: dict[str, str], value: Callable[[str], str] = str) -> str | None:
    """``text`` in the catalogue's language: its translation if ``messages`` has ``text`` itself,
    else the longest template it fills, with its values put where the translation wants them
    (``"1 of 3 passed"`` by ``{n} of {total} passed``), each value passed through ``value``; None
    if the catalogue has neither."""
    exact = messages.get(text.replace("{", "{{").replace("}", "}}"))
    if exact is not None:
        return template_parts(exact)[0][0]
    templates = sorted((english for english in messages if "{" in english.replace("{{", "")),
                       key=lambda english: -len("".join(template_parts(english)[0])))
    for english in templates:
        result = filled(text, english, messages[english], value)
        if result is not None:
            return result
    return None


def translate(text: str, messages: dict[str, str], value: Callable[[str], str] = str) -> str:
    """``translation_of`` ``text``, or ``text`` as it is where the catalogue has no translation."""
    found = translation_of(text, messages, value)
    return text if found is None else found


def translations(language: str, root: Path = COURSE_ROOT, name: str = CHECKS) -> dict[str, str]:
    """The catalogue ``name`` of ``language`` (empty for English, or when there is none yet)."""
    path = catalogue_path(language, root, name)
    if language == "en" or not path.is_file():
        return {}
    return parse(path.read_text(encoding="utf-8"), f"{TRANSLATIONS}/{language}/{name}")
