"""A lesson's self-check: the instructors' checks for understanding, answered in the notebook.

The questions an instructor asks the room at the end of a lesson
(``docs/instructors/checks-for-understanding.md``) are the same ones a learner working alone
answers here, read from that one file, so the kit and the lessons cannot drift apart (in a
Japanese notebook's kernel, ``COURSE_LANG=ja``, from its translation,
``docs/instructors/checks-for-understanding.ja.md``)::

    from course_lib.self_check import self_check
    self_check("03")  # lesson 3's questions

Each question gets a box for the learner's own answer and a button; the course's answer (with
the section of the lesson it comes from) shows only after the learner has written something
and pressed it. Nothing is graded: the point is to answer before reading.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_lib.config import course_file, course_language
from course_lib.display.words import say

CHECKS = "docs/instructors/checks-for-understanding.md"  # from the course's top folder (``course_file``)
LESSON_HEADING = re.compile(r"^## \[(?P<title>[^\]]+)\]\(\.\./\.\./notebooks/(?P<notebook>[^)]+)\)\s*$")
QUESTION = re.compile(r"^(\d+)\.\s+(.*)$")
ANSWER = re.compile(r"(?<!\*)\*(?![\s*])(.+?)(?<![\s*])\*(?!\*)", re.DOTALL)  # the *emphasised* answer, not **bold**


@dataclass(frozen=True)
class Question:
    """One check: the question, and the course's answer to it."""

    question: str
    answer: str


def _clean(text: str) -> str:
    return " ".join(re.sub(r"<!--.*?-->", "", text).split())


def as_html(text: str) -> str:
    """The kit's Markdown as HTML: escaped, with its `code` spans as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))


def parse(text: str) -> dict[str, tuple[str, list[Question]]]:
    """The kit's questions by lesson notebook (``03_tool_calls.ipynb``): its title and questions.

    A question is a numbered item; its answer is the item's last ``*emphasised*`` span."""
    lessons: dict[str, tuple[str, list[Question]]] = {}
    current: list[Question] | None = None
    item: list[str] = []

    def close() -> None:
        if current is not None and item:
            whole = re.sub(r"<!--.*?-->", "", " ".join(item))
            answers = list(ANSWER.finditer(whole))
            if not answers:
                raise ValueError(f"checks for understanding: no *answer* in {whole[:80]!r}")
            last = answers[-1]
            current.append(Question(_clean(whole[:last.start()]), _clean(last.group(1))))
        item.clear()

    for line in text.splitlines():
        heading = LESSON_HEADING.match(line)
        if heading or line.startswith("#"):
            close()
            current = None
            if heading:
                current = []
                lessons[heading["notebook"]] = (heading["title"], current)
            continue
        numbered = QUESTION.match(line)
        if numbered and current is not None:
            close()
            item.append(numbered.group(2))
        elif item and line.strip():
            item.append(line.strip())
        elif not line.strip():
            close()
    close()
    return lessons


def questions_for(lesson: str, path: Path | None = None) -> tuple[str, list[Question]]:
    """The title and questions of ``lesson``: its notebook's name or the start of it (``"03"``), in
    the kernel's edition (the Japanese kit links ``notebooks/ja/03_tool_calls.ipynb``)."""
    path = path or checks_file()
    lessons = {Path(name).name: questions for name, questions in parse(path.read_text(encoding="utf-8")).items()}
    found = [name for name in lessons if name == lesson or name.startswith(f"{lesson}_")]
    if len(found) != 1:
        raise KeyError(f"no single lesson {lesson!r} in {path.name}: it has {', '.join(lessons)}")
    return lessons[found[0]]


def checks_file() -> Path:
    """The checks for understanding in this kernel's edition: the translation where there is one."""
    english = course_file(CHECKS)
    translated = english.with_name(f"{english.stem}.{course_language()}.md")
    return translated if course_language() != "en" and translated.is_file() else english


def self_check(lesson: str, path: Path | None = None) -> Any:
    """Show ``lesson``'s questions, each with an answer box and a button that reveals the course's
    answer once something is written; returns the widget (its text form lists the questions)."""
    import ipywidgets as widgets

    title, questions = questions_for(lesson, path)
    rows: list[Any] = [widgets.HTML(say("check yourself", title=html.escape(title)))]
    for number, question in enumerate(questions, start=1):
        box = widgets.Textarea(placeholder=say("your answer"), layout=widgets.Layout(width="95%", height="3.5em"))
        button = widgets.Button(description=say("show answer"), layout=widgets.Layout(width="auto"))
        shown = widgets.HTML()

        def reveal(_: Any, box: Any = box, shown: Any = shown, answer: str = question.answer) -> None:
            if not box.value.strip():
                shown.value = f"<i>{say('answer first')}</i>"
            else:
                shown.value = f"<div style='border-left: 3px solid #4a8; padding-left: 8px'>{as_html(answer)}</div>"

        button.on_click(reveal)
        rows += [widgets.HTML(f"<p>{number}. {as_html(question.question)}</p>"), box, button, shown]
    return SelfCheck(rows, title, questions)


class SelfCheck:
    """The widgets of a self-check, shown as a column; in plain text, the questions alone."""

    def __init__(self, rows: list[Any], title: str, questions: list[Question]) -> None:
        import ipywidgets as widgets

        self.box = widgets.VBox(rows)
        self.title, self.questions = title, questions

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = self.box._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/plain"] = str(self)
        return bundle

    def __str__(self) -> str:
        lines = [say("check yourself plain", title=self.title)]
        lines += [f"{number}. {question.question}" for number, question in enumerate(self.questions, start=1)]
        return "\n".join(lines)
