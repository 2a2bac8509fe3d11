"""The numbers behind the instructors' agendas (course_tools/lesson_plan.py): counted and read right,
and the README's measured run times still the ones the agendas cite."""

from pathlib import Path

import nbformat
import pytest

from course_tools import lesson_plan

ROOT = Path(__file__).resolve().parents[2]


def timed_code(source: str, start: str, end: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": end}
    return cell


def test_sections_count_words_code_and_seconds():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Lesson 0 · A title\n\nFour words of prose."),
        timed_code("x = 1", "2026-01-01T10:00:00.000000Z", "2026-01-01T10:00:02.500000Z"),
        nbformat.v4.new_markdown_cell("Some text.\n\n## 1. Second part\n\n| a | b |\n| --- | --- |\n"
                                      "```bash\n# not a heading\n```"),
        timed_code("print(x)", "2026-01-01T10:00:03Z", "2026-01-01T10:01:03Z"),
        nbformat.v4.new_code_cell("never run"),
    ])
    first, second = lesson_plan.sections_of(notebook)
    assert first.title == "Lesson 0 · A title" and second.title == "1. Second part"
    # a word has a letter or a digit: "#", "·", "=", "|" and "---" are none
    assert (first.prose_words, first.code_words, first.code_cells, first.seconds) == (4 + 4 + 2, 2, 1, 2.5)
    # "1. Second part" 3, "a" and "b" 2, "```bash" 1, "not a heading" 3
    assert (second.prose_words, second.code_words, second.code_cells, second.seconds) == (9, 1 + 2, 2, 60.0)


@pytest.mark.release
def test_a_lesson_is_measured_from_its_notebook_and_its_solutions():
    readme = lesson_plan.readme_run_times((ROOT / lesson_plan.RUN_TIMES_PAGE).read_text(encoding="utf-8"))
    lesson = lesson_plan.measure(ROOT / "notebooks" / "01_the_wire.ipynb", readme)
    notebook = nbformat.read(lesson.path, as_version=4)
    assert lesson.number == "1" and lesson.title.startswith("Lesson 1 · The wire")
    assert lesson.code_cells == sum(cell.cell_type == "code" for cell in notebook.cells)
    assert lesson.exercises == 4 and lesson.solution_lines > 4
    assert lesson.readme_seconds == 29 and lesson.readme_quick_seconds is None
    assert 0 < lesson.seconds < 120 and lesson.stated == str(lesson.minutes(200, 10))
    reading, running = lesson.words / 200, max(lesson.seconds, 29) / 60
    assert lesson.minutes(200, 10) == -(-(reading + running + 40) // 1)


def test_the_quick_run_replaces_the_full_one_where_the_readme_measured_it():
    lesson = lesson_plan.Lesson("8", Path("08_x.ipynb"), "Lesson 8", None,
                                [lesson_plan.Section("all", prose_words=400, seconds=700.0)],
                                exercises=1, readme_seconds=739, readme_quick_seconds=180)
    assert lesson.run_seconds() == 739 and lesson.run_seconds(quick=True) == 180
    assert lesson.minutes(200, 10) == 2 + 13 + 10  # 12.3 minutes of running, rounded up with the rest
    assert lesson.minutes(200, 10, quick=True) == 2 + 3 + 10


@pytest.mark.release
def test_every_lesson_in_order_with_9a_and_9b_after_9():
    numbers = [lesson.number for lesson in lesson_plan.lessons(ROOT)]
    assert numbers == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "9a", "9b", "10", "11", "12", "13"]


@pytest.mark.release
def test_an_appendix_is_no_lesson_and_a_misnamed_notebook_is_an_error(tmp_path):
    assert [path.name for path in lesson_plan.appendices(ROOT)] == ["appendix_under_the_hood.ipynb"]
    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    (course / "docs").mkdir()
    (course / lesson_plan.RUN_TIMES_PAGE).write_text((ROOT / lesson_plan.RUN_TIMES_PAGE).read_text(encoding="utf-8"),
                                                     encoding="utf-8")
    for name in ("01_the_wire.ipynb", "09a_defense_table.ipynb", "appendix_under_the_hood.ipynb"):
        (course / "notebooks" / name).write_bytes((ROOT / "notebooks" / name).read_bytes())
    assert [lesson.number for lesson in lesson_plan.lessons(course)] == ["1", "9a"]
    assert lesson_plan.appendices(course) == [course / "notebooks" / "appendix_under_the_hood.ipynb"]
    (course / "notebooks" / "9c notes.ipynb").write_bytes((ROOT / "notebooks" / "01_the_wire.ipynb").read_bytes())
    for listing in (lesson_plan.lessons, lesson_plan.appendices):
        with pytest.raises(ValueError, match="notebooks/9c notes.ipynb is named neither like a lesson"):
            listing(course)


