"""Slides from the lessons (course_tools/slides.py): a real lesson through nbconvert's reveal.js exporter.

Fast and model-free: the decks show the committed outputs, nothing is executed."""

import re
from pathlib import Path

import nbformat
import pytest

from course_tools import slides

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "01_the_wire.ipynb"


@pytest.fixture(scope="module")
def deck(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    before = LESSON.read_bytes()
    assert slides.main([str(out), str(LESSON)]) == 0
    assert LESSON.read_bytes() == before, "the lesson itself must not change"
    return out / "01_the_wire.slides.html"


def test_a_lesson_becomes_a_deck_with_its_title_and_its_slides(deck):
    html = deck.read_text(encoding="utf-8")
    assert "<title>Lesson 1 · The wire: one /api/chat round trip, by hand slides</title>" in html
    headings = headings_of(nbformat.read(LESSON, as_version=4))
    assert len(headings) >= 8
    # reveal.js: one <section> per slide, holding one <section> per sub-slide
    assert html.count("<section") >= len(headings) * 2
    text = re.sub(r"<[^>]+>", "", html)
    for heading in headings:  # every heading of the lesson is on a slide
        words = re.sub(r"[`*#]", "", heading).split()[:3]
        assert " ".join(words) in text, heading
    assert "NBVAL_CHECK_OUTPUT" not in html  # the test suite's markers are not shown


def headings_of(notebook):
    """The first line of every # or ## heading in the notebook's Markdown, wherever it is in a cell."""
    return [line for cell in notebook.cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if re.match(r"#{1,2} ", line)]


def test_each_heading_starts_a_slide_and_nothing_else_does():
    lesson = nbformat.read(LESSON, as_version=4)
    deck = slides.as_slides(lesson)
    starts = [cell.source.splitlines()[0] for cell in deck.cells if cell.metadata["slideshow"]["slide_type"] == "slide"]
    assert starts == headings_of(lesson)  # headings in the middle of a cell too, in order
    kinds = [cell.metadata["slideshow"]["slide_type"] for cell in deck.cells]
    assert "subslide" in kinds and "-" in kinds  # long stretches are split, short cells share a slide
    assert all("slideshow" not in cell.metadata for cell in lesson.cells)  # the copy got the metadata
    prose = lambda notebook: " ".join(c.source for c in notebook.cells if c.cell_type == "markdown").split()  # noqa: E731
    assert prose(deck) == prose(lesson)  # cutting cells at headings loses no word


def test_a_hash_line_in_a_fenced_block_is_no_heading():
    assert slides.at_headings("Run:\n```bash\n# a comment\npython3 course.py check\n```\n## Next\ntext") == [
        "Run:\n```bash\n# a comment\npython3 course.py check\n```", "## Next\ntext"]
    assert slides.at_headings("## First\ntext\n### Deeper stays\nmore") == ["## First\ntext\n### Deeper stays\nmore"]


def test_a_long_output_is_cut_and_says_so():
    cell = nbformat.v4.new_code_cell("for i in range(100): print(i)")
    rich = {"text/plain": "x\n" * 40, "text/html": "<p>x</p>\n" * 40, "application/vnd.jupyter.widget-view+json": {}}
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="".join(f"{i}\n" for i in range(100))),
                    nbformat.v4.new_output("execute_result", data=rich)]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A title"), cell])
    [_, shown] = slides.as_slides(notebook, max_output_lines=5).cells
    assert shown.outputs[0].text.splitlines() == ["0", "1", "2", "3", "4", "… 95 more lines in the lesson"]
    assert set(shown.outputs[1].data) == {"text/plain"}  # long HTML and the widget leave; the text stays, cut
    assert shown.outputs[1].data["text/plain"].splitlines()[-1] == "… 35 more lines in the lesson"
    assert len(cell.outputs[0].text.splitlines()) == 100  # the original is untouched


def test_a_wrong_file_is_a_clear_error_and_nothing_is_written(tmp_path, capsys):
    text_file = tmp_path / "notes.ipynb"
    text_file.write_text("not json")
    out = tmp_path / "out"
    assert slides.main([str(out), str(LESSON), str(tmp_path / "missing.ipynb")]) == 2
    assert "missing.ipynb is not a notebook file" in capsys.readouterr().err
    assert slides.main([str(out), str(text_file)]) == 2
    assert "could not be read as a notebook" in capsys.readouterr().err
    assert not out.exists()


def test_a_deck_loads_nothing_from_the_web_and_everything_it_loads_is_beside_it(deck):
    html = deck.read_text(encoding="utf-8")
    loaded = re.findall(r'<(?:script|link)\b[^>]*\b(?:src|href)="([^"]+)"', html)
    loaded += re.findall(r"""@import\s+url\(['"]?([^'")]+)""", html)
    loaded += re.findall(r'require\(\{[^}]*\},\s*\[([^\]]*)\]', html)
    targets = [target.strip().strip('"') for found in loaded for target in found.split(",")]
    assert {"assets/require.js", "assets/jquery.min.js", "assets/reveal.js/dist/reveal.css",
            "assets/reveal.js/dist/theme/white.css", "assets/reveal.js/dist/reveal.js",
            "assets/reveal.js/plugin/notes/notes.js"} <= set(targets), targets
    for target in targets:
        assert "//" not in target, f"the deck loads {target} from the web"
        assert (deck.parent / target).is_file(), f"{target} is not beside the deck"
    assert "mathjax" not in html.lower() and "mermaid" not in html.lower() and "unpkg" not in html
    theme = (deck.parent / "assets/reveal.js/dist/theme/white.css").read_text()
    fonts = deck.parent / "assets/reveal.js/dist/theme/fonts/source-sans-pro"
    assert re.findall(r"@import url\(([^)]*)\)", theme) == ["./fonts/source-sans-pro/source-sans-pro.css"]
    assert len(list(fonts.glob("*.woff"))) == 4


def test_another_copy_of_the_assets_is_named_and_then_nothing_is_copied(tmp_path):
    (written,) = slides.write_slides(tmp_path, [LESSON], assets="https://slides.example/assets/")
    assert not (tmp_path / "assets").exists()
    assert 'src="https://slides.example/assets/require.js"' in written.read_text(encoding="utf-8")


def test_the_japanese_edition_becomes_japanese_decks(deck, tmp_path, monkeypatch):
    """``--lang ja`` (or ``COURSE_LANG=ja``) with no notebook named: every lesson of
    ``notebooks/ja/``; a Japanese lesson's deck speaks Japanese."""
    chosen = []
    monkeypatch.setattr(slides, "write_slides", lambda out, notebooks, assets=None: chosen.extend(notebooks) or [])
    assert slides.main([str(tmp_path), "--lang", "ja"]) == 0
    assert chosen and all(path.parent == LESSON.parent / "ja" for path in chosen)
    assert {path.name for path in chosen} == {path.name for path in LESSON.parent.glob("*.ipynb")}
    chosen.clear()
    monkeypatch.setenv("COURSE_LANG", "en")
    assert slides.main([str(tmp_path)]) == 0 and all(path.parent == LESSON.parent for path in chosen)
    monkeypatch.undo()

    japanese = LESSON.parent / "ja" / LESSON.name
    assert slides.main([str(tmp_path), str(japanese)]) == 0
    html = (tmp_path / "01_the_wire.slides.html").read_text(encoding="utf-8")
    assert '<html lang="ja">' in html and "ワイヤー" in html
    assert '<html lang="en">' in deck.read_text(encoding="utf-8")
