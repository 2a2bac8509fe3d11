"""The Japanese edition: its catalogues read strictly, its files built from the English ones and
kept current, its check messages and its grading report in Japanese, and the course files a code
cell names from any folder.

The first tests work on a small course of their own in a temporary folder; the last ones
(from "The course's own edition") check the repository: every English unit has a current
translation, the committed Japanese files are what ``build`` writes, their links resolve, every
check message is translated, and no code cell names a course file relative to its own folder.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import polib
import pytest

from course_grading import grading
from course_grading.exercises import STUB, stub
from course_grading.exercises import build as build_exercises
from course_grading.grading import Result, format_report, grade, language_of, sections
from course_lib import checks
from course_lib.check_messages import parse as parse_messages
from course_lib.config import course_file, course_language
from course_tools.translation.build import built
from course_tools.translation.catalogue import Block, CatalogueError, parse
from course_tools.translation.cli import main, status_lines
from course_tools.translation.links import broken, moved, relative_links
from course_tools.translation.messages import message_status, messages_in, skeleton
from course_tools.translation.sources import source_for, sources
from course_tools.translation.status import survey
from course_tools.translation.units import markdown_sections, notebook_units, slug, text_hash, units_of

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------
# Units and their hashes
# --------------------------------------------------------------------------------------

def test_a_unit_is_named_by_the_first_12_hex_digits_of_the_sha256_of_its_text():
    assert text_hash("abc") == "ba7816bf8f01"  # SHA-256("abc") = ba7816bf8f01cfea...
    assert text_hash("# 第 1 回") != text_hash("# 第 1 回 ")


def test_readme_sections_are_cut_at_headings_outside_fences_and_named_by_slugs():
    text = ("Before any heading.\n\n# Tool calling, from the wire up!\n\nIntro.\n\n## Start\n\n```bash\n"
            "# a comment in a fence, not a heading\n```\n\n## Start\n\nAgain.\n### Using_conda & pip\n")
    units = markdown_sections(text)
    assert [unit.id for unit in units] == ["top", "tool-calling-from-the-wire-up", "start", "start-2",
                                           "using-conda-pip"]
    assert "".join(unit.text for unit in units) == text, "the sections are the file, cut"
    assert units[2].text.startswith("## Start\n") and "# a comment in a fence" in units[2].text
    assert slug("## For maintainers: updating a translation") == "for-maintainers-updating-a-translation"


def test_a_notebooks_units_are_its_markdown_cells_by_id():
    notebook = course_notebook([markdown("a", "# Title\n\nText."), code("b", "print(1)", "1\n"), markdown("c", "End.")])
    assert [(unit.id, unit.text) for unit in notebook_units(notebook)] == [("a", "# Title\n\nText."), ("c", "End.")]
    notebook["cells"].append(markdown("a", "again"))
    with pytest.raises(ValueError, match="two units of the notebook are named 'a'"):
        notebook_units(notebook)


# --------------------------------------------------------------------------------------
# The catalogue, read strictly
# --------------------------------------------------------------------------------------

def test_a_catalogue_is_blocks_each_opened_by_a_marker():
    text = ("<!-- cell 01-00 en:0123456789ab -->\n\n# 第 1 回\n\n本文。\n\n\n"
            "<!-- cell 01-02 en:ba7816bf8f01 -->\r\n要約。\r\n")
    assert parse(text) == [Block("01-00", "0123456789ab", "# 第 1 回\n\n本文。", 1),
                           Block("01-02", "ba7816bf8f01", "要約。", 8)]


@pytest.mark.parametrize("text, error", [
    ("<!-- cell 01-00 en:0123456789AB -->\n訳\n", r"line 1: a malformed marker"),
    ("<!-- cell 01-00 en:0123456789a -->\n訳\n", r"line 1: a malformed marker"),
    ("訳\n<!-- cell 01-00 en:0123456789ab -->\n訳\n", r"text before the first marker"),
    ("<!-- cell 01-00 en:0123456789ab -->\n訳\n<!--cell 01-01 en:0123456789ab-->\n訳\n", r"line 3: a malformed"),
    ("<!-- cell 01-00 en:0123456789ab -->\n訳\n<!-- cell 01-00 en:0123456789ab -->\n訳\n",
     r"line 3: a second block for 01-00 \(the first is on line 1\)"),
    ("<!-- cell 01-00 en:0123456789ab -->\n\n<!-- cell 01-01 en:0123456789ab -->\n訳\n",
     r"line 1: the block of 01-00 has no text"),
])
def test_a_malformed_catalogue_is_an_error_that_names_the_line(text, error):
    with pytest.raises(CatalogueError, match=error):
        parse(text, "translations/ja/notebooks/01_a.md")


# --------------------------------------------------------------------------------------
# A small course, to translate and build
# --------------------------------------------------------------------------------------

def markdown(cell_id: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text.splitlines(keepends=True)}


def code(cell_id: str, text: str, printed: str = "") -> dict:
    outputs = [{"name": "stdout", "output_type": "stream", "text": [printed]}] if printed else []
    return {"cell_type": "code", "execution_count": 1 if printed else None, "id": cell_id, "metadata": {},
            "outputs": outputs, "source": text.splitlines(keepends=True)}


def course_notebook(cells: list[dict]) -> dict:
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def write_notebook(path: Path, cells: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(course_notebook(cells), indent=1) + "\n")


JAPANESE = {  # the translation of every unit of the small course, its links as they read from the built files
    "notebooks/01_a.ipynb": {
        "01-00": "# 第 1 回 · A\n\n[データ](../../data/x.json) と [第 2 回](02_b.ipynb) を見ます。",
        "01-02": "## まとめ\n\n以上です。"},
    "notebooks/02_b.ipynb": {"02-00": "# 第 2 回 · B", "02-01": "動くセルです。"},
    "exercises/01_a.ipynb": {"e-00": "# 演習 · 第 1 回、足し算",
                             "e-01": "## 演習 1 · 足し算\n\n`add` を書きます。"},
    "README.md": {"course": "# コース\n\n[第 1 回](notebooks/ja/01_a.ipynb) から始めます。",
                  "start": "## 始め方\n\n手順。", "start-2": "## 始め方 (2)\n\nもう一度。"},
}


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A course of two lessons, an exercise notebook and a README, fully translated."""
    write_notebook(tmp_path / "notebooks" / "01_a.ipynb", [
        markdown("01-00", "# Lesson 1 · A\n\nSee [the data](../data/x.json) and [lesson 2](02_b.ipynb)."),
        code("01-01", "print(1)", "1\n"),
        markdown("01-02", "## Summary\n\nDone.")])
    write_notebook(tmp_path / "notebooks" / "02_b.ipynb", [markdown("02-00", "# Lesson 2 · B"),
                                                           markdown("02-01", "A cell that moves.")])
    write_notebook(tmp_path / "exercises" / "01_a.ipynb", [
        markdown("e-00", "# Exercises · Lesson 01, addition"),
        code("e-setup", "from course_lib.checks import check_equal, submit"),
        markdown("e-01", "## Exercise 1 · Addition\n\nWrite `add`."),
        code("e-02", f"def add(a, b):\n    {STUB}"),
        code("e-03", '# CHECK exercise 1\ndef judge(answers):\n'
                     '    check_equal(answers["sum"], 3, f"add(1, 2) is {1 + 2}", "use the + operator")\n\n'
                     'submit({"sum": add(1, 2)}, judge)')])
    (tmp_path / "README.md").write_text("# Course\n\nStart with [lesson 1](notebooks/01_a.ipynb).\n\n## Start\n\n"
                                        "Steps.\n\n## Start\n\nAgain.\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.json").write_text("{}")
    for english, texts in JAPANESE.items():
        translate(tmp_path, english, texts)
    return tmp_path


