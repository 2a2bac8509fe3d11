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
AGENDAS = ["agenda-1-day.md", "agenda-2-day.md"]
ROW = re.compile(r"^\| (\d\d):(\d\d) \| (.+?) \| (.+?) \| (.+?) \| (.+?) \| (\d+) \|$")


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


def expected_row(match: re.Match, lesson: lesson_plan.Lesson) -> str:
    """The row as lesson_plan's numbers make it, keeping the agenda's choice of exercises and quick mode."""
    quick = "(quick)" in match.group(5)
    done = int(match.group(6).split(" of ")[0]) if lesson.exercises else 0
    exercises = f"{done} of {lesson.exercises}" if lesson.exercises else "none"
    running = f"{lesson.run_seconds(quick) / 60:.1f}" + (" (quick)" if quick else "")
    return (f"| {match.group(1)}:{match.group(2)} | {match.group(3)} | {lesson.words / 200:.1f} | {running} "
            f"| {exercises} | {lesson.minutes(quick=quick, exercises=done)} |")


@pytest.mark.parametrize("agenda", AGENDAS)
def test_every_lesson_row_has_the_measured_minutes_and_the_clock_adds_up(agenda, lessons):
    tables = timetables((KIT / agenda).read_text(encoding="utf-8"))
    assert len(tables) == (1 if "1-day" in agenda else 2)
    seen = 0
    for table in tables:
        for row, following in zip(table, table[1:]):
            start = int(row.group(1)) * 60 + int(row.group(2))
            assert int(following.group(1)) * 60 + int(following.group(2)) == start + int(row.group(7)), (
                f"{agenda}: {following.group(3)} should start {row.group(7)} minutes after {row.group(3)}")
        for row in table:
            number = re.search(r"\[Lesson (\d+[ab]?) ·", row.group(3))
            if number is None:
                assert row.group(4) == row.group(5) == row.group(6) == "–", row.group(0)
                continue
            seen += 1
            lesson = lessons[number.group(1)]
            assert f"(../../notebooks/{lesson.path.name})" in row.group(3)
            expected = expected_row(row, lesson)
            assert row.group(0) == expected, f"{agenda}: lesson {lesson.number}'s numbers changed; now:\n{expected}"
    assert seen >= 10


INSTRUCTOR = "Instructor:"  # a block's own row for the instructor: the idea in their words, a demo, questions


def test_the_one_day_runs_the_core_path_from_9_to_17_with_the_instructors_time_after_each_lesson():
    (table,) = timetables((KIT / "agenda-1-day.md").read_text(encoding="utf-8"))
    held = [re.search(r"\[Lesson (\d+[ab]?) ·", row.group(3)) for row in table]
    assert [match.group(1) for match in held if match] == list(lesson_plan.CORE)
    for row, match, following in zip(table, held, table[1:]):
        if match:
            assert following.group(3).startswith(INSTRUCTOR) and int(following.group(7)) >= 5, row.group(3)
    first, last = table[0], table[-1]
    assert (first.group(1), first.group(2)) == ("09", "00")
    assert int(last.group(1)) * 60 + int(last.group(2)) + int(last.group(7)) <= 17 * 60


def test_the_two_days_hold_every_lesson_but_9b(lessons):
    text = (KIT / "agenda-2-day.md").read_text(encoding="utf-8")
    held = {match.group(1) for match in re.finditer(r"^\| \d\d:\d\d \| \[Lesson (\d+[ab]?) ·", text, re.MULTILINE)}
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
    assert {path.name for path in KIT.glob("*.md")} - {"README.md"} <= set(index)


def test_the_setup_mail_quotes_the_lines_course_py_check_prints():
    mail = (KIT / "setup-mail.md").read_text(encoding="utf-8")
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
