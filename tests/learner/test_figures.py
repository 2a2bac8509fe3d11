"""Figures in each edition's language (course_lib/display/figures.py): a Japanese kernel draws a
lesson's figure with its words from translations/ja/plots.md and a font that has them; an English
kernel run by course_tools refresh adds that drawing to the output for the Japanese edition, which
the build puts in place."""

import base64
import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from course_lib.check_messages import translations  # noqa: E402
from course_lib.display import figures, plot_rates, plot_table, plot_timeline  # noqa: E402
from course_lib.experiments import Rate  # noqa: E402
from course_lib.loop import Transcript, Turn  # noqa: E402
from course_lib.messages import ToolCall  # noqa: E402
from course_lib.security.table import Row  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def rate(successes: int, n: int) -> Rate:
    return Rate(successes, n)


def texts(figure) -> list[str]:
    from matplotlib.text import Text

    figure.canvas.draw()
    return [text.get_text() for text in figure.findobj(Text) if text.get_visible() and text.get_text()]


def library_figures():
    """One figure from each of the library's plots, with the words the lessons give them."""
    yield plot_rates({"vague": rate(3, 10), "what and when": rate(8, 10)}, "Right call when a tool is needed")
    rows = [Row(defense, *[rate(5, 10)] * 5, rate(2, 10), rate(8, 10), rate(2, 8), 0, 0, 2.0, 900.0)
            for defense in ("no defense", "tool filter", "spotlighting")]
    yield plot_table(rows, "Defense table (qwen2.5-coder:0.5b, 10 attacked cases per defense)")
    call = Turn({"role": "assistant"}, 300, 20, 1.2, tool_calls=[ToolCall("calc", {"expression": "17*23"})])
    transcript = Transcript(messages=[], turns=[call, Turn({"role": "assistant"}, 340, 12, 0.8, text="391")])
    yield plot_timeline(transcript, title="What is 17 * 23? (stopped by a limit)")


@pytest.mark.parametrize("figure", list(library_figures()), ids=["plot_rates", "plot_table", "plot_timeline"])
def test_a_library_figure_in_japanese_keeps_no_english_word_and_is_put_back_after(figure):
    english = texts(figure)
    assert any(figures.english_words(text) for text in english)
    with figures.in_language(figure, "ja") as untranslated:
        japanese = texts(figure)
        assert untranslated() == [], untranslated()
        assert japanese != english
        assert {text.get_fontfamily()[0] for text in figure.findobj(matplotlib.text.Text)} == {"IPAexGothic"}
    assert texts(figure) == english


def test_a_value_in_a_template_is_translated_where_the_catalogue_has_it():
    assert figures.translated("What time is it? with answer_on_repeat", "ja") == "今何時? (answer_on_repeat あり)"
    assert figures.translated("  calc (300 in / 20 out)", "ja") == "  calc (入力 300 / 出力 20)"
    assert figures.translated("vague\n(n=10)", "ja") == "あいまい\n(n=10)"
    assert figures.translated("a title no one wrote", "ja") == "a title no one wrote"


def test_identifiers_and_values_are_no_english_words():
    assert figures.english_words("execute_tool get_time  SKU-00042 qwen2.5-coder:0.5b now() 1.2 ASR") == []
    assert figures.english_words("Trace of: now") == ["Trace", "now"]
    assert figures.unknown_lines("calc (300 in / 20 out)\nASR\nno such title", "ja") == ["no such title"]


def test_a_refreshed_english_kernel_adds_the_japanese_drawing_and_a_japanese_kernel_draws_in_japanese(monkeypatch):
    figure = next(library_figures())
    monkeypatch.setenv("COURSE_LANG", "en")
    monkeypatch.delenv("COURSE_FIGURE_EDITIONS", raising=False)
    assert figures.bundle(figure)[1] == {}, "a learner's English kernel draws English only"
    from course_tools.refresh import kernel_environment

    monkeypatch.setenv("COURSE_FIGURE_EDITIONS", kernel_environment()["COURSE_FIGURE_EDITIONS"])
    data, metadata = figures.bundle(figure)
    drawings = metadata[figures.METADATA]
    assert set(drawings) == {"ja"} and drawings["ja"]["untranslated"] == []
    assert drawings["ja"]["image/png"] != data["image/png"]
    monkeypatch.setenv("COURSE_LANG", "ja")
    japanese, none = figures.bundle(figure)
    assert japanese["image/png"] == drawings["ja"]["image/png"] and none == {}
    assert base64.b64decode(japanese["image/png"]).startswith(b"\x89PNG")


def test_the_catalogue_of_the_figures_words_reads():
    assert len(translations("ja", name=figures.CATALOGUE)) >= 50


def committed_figures(folder: str):
    for path in sorted((ROOT / folder).glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                if "image/png" in output.get("data", {}):
                    yield path, cell["id"], output


# Figures committed before the course drew them in Japanese too, whose lesson's text quotes the numbers
# of the run they were drawn from (lesson 8's rates, from an 18-minute run): they get their Japanese
# drawing when the lesson is next run in full and its text follows the new run.
DRAWN_IN_ENGLISH_ONLY = {("08_experiments", "08-11"),
                         ("08_experiments", "08-14"), ("08_experiments", "799d09af")}


def test_every_committed_figure_has_its_japanese_drawing_with_every_word_translated():
    english_only = set()
    for path, cell, output in committed_figures("notebooks"):
        drawings = output.get("metadata", {}).get(figures.METADATA)
        if drawings is None:
            english_only.add((path.stem, cell))
            continue
        assert drawings["ja"]["untranslated"] == [], f"{path.name} {cell}: {drawings['ja']['untranslated']}"
    assert english_only == DRAWN_IN_ENGLISH_ONLY


def test_the_japanese_edition_shows_the_japanese_drawings():
    english = {(path.stem, cell): output for path, cell, output in committed_figures("notebooks")}
    for path, cell, output in committed_figures("notebooks/ja"):
        drawings = english[(path.stem, cell)].get("metadata", {}).get(figures.METADATA)
        assert figures.METADATA not in output.get("metadata", {})
        if drawings:
            assert output["data"]["image/png"] == drawings["ja"]["image/png"], (path.name, cell)