def translate(root: Path, english: str, texts: dict[str, str]) -> None:
    """Write the catalogue of ``english``: ``texts`` by unit id, each marked with its unit's English hash now."""
    (source,) = [source for source in sources(root, "ja") if source.english == Path(english)]
    hashes = {unit.id: unit.hash for unit in units_of(root / english)}
    path = root / source.catalogue
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"<!-- cell {unit_id} en:{hashes[unit_id]} -->\n{text}\n\n"
                            for unit_id, text in texts.items()))


def run(root: Path, *argv: str) -> int:
    return main([*argv, "--root", str(root)])


def test_a_translated_course_is_built_with_the_english_code_and_outputs(course, capsys):
    assert run(course, "status", "ja") == 0, capsys.readouterr().out
    assert run(course, "build", "ja") == 0
    english = json.loads((course / "notebooks" / "01_a.ipynb").read_text())
    japanese = json.loads((course / "notebooks" / "ja" / "01_a.ipynb").read_text())
    assert [cell["id"] for cell in japanese["cells"]] == [cell["id"] for cell in english["cells"]]
    assert japanese["cells"][1] == english["cells"][1], "a code cell, its outputs and count as they are"
    assert "".join(japanese["cells"][0]["source"]) == JAPANESE["notebooks/01_a.ipynb"]["01-00"]
    assert japanese["metadata"] == {**english["metadata"], "course": {"language": "ja",
                                                                       "source": "notebooks/01_a.ipynb"}}
    assert language_of(japanese) == "ja" and language_of(english) == "en"
    readme = (course / "README.ja.md").read_text()
    assert readme.startswith("<!-- Generated from README.md and translations/ja/README.md")
    assert "# コース" in readme and "## 始め方 (2)\n\nもう一度。\n" in readme
    assert (course / "exercises" / "ja" / "01_a.ipynb").is_file()
    assert run(course, "build", "ja", "--check") == 0
    with (course / "notebooks" / "ja" / "02_b.ipynb").open("a") as built_file:
        built_file.write(" ")
    assert run(course, "build", "ja", "--check") == 1
    assert "out of date: notebooks/ja/02_b.ipynb" in capsys.readouterr().out


def test_every_relative_link_of_the_built_edition_resolves(course):
    assert run(course, "build", "ja") == 0
    built_files = list((course / "notebooks" / "ja").glob("*.ipynb")) + list((course / "exercises" / "ja").glob("*"))
    linked = 0
    for path in built_files:
        text = "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
                         if cell["cell_type"] == "markdown")
        linked += len(relative_links(text))
        assert broken(text, path.parent) == [], path
    readme = (course / "README.ja.md").read_text()
    assert relative_links(readme) == ["notebooks/ja/01_a.ipynb"] and broken(readme, course) == []
    assert linked == 2
    assert broken("[x](../data/x.json) `[no](link.md)` [y](https://example.org) [z](#start)",
                  course / "notebooks" / "ja") == ["../data/x.json"], "from notebooks/ja/, data is two up"


def test_links_of_english_text_shown_one_folder_deeper_are_rewritten():
    text = "[data](../data/x.json#top) [lesson](02_b.ipynb) [web](https://a.b/c) `[code](../no.md)`"
    assert moved(text, Path("notebooks"), Path("notebooks/ja")) == (
        "[data](../../data/x.json#top) [lesson](../02_b.ipynb) [web](https://a.b/c) `[code](../no.md)`")


