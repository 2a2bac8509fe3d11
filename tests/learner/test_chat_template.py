"""The chat-template renderer, on the template that ships inside the course's model."""

from pathlib import Path

import pytest

from course_lib.chat_template import TemplateError, render

QWEN = (Path(__file__).parents[1] / "fixtures" / "qwen2.5-coder.jinja").read_text()
NOW = {"type": "function", "function": {"name": "now", "description": "Current UTC time.",
                                         "parameters": {"type": "object", "properties": {}}}}


def test_plain_chat_gets_the_default_system_turn_and_the_assistant_opening():
    prompt = render(QWEN, [{"role": "user", "content": "Hi"}])
    assert prompt == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tools_land_in_the_system_turn_as_json_lines():
    prompt = render(QWEN, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time?"}], [NOW])
    system_turn = prompt.split("<|im_end|>")[0]
    assert system_turn.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '<tools>\n{"type": "function", "function": {"name": "now"' in system_turn
    assert "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>" in system_turn


def test_non_ascii_and_angle_brackets_are_not_escaped():
    prompt = render(QWEN, [{"role": "user", "content": "東京 <b>"}], [
        {"type": "function", "function": {"name": "weather", "description": "天気 <city>"}}])
    assert "東京 <b>" in prompt and '"天気 <city>"' in prompt


def test_a_tool_call_turn_and_its_result_are_rendered_back():
    messages = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]},
        {"role": "tool", "content": "2026-11-30T09:00:00Z", "tool_name": "now"},
    ]
    prompt = render(QWEN, messages, [NOW])
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call><|im_end|>' in prompt
    assert "<|im_start|>user\n<tool_response>\n2026-11-30T09:00:00Z\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_without_the_generation_prompt_the_text_ends_after_the_last_turn():
    prompt = render(QWEN, [{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n")


def test_raise_exception_becomes_a_template_error():
    with pytest.raises(TemplateError, match="roles must alternate"):
        render("{{ raise_exception('roles must alternate') }}", [])


def test_the_sandbox_keeps_templates_away_from_python_internals():
    from jinja2.exceptions import SecurityError
    with pytest.raises(SecurityError):
        render("{{ messages.__class__.__mro__[1].__subclasses__() }}", [])
