"""The agent loop (lesson 4) and the capstone's agent (lesson 11), driven by a scripted model.

``ScriptedModel`` answers with the replies it is given, in order, and records every request.
So a test decides what "the model" says and asserts on what the agent did with it: the
transcript, the limits, the refusals. Nothing here depends on what a real model would say.
"""

import pytest

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.kiosk import KioskAgent
from course_lib.loop import Limits, RepeatedCall, TurnLimitReached, run_agent


def test_a_lookup_goes_out_and_its_result_comes_back(kiosk):
    model = ScriptedModel([calls("get_product_stock", sku="SKU-00042"), says("12 in Tokyo.")])
    transcript = run_agent(model, [{"role": "user", "content": "Stock of SKU-00042?"}], kiosk.tools())
    assert [message["role"] for message in transcript.messages] == ["user", "assistant", "tool", "assistant"]
    assert transcript.messages[2]["content"] == '{"tokyo": 12, "osaka": 0, "fukuoka": 4}'
    assert model.requests[1][-1] == transcript.messages[2], "the model was sent the result"
    assert transcript.answer == "12 in Tokyo."


def test_every_call_gets_an_answer_even_an_invented_one(kiosk):
    model = ScriptedModel([calls("cat_joke"), says("Sorry, I cannot.")])
    transcript = run_agent(model, [{"role": "user", "content": "Tell me a joke."}], kiosk.tools())
    assert transcript.messages[2]["content"].startswith("error: there is no tool named 'cat_joke'")


@pytest.mark.parametrize("limits, stop", [(Limits(max_turns=3, max_identical_calls=9), TurnLimitReached),
                                          (Limits(max_turns=9, max_identical_calls=2), RepeatedCall)],
                         ids=["turn cap", "repeated call"])
def test_a_model_that_never_stops_is_stopped_by_a_limit_that_says_which(kiosk, limits, stop):
    model = ScriptedModel([calls("get_product_stock", sku="SKU-00042")] * 9)
    with pytest.raises(stop) as stopped:
        run_agent(model, [{"role": "user", "content": "Stock?"}], kiosk.tools(), limits)
    assert len(stopped.value.transcript.turns) == 3, "it raises with the transcript so far"


def test_a_refund_the_customer_asked_for_is_paid_once(kiosk):
    model = ScriptedModel([calls("refund_order", order_id="ORD-1002", amount_jpy=6500), says("Refunded.")])
    reply = KioskAgent(model, kiosk).ask("Please refund order ORD-1002, it arrived broken.")
    assert [refund["order_id"] for refund in kiosk.payments.refunds] == ["ORD-1002"]
    assert reply.answer == "Refunded." and reply.refusals == []


def test_a_refund_nobody_asked_for_is_refused_and_the_model_is_told(kiosk):
    model = ScriptedModel([calls("refund_order", order_id="ORD-1001", amount_jpy=9600), says("Sorry.")])
    reply = KioskAgent(model, kiosk).ask("What does SKU-00042 cost?")
    assert kiosk.payments.refunds == [] and reply.approvals_asked == 1
    assert model.requests[1][-1]["content"] == "error: refused: a human reviewer denied this action"