def test_a_changed_english_cell_makes_its_translation_stale_and_build_refuses(course, capsys):
    path = course / "notebooks" / "01_a.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"][2]["source"] = ["## Summary\n", "\n", "Done, and more."]
    path.write_text(json.dumps(notebook, indent=1))
    capsys.readouterr()
    assert run(course, "status", "ja") == 1
    said = capsys.readouterr().out
    assert "✘ notebooks/01_a.ipynb  (translations/ja/notebooks/01_a.md): 1 of 2 current, 1 stale" in said
    assert "STALE   01-02" in said
    assert run(course, "build", "ja") == 1
    assert "STALE   01-02" in capsys.readouterr().err
    assert not (course / "notebooks" / "ja").exists(), "nothing is written while a unit is not current"
    assert run(course, "build", "ja", "--allow-english") == 0
    japanese = json.loads((course / "notebooks" / "ja" / "01_a.ipynb").read_text())
    shown = "".join(japanese["cells"][2]["source"])
    assert shown.startswith("> ⚠️ **翻訳が古くなっています (stale)**") and shown.endswith("Done, and more.")
    assert japanese["metadata"]["course"]["english"] == ["01-02"]


def test_a_missing_unit_is_listed_and_shown_in_english_only_under_a_notice(course, capsys):
    translate(course, "notebooks/01_a.ipynb", {"01-02": JAPANESE["notebooks/01_a.ipynb"]["01-02"]})
    capsys.readouterr()
    assert run(course, "status", "ja", "notebooks/01_a.ipynb", "--show") == 1
    said = capsys.readouterr().out
    assert "MISSING 01-00          '# Lesson 1 · A'" in said and "      | See [the data](../data/x.json)" in said
    assert run(course, "build", "ja") == 1
    assert run(course, "build", "ja", "--allow-english") == 0
    japanese = json.loads((course / "notebooks" / "ja" / "01_a.ipynb").read_text())
    shown = "".join(japanese["cells"][0]["source"])
    assert shown.startswith("> ⚠️ **未翻訳 (untranslated)**")
    assert "[the data](../../data/x.json)" in shown and "[lesson 2](../02_b.ipynb)" in shown, "links still lead there"


def test_a_block_whose_cell_is_gone_is_an_orphan_and_an_error(course, capsys):
    catalogue = course / "translations" / "ja" / "notebooks" / "02_b.md"
    catalogue.write_text(catalogue.read_text() + "<!-- cell gone en:0123456789ab -->\n消えたセル。\n")
    capsys.readouterr()
    assert run(course, "status", "ja") == 1
    assert "ORPHAN  gone           line 7: notebooks/02_b.ipynb has no unit gone (no markdown cell or section" \
        in capsys.readouterr().out
    assert run(course, "build", "ja", "--allow-english") == 1
    assert "orphans): gone" in capsys.readouterr().err


def test_a_malformed_catalogue_stops_status_and_build(course, capsys):
    catalogue = course / "translations" / "ja" / "README.md"
    catalogue.write_text(catalogue.read_text().replace("<!-- cell start en:", "<!-- cell start en:X", 1))
    capsys.readouterr()
    assert run(course, "status", "ja") == 1
    assert "✘ README.md  (translations/ja/README.md): translations/ja/README.md, line 6: a malformed marker" \
        in capsys.readouterr().out
    assert run(course, "build", "ja", "--allow-english") == 1


def test_a_cell_moved_to_another_notebook_is_found_by_its_hash_and_adopted(course, capsys):
    moving = markdown("02-01", "A cell that moves.")
    for name, change in (("02_b", lambda cells: cells[:1]), ("01_a", lambda cells: [*cells, moving])):
        path = course / "notebooks" / f"{name}.ipynb"
        notebook = json.loads(path.read_text())
        notebook["cells"] = change(notebook["cells"])
        path.write_text(json.dumps(notebook, indent=1))
    capsys.readouterr()
    assert run(course, "status", "ja") == 1
    said = capsys.readouterr().out
    assert "MISSING 02-01" in said and "ORPHAN  02-01" in said
    assert ("the same English is translated in translations/ja/notebooks/02_b.md (block 02-01, line 4, an orphan "
            "there): `adopt` copies it here") in said
    assert run(course, "adopt", "ja") == 0
    assert "moved 02-01 from translations/ja/notebooks/02_b.md to translations/ja/notebooks/01_a.md as 02-01" \
        in capsys.readouterr().out
    assert run(course, "status", "ja") == 0, capsys.readouterr().out
    assert "02-01" not in (course / "translations" / "ja" / "notebooks" / "02_b.md").read_text()


def test_a_cell_whose_id_changed_is_found_under_its_old_id(course, capsys):
    path = course / "notebooks" / "02_b.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"][1]["id"] = "02-new"
    path.write_text(json.dumps(notebook, indent=1))
    assert run(course, "adopt", "ja") == 0
    assert "moved 02-01 from translations/ja/notebooks/02_b.md to translations/ja/notebooks/02_b.md as 02-new" \
        in capsys.readouterr().out
    assert run(course, "status", "ja") == 0


def test_status_show_gives_a_stale_units_change_as_a_diff_from_history(course, capsys):
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=course,
                       check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "the course")
    path = course / "notebooks" / "02_b.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"][1]["source"] = ["A cell that moved."]
    path.write_text(json.dumps(notebook, indent=1))
    git("commit", "-q", "-am", "a change")
    capsys.readouterr()
    assert run(course, "status", "ja", "notebooks/02_b.ipynb", "--show") == 1
    said = capsys.readouterr().out
    assert "      | -A cell that moves.\n      | +A cell that moved." in said


