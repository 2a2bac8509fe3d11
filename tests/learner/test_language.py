"""The Japanese edition of the labelled prompts (course_lib.experiments.language) and list-valued expectations."""

import json
from pathlib import Path

import pytest

from course_lib.experiments import right_call
from course_lib.experiments.language import declarations, load_translations, prompts_in

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = json.loads((ROOT / "data/tool_prompts.json").read_text())["prompts"]
TRANSLATIONS = load_translations(ROOT / "data/tool_prompts_ja.json")


def response(name: str, **arguments: str) -> dict:
    return {"calls": [{"name": name, "arguments": arguments}]}


def test_every_prompt_has_a_japanese_text_and_keeps_its_label():
    japanese = prompts_in("ja", PROMPTS, TRANSLATIONS)
    assert [p["id"] for p in japanese] == [p["id"] for p in PROMPTS]
    for english, translated in zip(PROMPTS, japanese):
        assert translated["text"] != english["text"]
        assert (translated["kind"], translated["tool"]) == (english["kind"], english["tool"])
        assert any(ord(ch) > 0x3000 for ch in translated["text"]), translated["text"]


def test_a_missing_translation_is_an_error_not_an_english_prompt():
    partial = {**TRANSLATIONS, "prompts": {k: v for k, v in TRANSLATIONS["prompts"].items() if k != "call-08"}}
    with pytest.raises(ValueError, match="call-08"):
        prompts_in("ja", PROMPTS, partial)


def test_a_japanese_city_name_counts_and_a_wrong_city_does_not():
    tokyo = next(p for p in prompts_in("ja", PROMPTS, TRANSLATIONS) if p["id"] == "call-08")
    assert right_call(tokyo, response("get_weather", city="東京"))
    assert right_call(tokyo, response("get_weather", city="tokyo"))
    assert not right_call(tokyo, response("get_weather", city="大阪"))
    assert not right_call(tokyo, response("now"))
    english = next(p for p in PROMPTS if p["id"] == "call-08")
    assert not right_call(english, response("get_weather", city="東京"))  # the English label is unchanged


def test_both_languages_declare_the_same_tools_and_arguments():
    english, japanese = declarations("en", TRANSLATIONS), declarations("ja", TRANSLATIONS)
    assert [t["function"]["name"] for t in english] == [t["function"]["name"] for t in japanese]
    assert {p["tool"] for p in PROMPTS if p["tool"]} <= {t["function"]["name"] for t in english}
    for en, ja in zip(english, japanese):
        assert en["function"]["parameters"] == {**ja["function"]["parameters"], "properties": {
            name: {**spec, "description": en["function"]["parameters"]["properties"][name]["description"]}
            for name, spec in ja["function"]["parameters"]["properties"].items()}}
    stock = next(t for t in japanese if t["function"]["name"] == "get_product_stock")
    assert "推測で答えてはならない" in stock["function"]["description"]  # the seed article's own words


def test_a_file_without_its_parts_is_a_clear_error(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"prompts": {}}))
    with pytest.raises(ValueError, match="tool_results"):
        load_translations(broken)