@pytest.mark.release
def test_a_run_time_the_readme_no_longer_says_is_an_error():
    readme = (ROOT / lesson_plan.RUN_TIMES_PAGE).read_text(encoding="utf-8")
    lesson_plan.readme_run_times(readme)  # today's page says all of them
    with pytest.raises(ValueError, match="docs/teaching.md no longer says 'Lesson 10 takes about 2.5 minutes'"):
        lesson_plan.readme_run_times(readme.replace("Lesson 10 takes about 2.5 minutes", "Lesson 10 takes 3 minutes"))


@pytest.mark.release
def test_the_command_prints_a_row_per_lesson(capsys):
    assert lesson_plan.main(["--wpm", "150"]) == 0
    out = capsys.readouterr().out
    rows = len(lesson_plan.lessons(ROOT))
    assert out.count("\n| ") == 2 + rows - 1 and "reading at 150 words a minute" in out
    assert "| 9a · The defense table" in out and "| 9b · AgentDojo itself" in out
    assert "appendix, not timed for an agenda: appendix_under_the_hood.ipynb, " in out
    with pytest.raises(SystemExit):
        lesson_plan.main(["--wpm", "0"])


@pytest.mark.release
def test_every_lesson_ends_its_first_cell_with_its_current_time_line():
    stale = []
    for lesson in lesson_plan.lessons(ROOT):
        first = nbformat.read(lesson.path, as_version=4).cells[0].source
        if not first.endswith(lesson.time_line()) or first.count("**Time:**") != 1:
            stale.append(f"{lesson.path.name}: should end with {lesson.time_line()!r}")
    assert not stale, "run `python -m course_tools lesson_plan --write-times`:\n" + "\n".join(stale)


def test_a_time_line_says_where_its_minutes_come_from_and_its_place_on_the_core_path():
    lesson = lesson_plan.Lesson("3", Path("03_x.ipynb"), "Lesson 3", None,
                                [lesson_plan.Section("all", prose_words=1900, seconds=130.0)], exercises=3)
    assert lesson.core_exercises == 1
    assert lesson.time_line() == ("**Time:** about 42 minutes: 9 of reading, 3 of running the cells and 30 for the "
                                  "3 exercises; on the core path, with exercise 1 only, about 22 (estimated by "
                                  "`python -m course_tools lesson_plan`: 200 words a minute, the measured run, "
                                  "10 minutes an exercise).")
    lesson.number = "8"
    assert "30 for the 3 exercises; a deep dive, not on the core path (estimated" in lesson.time_line()
    lesson.number, lesson.exercises = "11", 1
    assert "10 for the 1 exercise; all of it on the core path (estimated" in lesson.time_line()
    lesson.exercises = 0
    assert lesson.time_line().startswith("**Time:** about 12 minutes: 9 of reading and 3 of running the cells "
                                         "(no exercises); ")


@pytest.mark.release
def test_the_core_path_fits_a_day_of_self_study():
    found = lesson_plan.lessons(ROOT)
    for lesson in found:
        assert lesson.core_exercises is None or 0 <= lesson.core_exercises <= lesson.exercises, lesson.number
    assert set(lesson_plan.CORE) <= {lesson.number for lesson in found}
    assert lesson_plan.core_minutes(found) <= lesson_plan.CORE_LIMIT == 360


@pytest.mark.release
def test_every_seed_concept_is_first_taught_in_a_core_lesson():
    """docs/concepts.md's first lesson for each concept (the one before a semicolon) is on the
    core path: a learner who walks only the core meets every concept of the seed articles."""
    import re

    rows = [line for line in (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and "notebooks/" in line]
    assert len(rows) > 60
    outside = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        first = re.search(r"notebooks/(\d+[ab]?)_\w+\.ipynb", cells[2].split(";")[0])
        if first and first.group(1).lstrip("0") not in lesson_plan.CORE:
            outside.append(f"{cells[0]}: lesson {first.group(1)}")
    assert not outside, "first taught outside the core path:\n" + "\n".join(outside)


@pytest.mark.release
def test_the_readmes_give_the_japanese_editions_core_minutes_as_counted():
    """The Japanese edition's lessons are read at ``CHARACTERS_PER_MINUTE['ja']``: its core takes
    longer than the English 360 at most, and both READMEs say by how much."""
    minutes = lesson_plan.translated_core_minutes(lesson_plan.lessons(), "ja")
    english = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"500 characters a minute, which makes its core about {minutes} minutes" in english
    assert f"コアパスは約 {minutes} 分" in (ROOT / "README.ja.md").read_text(encoding="utf-8")


def test_the_japanese_minutes_are_a_row_per_lesson_read_at_500_characters_a_minute(capsys):
    assert lesson_plan.main(["--lang", "ja"]) == 0
    out = capsys.readouterr().out
    found = lesson_plan.lessons()
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[0][2:] for row in rows] == [lesson.number for lesson in found]
    first = found[0]
    reading = lesson_plan.translated_reading(first, "ja")
    assert rows[0].startswith(f"| 1 | {reading:.1f} | ") and reading > first.words / lesson_plan.WORDS_PER_MINUTE
    assert f"core path: {lesson_plan.translated_core_minutes(found, 'ja')} minutes" in out