def test_a_built_file_whose_english_is_gone_is_reported_and_removed(course, capsys):
    assert run(course, "build", "ja") == 0
    (course / "notebooks" / "02_b.ipynb").unlink()
    (course / "translations" / "ja" / "notebooks" / "02_b.md").unlink()
    capsys.readouterr()
    assert run(course, "build", "ja", "--check") == 1
    assert "no English file any more: notebooks/ja/02_b.ipynb" in capsys.readouterr().out
    assert run(course, "build", "ja") == 0
    assert not (course / "notebooks" / "ja" / "02_b.ipynb").exists()


def test_the_exercise_generator_does_not_take_the_japanese_folder_for_exercises(course):
    (course / "solutions").mkdir()
    (course / "solutions" / "01_a.ipynb").write_text((course / "exercises" / "01_a.ipynb").read_text())
    assert run(course, "build", "ja") == 0
    stale = build_exercises(course / "solutions", course / "exercises", check=True)
    assert all(path.parent.name == "exercises" for path in stale), stale


@pytest.mark.slow
def test_pytest_does_not_collect_the_japanese_notebooks(course):
    """nbval would run every Japanese lesson a second time: they are proven by the files instead."""
    assert run(course, "build", "ja") == 0
    (course / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=--nbval-lax", "notebooks", "exercises"], cwd=course, capture_output=True,
                          text=True)
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected and not [line for line in collected if "/ja/" in line], done.stdout + done.stderr
    assert {line.split("::")[0] for line in collected} == {"notebooks/01_a.ipynb", "exercises/01_a.ipynb"}


# --------------------------------------------------------------------------------------
# Check messages and the grading report, in Japanese
# --------------------------------------------------------------------------------------

def test_check_messages_are_read_from_check_calls_as_templates():
    source = ('check(ok, "a plain {brace} message", hint="no hint")\n'
              'check_equal(x, 3, f"{successes}/{n}: low end", f"got {reply[:80]!r} at {rate:.1f}")\n'
              'check_close(x, 1.0, "on the model" if live else "scripted")\n'
              'check(ok, "; ".join(differences))\n%timeit pass\n')
    found = [(message.template, message.code) for message in messages_in(source, "01", "c")]
    assert found == [("a plain {{brace}} message", "'a plain {brace} message'"), ("no hint", "'no hint'"),
                     ("{successes}/{n}: low end", "f'{successes}/{n}: low end'"),
                     ("got {reply[:80]!r} at {rate:.1f}", "f'got {reply[:80]!r} at {rate:.1f}'"),
                     ("on the model", "'on the model' if live else 'scripted'"),
                     ("scripted", "'on the model' if live else 'scripted'"),
                     (None, "'; '.join(differences)")]


@pytest.mark.parametrize("text, error", [
    ("en: a message\n", r"line 1: the English message has no `ja: ` line after it"),
    ("en: a message\nen: another\n", r"line 2: the English message on line 1 needs its translation"),
    ("en: a\nja: あ\n\nen: a\nja: あ\n", r"line 4: 'a' is given twice"),
    ("ja: あ\n", r"line 1: expected `en: `"),
    ("en: {n} of {total}\nja: {total} 中 {m}\n", r"line 2: the translation's placeholders \['m', 'total'\]"),
])
def test_a_malformed_message_catalogue_is_an_error(text, error):
    with pytest.raises(ValueError, match=error):
        parse_messages(text)


def test_a_check_says_its_what_and_hint_in_japanese_with_the_values_of_the_english(monkeypatch, capsys):
    monkeypatch.setattr(checks, "LANGUAGE", "ja")
    monkeypatch.setattr(checks, "MESSAGES", parse_messages(
        "# 08_experiments\n\nen: {successes}/{n}: low end\nja: {n} 件中 {successes} 件: 下限\n\n"
        "en: a {{literal}} brace\nja: {{波括弧}} そのもの\n\nen: use the interval\nja: 区間を使います\n"))
    with pytest.raises(checks.CheckFailed) as failed:
        checks.check_equal(0.2, 0.3, "3/10: low end", "use the interval")
    assert str(failed.value) == "✘ 10 件中 3 件: 下限\n  期待値: 0.3\n  実際:   0.2\n  ヒント: 区間を使います"
    checks.check(True, "a {literal} brace")
    checks.check(True, "not in the catalogue")
    assert capsys.readouterr().out == "✔ {波括弧} そのもの\n✔ not in the catalogue\n"
    monkeypatch.setattr(checks, "LANGUAGE", "en")
    with pytest.raises(checks.CheckFailed, match=r"^✘ 3/10: low end\n  expected: 0.3\n  got:      0.2\n  hint: use"):
        checks.check_equal(0.2, 0.3, "3/10: low end", "use the interval")


@pytest.mark.slow
def test_in_a_japanese_kernel_the_checks_read_the_course_message_catalogue(tmp_path):
    """Imported normally (``course.py lab --lang ja``), the checks read ``COURSE_LANG`` and
    ``translations/ja/checks.md`` on their first message; without ``COURSE_LANG``, English."""
    english, japanese = next((english, japanese) for english, japanese in
                             parse_messages((ROOT / "translations" / "ja" / "checks.md").read_text()).items()
                             if "{" not in english)
    program = f"from course_lib.checks import check\ncheck(True, {english!r})"
    for language, expected in (("ja", japanese), (None, english)):
        env = {key: value for key, value in os.environ.items() if key != "COURSE_LANG"}
        env |= {"COURSE_LANG": language} if language else {}
        done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.stdout == f"✔ {expected}\n", done.stderr


