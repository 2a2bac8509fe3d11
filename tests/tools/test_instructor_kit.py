"""The instructor's kit (docs/instructors/, .devcontainer/) says what the course does: its agendas'
minutes are the ones course_tools.lesson_plan computes, its links lead somewhere, the setup mail
quotes course.py's own check lines, and the devcontainer runs commands course.py has."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from course_tools import lesson_plan

pytestmark = pytest.mark.release  # the kit's words checked against the course: a reworded README can fail them

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "docs" / "instructors"
AGENDAS = ["agenda-1-day.md", "agenda-2-day.md", "agenda-1-day.ja.md", "agenda-2-day.ja.md"]
ROW = re.compile(r"^\| (\d\d):(\d\d) \| (.+?) \| (.+?) \| (.+?) \| (.+?) \| (\d+) \|$")
# A lesson's row names it as "[Lesson 4 · ...](...)", in Japanese "[第 4 回 · ...](...)"
LESSON_ROW = {"en": re.compile(r"\[Lesson (\d+[ab]?) ·"), "ja": re.compile(r"\[第 (\d+[ab]?) 回 ·")}
WORDS = {"en": {"of": " of ", "quick": "(quick)", "none": "none", "instructor": "Instructor:"},
         "ja": {"of": " / ", "quick": "(クイック)", "none": "なし", "instructor": "講師:"}}


@pytest.fixture(scope="module")
def lessons():
    return {lesson.number: lesson for lesson in lesson_plan.lessons(ROOT)}


def timetables(text: str) -> list[list[re.Match]]:
    """Each table of timed rows in an agenda, as its rows."""
    tables: list[list[re.Match]] = [[]]
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            tables[-1].append(match)
        elif tables[-1]:
            tables.append([])
    return [table for table in tables if table]


def language_of(agenda: str) -> str:
    return "ja" if agenda.endswith(".ja.md") else "en"


def expected_row(match: re.Match, lesson: lesson_plan.Lesson, language: str = "en") -> str:
    """The row as lesson_plan's numbers make it, keeping the agenda's choice of exercises and quick
    mode; a Japanese agenda's reading is its lessons' Japanese text (``lesson_plan --lang ja``)."""
    words = WORDS[language]
    quick = words["quick"] in match.group(5)
    done = int(match.group(6).split(words["of"])[0]) if lesson.exercises else 0
    exercises = f"{done}{words['of']}{lesson.exercises}" if lesson.exercises else words["none"]
    running = f"{lesson.run_seconds(quick) / 60:.1f}" + (f" {words['quick']}" if quick else "")
    reading = lesson.words / 200 if language == "en" else lesson_plan.translated_reading(lesson, language, ROOT)
    minutes = lesson.minutes(quick=quick, exercises=done, reading=None if language == "en" else reading)
    return (f"| {match.group(1)}:{match.group(2)} | {match.group(3)} | {reading:.1f} | {running} "
            f"| {exercises} | {minutes} |")


@pytest.mark.parametrize("agenda", AGENDAS)
def test_every_lesson_row_has_the_measured_minutes_and_the_clock_adds_up(agenda, lessons):
    language = language_of(agenda)
    tables = timetables((KIT / agenda).read_text(encoding="utf-8"))
    assert len(tables) == (1 if "1-day" in agenda else 2)
    seen = 0
    for table in tables:
        for row, following in zip(table, table[1:]):
            start = int(row.group(1)) * 60 + int(row.group(2))
            assert int(following.group(1)) * 60 + int(following.group(2)) == start + int(row.group(7)), (
                f"{agenda}: {following.group(3)} should start {row.group(7)} minutes after {row.group(3)}")
        for row in table:
            number = LESSON_ROW[language].search(row.group(3))
            if number is None:
                assert row.group(4) == row.group(5) == row.group(6) == "–", row.group(0)
                continue
            seen += 1
            lesson = lessons[number.group(1)]
            folder = "notebooks" if language == "en" else f"notebooks/{language}"
            assert f"(../../{folder}/{lesson.path.name})" in row.group(3)
            expected = expected_row(row, lesson, language)
            assert row.group(0) == expected, f"{agenda}: lesson {lesson.number}'s numbers changed; now:\n{expected}"
    assert seen >= 10


# The one-day agenda ends by 17:00; the Japanese one reads the same lessons at 500 characters a
# minute (about 45 minutes more), and says so, ending by 18:00.
ENDS_BY = {"agenda-1-day.md": 17 * 60, "agenda-1-day.ja.md": 18 * 60}


@pytest.mark.parametrize("agenda", sorted(ENDS_BY))
def test_the_one_day_runs_the_core_path_from_9_with_the_instructors_time_after_each_lesson(agenda):
    words = WORDS[language_of(agenda)]
    (table,) = timetables((KIT / agenda).read_text(encoding="utf-8"))
    held = [LESSON_ROW[language_of(agenda)].search(row.group(3)) for row in table]
    assert [match.group(1) for match in held if match] == list(lesson_plan.CORE)
    for row, match, following in zip(table, held, table[1:]):
        if match:
            assert following.group(3).startswith(words["instructor"]) and int(following.group(7)) >= 5, row.group(3)
    first, last = table[0], table[-1]
    assert (first.group(1), first.group(2)) == ("09", "00")
    assert int(last.group(1)) * 60 + int(last.group(2)) + int(last.group(7)) <= ENDS_BY[agenda]


@pytest.mark.parametrize("agenda", ["agenda-2-day.md", "agenda-2-day.ja.md"])
def test_the_two_days_hold_every_lesson_but_9b(agenda, lessons):
    pattern = LESSON_ROW[language_of(agenda)]
    rows = [row for table in timetables((KIT / agenda).read_text(encoding="utf-8")) for row in table]
    held = {match.group(1) for row in rows if (match := pattern.search(row.group(3)))}
    assert held == set(lessons) - {"9b"}


def markdown_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation dropped, spaces to dashes."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", sorted(path.name for path in KIT.glob("*.md")))
def test_every_link_of_the_kit_leads_somewhere(page):
    links = [link for link in markdown_links(KIT / page) if not link.startswith(("http://", "https://"))]
    assert links, f"{page} links nowhere"
    for link in links:
        target, _, anchor = link.partition("#")
        path = (KIT / target).resolve() if target else KIT / page
        assert path.exists(), f"{page}: {link} leads to no file"
        if anchor and path.suffix == ".md" and path.parent == KIT:
            assert anchor in heading_anchors(path), f"{page}: {link} leads to no heading"


def test_the_kit_is_linked_from_the_readme_and_the_index_lists_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/instructors/README.md)" in readme
    index = markdown_links(KIT / "README.md")
    english = {path.name for path in KIT.glob("*.md") if "." not in path.stem}
    assert english - {"README.md"} <= set(index) and "README.ja.md" in index
    japanese = {path.name for path in KIT.glob("*.ja.md")}
    assert japanese - {"README.ja.md"} <= set(markdown_links(KIT / "README.ja.md"))


@pytest.mark.parametrize("mail", ["setup-mail.md", "setup-mail.ja.md"])
def test_the_setup_mail_quotes_the_lines_course_py_check_prints(mail):
    mail = (KIT / mail).read_text(encoding="utf-8")
    script = (ROOT / "course.py").read_text(encoding="utf-8")
    quoted = re.findall(r"^\[OK\] (.+)$", mail, re.MULTILINE)
    assert len(quoted) == 5
    labels = ["Python 3.10 or newer", "a C and C++ compiler (to build llama-cpp-python)", "course packages installed"]
    for label in labels:
        assert label in quoted and f'"{label}' in script, label
    assert "(.venv/, made by course.py)" in quoted[2] and "made by course.py" in script
    assert quoted[4].startswith("the model qwen2.5-coder:0.5b fetched; source: ")


def test_the_devcontainer_runs_commands_course_py_has():
    config = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text(encoding="utf-8"))
    assert re.search(r"/python:\d+-3\.11-", config["image"])
    spec = importlib.util.spec_from_file_location("course_script_kit", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)
    for key in ("postCreateCommand", "postAttachCommand"):
        words = config[key].split()
        assert words[:2] == ["python3", "course.py"], config[key]
        assert course.command_line().parse_args(words[2:]).command == words[2], config[key]
    assert config["postCreateCommand"] == "python3 course.py setup"
    lab = config["postAttachCommand"].split()
    assert lab[2] == "lab" and "--no-browser" in lab
    assert int(lab[lab.index("--port") + 1]) in config["forwardPorts"]
    assert config["hostRequirements"]["cpus"] >= 2 and config["hostRequirements"]["memory"].endswith("gb")
