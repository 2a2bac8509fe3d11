"""The lessons' self-checks: the instructors' checks for understanding, read from the kit's one file."""

from pathlib import Path

import pytest

from course_lib.config import COURSE_ROOT
from course_lib.self_check import CHECKS, parse, questions_for, self_check

KIT = COURSE_ROOT / CHECKS


def test_every_lesson_in_the_kit_is_a_notebook_and_every_question_has_an_answer():
    lessons = parse(KIT.read_text(encoding="utf-8"))
    assert len(lessons) >= 13
    for notebook, (title, questions) in lessons.items():
        assert (COURSE_ROOT / "notebooks" / notebook).is_file(), notebook
        assert title.startswith("Lesson") and 3 <= len(questions) <= 6, (notebook, len(questions))
        for question in questions:
            assert question.question.endswith("?") or question.question.endswith("."), question
            assert len(question.answer) > 10 and not question.answer.startswith("*"), question


def test_a_lesson_is_named_by_its_number_or_its_notebook():
    title, questions = questions_for("03")
    assert title == "Lesson 3 · Declaring tools and answering calls"
    assert questions[0].question == "Who runs `calc`, the model or the agent?"
    assert questions[0].answer.startswith("The agent; the model can only ask")
    assert questions_for("03_tool_calls.ipynb") == (title, questions)
    with pytest.raises(KeyError, match="no single lesson '9'"):
        questions_for("9")


def test_an_answer_shows_only_after_the_learner_wrote_one():
    check = self_check("01")
    rows = check.box.children
    box, button, shown = rows[2], rows[3], rows[4]
    button.click()
    assert "Write your answer first" in shown.value
    box.value = "nanoseconds"
    button.click()
    assert "tokens/s" in shown.value
    assert "<code>eval_count</code>" not in rows[1].value and "<code>" in rows[1].value  # a question's `code`
    assert str(check).splitlines()[0] == "Check yourself: Lesson 1 · The wire"
    assert len(str(check).splitlines()) == 1 + len(check.questions)


def test_the_parser_reads_the_kits_format(tmp_path: Path):
    kit = tmp_path / "kit.md"
    kit.write_text("# Checks\n\nIntro *not a question*.\n\n## [Lesson 1 · X](../../notebooks/01_x.ipynb)\n\n"
                   "1. Why `a`? *Because `b`,\n   over two lines (section 2).*\n"
                   "2. What is **bold**? <!-- worked example --> *The answer.*\n\n## Other heading\n\n"
                   "1. Not a lesson's? *Left out.*\n", encoding="utf-8")
    assert parse(kit.read_text()) == {"01_x.ipynb": ("Lesson 1 · X", [
        questions_for("01", kit)[1][0], questions_for("01", kit)[1][1]])}
    first, second = questions_for("01", kit)[1]
    assert (first.question, first.answer) == ("Why `a`?", "Because `b`, over two lines (section 2).")
    assert (second.question, second.answer) == ("What is **bold**?", "The answer.")


def test_in_a_japanese_kernel_the_questions_and_the_widgets_are_japanese(monkeypatch):
    """COURSE_LANG=ja: the kit's translation (docs/instructors/checks-for-understanding.ja.md),
    the same lessons and the same number of questions, and the widgets' words in Japanese."""
    english = parse(KIT.read_text(encoding="utf-8"))
    monkeypatch.setenv("COURSE_LANG", "ja")
    title, questions = questions_for("03")
    assert title.startswith("第 3 回")
    assert questions[0].question == "`calc` を実行するのは、モデルですか、エージェントですか?"
    japanese = {Path(name).name: lesson for name, lesson in
                parse(KIT.with_name("checks-for-understanding.ja.md").read_text(encoding="utf-8")).items()}
    assert {name: len(q) for name, (_, q) in japanese.items()} == {name: len(q) for name, (_, q) in english.items()}
    check = self_check("01")
    assert str(check).startswith("理解度の確認: 第 1 回")
    rows = check.box.children
    box, button, shown = rows[2], rows[3], rows[4]
    assert button.description == "コースの答えを見る"
    button.click()
    assert "まず自分の答えを書いて" in shown.value
    box.value = "ナノ秒"
    button.click()
    assert "20.6 tokens/s" in shown.value