def test_the_report_of_a_japanese_notebook_is_in_japanese_and_lined_up():
    results = [Result("01_a.ipynb", 1, "足し算", "passed", language="ja"),
               Result("01_a.ipynb", 2, "ストリームを読む", "failed", "✘ 読めません\n  ヒント: 行ごとに", language="ja"),
               Result("01_a.ipynb", 3, "errors", "error", "the setup cell failed: NameError: x", language="ja")]
    assert format_report(results) == (
        "演習 1 · 足し算            合格\n"
        "演習 2 · ストリームを読む  不合格\n"
        "    ✘ 読めません\n"
        "      ヒント: 行ごとに\n"
        "演習 3 · errors            エラー\n"
        "    セットアップのセルが失敗しました: NameError: x\n"
        "3 問中 1 問が合格")


def test_a_translated_notebooks_exercises_are_found_by_the_english_headings_ids(course):
    assert run(course, "build", "ja") == 0
    english = nbformat.read(course / "exercises" / "01_a.ipynb", as_version=4)
    japanese = nbformat.read(course / "exercises" / "ja" / "01_a.ipynb", as_version=4)
    parts = sections(japanese, english)
    assert [(part.number, part.title) for part in parts] == [(0, "setup"), (1, "足し算")]
    assert [cell.id for cell in parts[1].cells] == ["e-01", "e-02", "e-03"]
    assert [part.number for part in sections(japanese)] == [0], "without the English, no heading is found"


@pytest.mark.parametrize("english", sorted((ROOT / "exercises").glob("*.ipynb")), ids=lambda path: path.name)
def test_the_grader_finds_the_same_exercises_and_checks_in_the_japanese_notebook(english):
    """Built as the edition is now (English under a notice where a unit is not translated yet)."""
    status = survey(ROOT, "ja").status_of(Path("exercises", english.name))
    japanese = nbformat.reads(built(ROOT, status, "ja", allow_english=True).text, as_version=4)
    theirs, ours = sections(nbformat.read(english, as_version=4)), sections(japanese, nbformat.read(english, 4))
    assert [part.number for part in ours] == [part.number for part in theirs]
    assert [[cell.source for cell in part.checks] for part in ours] == [[cell.source for cell in part.checks]
                                                                         for part in theirs]
    assert all(part.title and "·" not in part.title and not part.title.startswith(("#", ">")) for part in ours)


@pytest.mark.slow
def test_grading_a_japanese_exercise_notebook_reports_in_japanese(course, monkeypatch):
    """A learner's wrong answer in ``exercises/ja/``, graded in a real kernel: the line, the
    check's message and hint (from the message catalogue) and the summary are Japanese."""
    assert run(course, "build", "ja") == 0
    monkeypatch.setattr(grading, "translations", lambda language: parse_messages(
        "en: add(1, 2) is {1 + 2}\nja: add(1, 2) は {1 + 2}\n\nen: use the + operator\nja: + 演算子を使います\n"))
    learner = nbformat.read(course / "exercises" / "ja" / "01_a.ipynb", as_version=4)
    answer = next(cell for cell in learner.cells if cell.get("id") == "e-02")
    assert STUB not in answer.source, "the Japanese exercise's stub speaks Japanese"
    answer.source = answer.source.replace(stub("ja"), "return a - b")
    path = course / "learner" / "01_a.ipynb"
    path.parent.mkdir()
    nbformat.write(learner, path)
    results = grade(path, folder=course / "exercises" / "ja", published=course / "exercises", cell_timeout=60)
    assert format_report(results) == ("演習 1 · 足し算  不合格\n"
                                      "    ✘ add(1, 2) は 3\n"
                                      "      期待値: 3\n"
                                      "      実際:   -1\n"
                                      "      ヒント: + 演算子を使います\n"
                                      "1 問中 0 問が合格")
    english = nbformat.read(course / "exercises" / "01_a.ipynb", as_version=4)
    answer = next(cell for cell in english.cells if cell.get("id") == "e-02")
    answer.source = answer.source.replace(STUB, "return a - b")
    nbformat.write(english, path)
    assert format_report(grade(path, folder=course / "exercises", published=course / "exercises",
                               cell_timeout=60)) == ("Exercise 1 · Addition  failed\n"
                                                     "    ✘ add(1, 2) is 3\n"
                                                     "      expected: 3\n"
                                                     "      got:      -1\n"
                                                     "      hint: use the + operator\n"
                                                     "0 of 1 exercises passed")


def test_a_japanese_notebook_of_an_edition_not_built_is_an_error_that_says_so(course, tmp_path):
    assert run(course, "build", "ja") == 0
    learner = tmp_path / "01_a.ipynb"
    learner.write_text((course / "exercises" / "ja" / "01_a.ipynb").read_text())
    (course / "exercises" / "ja" / "01_a.ipynb").unlink()
    (result,) = grade(learner, published=course / "exercises")
    assert result.status == "error" and "no exercises/ja/01_a.ipynb: build the edition first" in result.message


# --------------------------------------------------------------------------------------
# Course files named from any folder, and the edition's language
# --------------------------------------------------------------------------------------

