"""The same tools and requests in English and in Japanese: what the language costs a small model.

``data/tool_prompts_ja.json`` holds, for every labelled prompt of ``data/tool_prompts.json``,
its Japanese text (same id, kind and tool), the six tools' "what and when" declarations in
both languages (``get_product_stock``'s Japanese description is the seed article's own), and
two tool results in both languages. Lesson 2 counts what each costs in tokens; lesson 8's
experiment 7 scores tool calls on the same requests in each language.

A Japanese request may name a city in Japanese, so its expected argument values list both
spellings (``right_call`` accepts a list).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from course_lib.experiments.runner import Prompt

Language = Literal["en", "ja"]


def load_translations(path: Path) -> dict[str, Any]:
    """Read the Japanese edition of the labelled prompts; a clear error for a file that does not fit."""
    data = json.loads(path.read_text(encoding="utf-8"))
    missing = {"tools", "prompts", "tool_results"} - set(data)
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}")
    return data


def prompts_in(language: Language, prompts: list[Prompt], translations: dict[str, Any]) -> list[Prompt]:
    """The labelled prompts in ``language``: English as they are, Japanese with each text replaced.

    Every English prompt must have a Japanese text (a prompt left in English would quietly
    dilute the comparison); expected arguments are replaced where the translation gives them.
    """
    if language == "en":
        return [dict(prompt) for prompt in prompts]
    japanese = translations["prompts"]
    untranslated = [prompt["id"] for prompt in prompts if prompt["id"] not in japanese]
    if untranslated:
        raise ValueError(f"no Japanese text for {untranslated}")
    return [{**prompt, "text": japanese[prompt["id"]]["text"],
             "arguments": japanese[prompt["id"]].get("arguments", prompt["arguments"])} for prompt in prompts]


def declarations(language: Language, translations: dict[str, Any]) -> list[dict[str, Any]]:
    """The six tools as ``tools`` entries, described in ``language``; every argument a required string."""
    tools = []
    for name, tool in translations["tools"][language].items():
        properties = {argument: {"type": "string", "description": text} for argument, text in tool["arguments"].items()}
        tools.append({"type": "function", "function": {
            "name": name, "description": tool["description"],
            "parameters": {"type": "object", "properties": properties, "required": list(tool["arguments"])}}})
    return tools
