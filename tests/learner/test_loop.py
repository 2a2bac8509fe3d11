"""The agent loop, with a scripted model: every limit fires, and says why."""

import pytest

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.loop import (
    Limits,
    RepeatedCall,
    TimeBudgetExceeded,
    TokenBudgetExceeded,
    TurnLimitReached,
    call_key,
    run_agent,
)

QUESTION = [{"role": "user", "content": "What is 6 * 7, and what time is it?"}]


def calc(expression: str) -> str:
    """Evaluate arithmetic."""
    return {"6 * 7": "42"}.get(expression, "?")


def now() -> str:
    """The time."""
    return "02:28"


TOOLS = {"calc": calc, "now": now}


def test_a_run_that_converges():
    model = ScriptedModel([calls("calc", expression="6 * 7"), calls("now"), says("42, and it is 02:28.")])
    transcript = run_agent(model, QUESTION, TOOLS)
    assert transcript.answer == "42, and it is 02:28."
    assert [turn.calls for turn in transcript.turns] == [[("calc", {"expression": "6 * 7"})], [("now", {})], []]
    roles = [m["role"] for m in transcript.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert transcript.messages[2] == {"role": "tool", "tool_name": "calc", "content": "42"}
    assert model.requests[1][-1] == transcript.messages[2], "the result was sent back to the model"
    assert transcript.tokens == (10 + 5) + (30 + 5) + (50 + 5)


def test_the_turn_cap_raises_with_the_transcript():
    model = ScriptedModel([calls("calc", expression=f"{i} * 7") for i in range(3)])
    with pytest.raises(TurnLimitReached, match="no answer after 3 turns") as stopped:
        run_agent(model, QUESTION, TOOLS, Limits(max_turns=3))
    assert len(stopped.value.transcript.turns) == 3


def test_a_repeated_identical_call_is_stopped_before_it_runs():
    model = ScriptedModel([calls("now"), calls("now"), calls("now")])
    with pytest.raises(RepeatedCall, match=r"now\(\{\}\) was requested 3 times") as stopped:
        run_agent(model, QUESTION, TOOLS, Limits(max_identical_calls=2))
    turns = stopped.value.transcript.turns
    assert [len(turn.results) for turn in turns] == [1, 1, 0]


def test_argument_order_does_not_hide_a_repeat():
    assert call_key("f", {"a": 1, "b": 2}) == call_key("f", {"b": 2, "a": 1})


def test_token_budget():
    model = ScriptedModel([calls("now"), calls("calc", expression="6 * 7"), says("done")])
    with pytest.raises(TokenBudgetExceeded, match="50 tokens used, budget 40"):
        run_agent(model, QUESTION, TOOLS, Limits(max_tokens=40))


def test_time_budget():
    class SlowModel(ScriptedModel):
        def chat(self, *args, **kwargs):
            import time
            time.sleep(0.05)
            return super().chat(*args, **kwargs)

    with pytest.raises(TimeBudgetExceeded):
        run_agent(SlowModel([calls("now"), calls("calc", expression="6 * 7"), says("x")]), QUESTION, TOOLS,
                  Limits(max_seconds=0.07))


def test_an_executor_can_refuse_and_still_answers_every_call():
    def refuse_clock(name, arguments):
        return "error: the clock is not available" if name == "now" else "ok"

    model = ScriptedModel([calls("now"), says("I cannot tell the time.")])
    transcript = run_agent(model, QUESTION, TOOLS, execute=refuse_clock)
    assert transcript.turns[0].results == [{"role": "tool", "tool_name": "now",
                                            "content": "error: the clock is not available"}]


def test_unknown_tools_and_bad_arguments_become_error_results():
    model = ScriptedModel([calls("cat_joke"), calls("calc", expr="1"), says("sorry")])
    transcript = run_agent(model, QUESTION, TOOLS)
    assert [t.results[0]["content"].split(":")[0] for t in transcript.turns[:2]] == ["error", "error"]


def test_the_script_running_out_is_a_loud_failure():
    with pytest.raises(AssertionError, match="once too often"):
        ScriptedModel([]).chat(QUESTION)


def test_answer_on_repeat_ends_with_a_marked_answer_turn_built_from_the_results():
    model = ScriptedModel([calls("calc", expression="6 * 7"), calls("calc", expression="6 * 7"), says("It is 42.")])
    transcript = run_agent(model, QUESTION, TOOLS, Limits(max_identical_calls=1), answer_on_repeat=True)
    assert transcript.answer == "It is 42." and transcript.turns[-1].answer_turn
    assert [t.answer_turn for t in transcript.turns] == [False, False, True]
    final_request = model.requests[-1]
    assert final_request[0]["role"] == "system" and len(final_request) == 2
    assert final_request[1]["content"] == (
        'Question: What is 6 * 7, and what time is it?\n\nTool results:\ncalc({"expression": "6 * 7"}) = 42')