def test_course_file_finds_a_course_file_from_any_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT / "notebooks")
    assert course_file("data/products.json") == Path("../data/products.json")
    (tmp_path / "ja").mkdir()
    monkeypatch.chdir(ROOT)
    assert course_file("data/products.json") == Path("data/products.json")
    assert course_file("data/products.json").read_text() == (ROOT / "data" / "products.json").read_text()
    copy_of_the_course = tmp_path / "work"
    (copy_of_the_course / "exercises" / "ja").mkdir(parents=True)
    (copy_of_the_course / "data").mkdir()
    (copy_of_the_course / "data" / "products.json").write_text("{}")
    monkeypatch.chdir(copy_of_the_course / "exercises" / "ja")
    assert course_file("data/products.json") == Path("../../data/products.json"), "the copy's own data (a grader's)"
    assert course_file("notebooks/agent_tests").resolve() == ROOT / "notebooks" / "agent_tests", "else the course's"
    for wrong in ("/etc/passwd", "../data/products.json", "data/../../x", ""):
        with pytest.raises(ValueError, match="from the course's top folder"):
            course_file(wrong)


def test_the_editions_language_is_course_lang_else_its_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_LANG", raising=False)
    monkeypatch.chdir(ROOT)
    assert course_language() == "en"
    (tmp_path / "exercises" / "ja").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "exercises" / "ja")
    assert course_language() == "ja"
    monkeypatch.setenv("COURSE_LANG", "en")
    assert course_language() == "en"
    monkeypatch.setenv("COURSE_LANG", "Japanese")
    with pytest.raises(ValueError, match="two-letter language code"):
        course_language()


# --------------------------------------------------------------------------------------
# The course's own edition (these fail, listing what is left, until the translation is done)
# --------------------------------------------------------------------------------------

@pytest.mark.release
def test_every_english_unit_has_a_current_japanese_translation():
    result = survey(ROOT, "ja")
    lines = [line for status in result.statuses if not status.ok for line in status_lines(ROOT, status, show=False)]
    lines += [f"✘ {path.as_posix()}: no English file has this catalogue" for path in result.lonely]
    lines += [f"✘ {path.as_posix()}: {problem}" for path, problem in result.lonely_problems.items()]
    assert not lines, ("not translated yet (`python -m course_tools translation status ja --show`):\n"
                       + "\n".join(lines))


@pytest.mark.release
def test_the_committed_japanese_files_are_what_build_writes():
    """So the Japanese notebooks have the English code and outputs, and nbval need not run them."""
    result = survey(ROOT, "ja")
    wrong = []
    for status in result.statuses:
        path = ROOT / status.source.built
        try:
            expected = built(ROOT, status, "ja", allow_english=True).text
        except ValueError as problem:
            wrong.append(f"{status.source.built}: cannot be built: {problem}")
            continue
        if not path.is_file():
            wrong.append(f"{status.source.built}: missing")
        elif path.read_text(encoding="utf-8") != expected:
            wrong.append(f"{status.source.built}: not what build writes")
    assert not wrong, "run `python -m course_tools translation build ja` and commit:\n" + "\n".join(wrong)


@pytest.mark.release
def test_every_relative_link_of_the_committed_japanese_edition_resolves():
    found = []
    for status in survey(ROOT, "ja").statuses:
        path = ROOT / status.source.built
        if not path.is_file():
            continue  # the test above names it
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "\n\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"]
                               if cell["cell_type"] == "markdown")
        found += [f"{status.source.built}: {target}" for target in broken(text, path.parent)]
    assert not found, "links that lead to no file:\n" + "\n".join(found)


@pytest.mark.release
def test_every_check_message_of_the_solutions_has_a_japanese_translation():
    found = message_status("ja", ROOT)
    assert not found.orphans, f"translations/ja/checks.md has messages no check says any more: {found.orphans}"
    assert not found.missing, (f"{len(found.missing)} check messages have no Japanese in translations/ja/checks.md "
                               f"(to add, as `python -m course_tools translation messages ja` prints them):\n"
                               + skeleton(found.missing))
    assert len(found.data) <= 1, f"messages that are data, shown as they are: {found.data}"


COURSE_FOLDERS = {"data", "tests", "docs", "course_lib", "notebooks", "exercises", "solutions", "benchmarks",
                  "translations", "agent_tests"}  # the course's folders, and the one beside the lessons
BESIDE_THE_LESSONS = {"agent_tests"}  # only notebooks/ has it: a string that starts with it is a path from there
FILE_CALLS = {"Path", "PurePath", "open"}


def _python(source: str) -> str:
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def _is_call_to(node: ast.AST, names: set[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    return (function.id if isinstance(function, ast.Name) else
            function.attr if isinstance(function, ast.Attribute) else "") in names


def cwd_relative_paths(notebook: dict) -> list[tuple[str, str]]:
    """``(cell id, text)`` of each string in a notebook's code that names a course file relative
    to the notebook's own folder: one that starts with ``../`` or with ``agent_tests`` (lesson
    13's folder beside the lessons), or a course folder given to ``Path``/``open``. Not
    counted: a name given to ``course_file``, or to a function of the notebook that itself
    places paths with ``course_file`` (lesson 13's ``pytest`` and ``show``, once they run in
    a course folder they name)."""
    trees = [(cell["id"], ast.parse(_python("".join(cell["source"])))) for cell in notebook["cells"]
             if cell["cell_type"] == "code"]
    placing = {"course_file"} | {node.name for _, tree in trees for node in ast.walk(tree)
                                 if isinstance(node, ast.FunctionDef)
                                 and any(_is_call_to(inner, {"course_file"}) for inner in ast.walk(node))}
    found = []
    for cell_id, tree in trees:
        exempt = {id(inner) for node in ast.walk(tree) if _is_call_to(node, placing) for inner in ast.walk(node)}
        file_arguments = {id(node.args[0]) for node in ast.walk(tree) if _is_call_to(node, FILE_CALLS) and node.args}
        for node in ast.walk(tree):
            if id(node) in exempt or not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            text = node.value
            first = text.replace("\\", "/").split("/")[0]
            if text.startswith(("../", "..\\")) or first in BESIDE_THE_LESSONS \
                    or (id(node) in file_arguments and first in COURSE_FOLDERS):
                found.append((cell_id, text))
    return found


def test_the_cwd_relative_path_finder_finds_what_it_should():
    notebook = course_notebook([
        code("a", 'DATA = Path("../data/products.json")\nrows = open(f"../data/results/{name}.json")'),
        code("b", 'for path in Path("agent_tests").glob("*.py"):\n    print(path)\nprint(Path("tests"), "tests")'),
        code("e", 'done = pytest("-v", "agent_tests/test_contracts.py")'),
        code("c", 'DATA = course_file("data/products.json")\nprint("see ../README.md")'),
        code("d", 'def show(path):\n    print(course_file("notebooks").joinpath(path).read_text())\n'
                  'show("../tests/test_budget.py")')])
    assert sorted(cwd_relative_paths(notebook)) == [("a", "../data/products.json"), ("a", "../data/results/"),
                                                    ("b", "agent_tests"), ("b", "tests"),
                                                    ("e", "agent_tests/test_contracts.py")]


@pytest.mark.release
def test_no_code_cell_names_a_course_file_relative_to_its_folder():
    """The Japanese edition runs one folder deeper (``notebooks/ja/``): ``course_file("data/x.json")``
    works from both, ``"../data/x.json"`` only from ``notebooks/``. (An exercise's cells come from
    ``solutions/``: change them there, then ``python -m course_grading exercises build``.)"""
    found = [f"{folder}/{path.name}, cell {cell_id}: {text!r}" for folder in ("notebooks", "exercises")
             for path in sorted((ROOT / folder).glob("*.ipynb"))
             for cell_id, text in cwd_relative_paths(json.loads(path.read_text(encoding="utf-8")))]
    assert not found, ("code cells that name a course file from their own folder (use "
                       "`course_lib.config.course_file`):\n" + "\n".join(found))


def test_the_list_of_sources_is_every_lesson_exercise_the_readme_the_docs_pages_and_the_kit():
    names = [source.english.as_posix() for source in sources(ROOT, "ja")]
    assert names == ([f"notebooks/{path.name}" for path in sorted((ROOT / "notebooks").glob("*.ipynb"))]
                     + [f"exercises/{path.name}" for path in sorted((ROOT / "exercises").glob("*.ipynb"))]
                     + ["README.md"]
                     + [f"docs/{path.name}" for path in sorted((ROOT / "docs").glob("*.md")) if "." not in path.stem]
                     + [f"docs/instructors/{path.name}" for path in sorted((ROOT / "docs" / "instructors").glob("*.md"))
                        if "." not in path.stem])  # the whole instructor's kit
    assert "docs/measured.md" in names and "docs/glossary.ja.md" not in names, "a page in Japanese is nobody's copy"


def test_a_docs_page_is_built_beside_it_and_a_page_written_in_japanese_is_no_leftover(course, capsys):
    (course / "docs").mkdir()
    (course / "docs" / "guide.md").write_text("# Guide\n\nSee [lesson 1](../notebooks/01_a.ipynb).\n")
    (course / "docs" / "glossary.ja.md").write_text("# 用語集\n\n書き下ろしのページです。\n")
    translate(course, "docs/guide.md", {"guide": "# ガイド\n\n[第 1 回](../notebooks/ja/01_a.ipynb) を見ます。"})
    assert source_for(Path("docs/guide.md"), "ja").built == Path("docs/guide.ja.md")
    assert run(course, "build", "ja") == 0
    built = (course / "docs" / "guide.ja.md").read_text()
    assert built.startswith("<!-- Generated from docs/guide.md and translations/ja/docs/guide.md")
    assert "# ガイド" in built
    assert broken(built, course / "docs") == []
    assert run(course, "build", "ja", "--check") == 0, capsys.readouterr().out
    (course / "docs" / "guide.md").unlink()
    assert run(course, "build", "ja", "--check") == 1
    assert "no English file any more: docs/guide.ja.md" in capsys.readouterr().out
    with pytest.raises(ValueError, match="is not translated"):
        source_for(Path("docs/instructors/README.ja.md"), "ja")
    with pytest.raises(ValueError, match="is not translated"):
        source_for(Path("docs/instructors/notes/draft.md"), "ja")


@pytest.mark.parametrize("message", [
    grading.stop_message({"how": "died", "by": "cell"}, 300, 1800),
    grading.stop_message({"how": "interrupted", "by": "cell"}, 300, 1800),
    grading.stop_message({"how": "killed", "by": "cell"}, 300, 1800),
    grading.stop_message({"how": "killed", "by": "notebook"}, 300, 1800),
    "the notebook ran longer than 1800 s in all and was stopped before this exercise",
    "the kernel died (or stopped) before this exercise's cells ran",
    "(check 2) the check sent no answers the grader could read: something in the notebook suppressed, replaced "
    "or repeated them",
    "the setup cell failed: NameError: name 'x' is not defined (in your code)",
])
def test_the_graders_own_words_are_japanese_in_the_japanese_edition(message):
    """What the grader says of a stopped kernel, a timeout or a missing answer; the Python error it
    quotes (NameError: ...) and the values stay as they are."""
    said = grading.grader_said(message, "ja")
    english = [word for word in re.findall(r"[A-Za-z]{3,}", said) if word not in {"NameError", "name", "not",
                                                                                   "defined", "check"}]
    assert not english, said


@pytest.mark.release
def test_a_japanese_exercise_says_replace_this_line_in_japanese_and_nothing_else_in_its_code_differs():
    for japanese in sorted((ROOT / "exercises" / "ja").glob("*.ipynb")):
        english = json.loads((ROOT / "exercises" / japanese.name).read_text())["cells"]
        cells = json.loads(japanese.read_text())["cells"]
        codes = [("".join(en["source"]), "".join(ja["source"])) for en, ja in zip(english, cells)
                 if en["cell_type"] == "code"]
        assert any(STUB in en for en, _ in codes), japanese.name
        assert all(ja == en.replace(STUB, stub("ja")) for en, ja in codes), japanese.name
        assert not any(STUB in ja for _, ja in codes), japanese.name


def test_the_japanese_stub_is_not_attempted_to_the_grader():
    import nbformat

    from course_grading.exercises import STUB_MESSAGES
    from course_grading.grading import verdict

    for language, message in STUB_MESSAGES.items():
        cell = nbformat.v4.new_code_cell("def add(a, b):\n    ...", execution_count=1,
                                         outputs=[nbformat.v4.new_output("error", ename="NotImplementedError",
                                                                         evalue=message, traceback=[])])
        cell.metadata["grading"] = {"check": False}
        assert verdict([cell], 10, language=language) == ("not attempted", ""), language


# --- PO files: the catalogues out to a translator's tools and back ----------------------------


def test_the_catalogues_go_out_as_po_files_and_come_back_unchanged(course, tmp_path, capsys):
    folder = tmp_path / "po"
    before = {path: path.read_text() for path in (course / "translations").rglob("*.md")}
    assert run(course, "export", "ja", "--po", str(folder)) == 0
    lesson = polib.pofile(str(folder / "notebooks" / "01_a.po"))
    assert [(entry.msgctxt, entry.msgstr) for entry in lesson] == list(JAPANESE["notebooks/01_a.ipynb"].items())
    assert lesson[0].msgid.startswith("# Lesson 1 · A") and lesson.metadata["Language"] == "ja"
    assert (folder / "README.po").is_file() and (folder / "exercises" / "01_a.po").is_file()
    assert run(course, "import", "ja", "--po", str(folder)) == 0
    assert {path: path.read_text() for path in (course / "translations").rglob("*.md")} == before


def test_a_stale_unit_goes_out_fuzzy_and_a_translation_from_the_po_file_comes_back_current(course, tmp_path, capsys):
    folder = tmp_path / "po"
    write_notebook(course / "notebooks" / "02_b.ipynb", [markdown("02-00", "# Lesson 2 · B"),
                                                         markdown("02-01", "A cell that moved.")])
    assert run(course, "export", "ja", "--po", str(folder)) == 0
    po_file = folder / "notebooks" / "02_b.po"
    entries = {entry.msgctxt: entry for entry in polib.pofile(str(po_file))}
    assert entries["02-01"].fuzzy and entries["02-01"].msgstr == "動くセルです。"
    assert not entries["02-00"].fuzzy
    assert run(course, "import", "ja", "--po", str(folder)) == 0  # a fuzzy entry changes nothing
    assert run(course, "status", "ja") == 1
    edited = polib.pofile(str(po_file))
    for entry in edited:
        if entry.msgctxt == "02-01":
            entry.msgstr, entry.flags = "動いたセルです。", []
    edited.save(str(po_file))
    capsys.readouterr()
    assert run(course, "import", "ja", "--po", str(folder)) == 0
    assert "translations/ja/notebooks/02_b.md: 1 units" in capsys.readouterr().out
    assert run(course, "status", "ja") == 0, capsys.readouterr().out
    assert "動いたセルです。" in (course / "translations" / "ja" / "notebooks" / "02_b.md").read_text()


def test_a_po_file_of_an_older_english_or_another_unit_is_refused_and_nothing_is_written(course, tmp_path, capsys):
    folder = tmp_path / "po"
    assert run(course, "export", "ja", "--po", str(folder)) == 0
    catalogue_path = course / "translations" / "ja" / "notebooks" / "02_b.md"
    before = catalogue_path.read_text()
    po_file = folder / "notebooks" / "02_b.po"
    edited = polib.pofile(str(po_file))
    edited[0].msgstr = "# 第 2 回 · B (新)"
    edited.append(polib.POEntry(msgctxt="02-99", msgid="Gone.", msgstr="消えた。"))
    edited[1].msgstr = "動くセル\n<!-- cell 02-00 en:000000000000 -->\n偽のブロック"
    edited.save(str(po_file))
    write_notebook(course / "notebooks" / "02_b.ipynb", [markdown("02-00", "# Lesson 2 · B!"),
                                                         markdown("02-01", "A cell that moves.")])
    capsys.readouterr()
    assert run(course, "import", "ja", "--po", str(folder)) == 1
    out = capsys.readouterr().out
    assert "02-00: its English is not notebooks/02_b.ipynb's now (export again)" in out
    assert "02-99: no unit of notebooks/02_b.ipynb has this id" in out
    assert "02-01: a line of its translation begins as a catalogue marker" in out
    assert catalogue_path.read_text() == before
    assert run(course, "import", "ja", "--po", str(tmp_path / "nowhere")) == 0  # no PO file: nothing to do
    with pytest.raises(SystemExit):
        run(course, "import", "ja")  # --po is needed
