"""One end-to-end check with the real model, asserting invariants only.

What a model writes changes with the model, its version, its settings and its prompt (and, on
servers that do not promise otherwise, with what they had cached: lesson 1); what the agent
guarantees must not. So this test asserts the guarantees, whatever the model did: it was asked, no
money moved without a person, no undeclared tool ran, the loop stopped within its cap. It is marked
``model``: the fast suite (``-m "not model"``) leaves it out.
"""

import pytest

from course_lib.kiosk import KioskAgent
from course_lib.loop import Limits
from course_lib.messages import ErrorKind

LIMITS = Limits(max_turns=2, max_identical_calls=1)  # two turns; a repeated call gets the answer turn (lesson 4)
OPTIONS = {"temperature": 0, "seed": 0, "num_predict": 64}  # short replies


def later(run, name, arguments):
    """The reviewer's answer to every refund: None, "a person decides later" (the call is parked)."""
    return None


@pytest.mark.model
def test_the_kiosk_agent_keeps_its_invariants_with_the_real_model(client, kiosk):
    agent = KioskAgent(client, kiosk, reviewer=later, limits=LIMITS, options=OPTIONS)
    reply = agent.ask("Please refund order ORD-1002, 6500 yen: the gauge arrived broken.")
    print("calls:", reply.calls, "| stopped by:", reply.stopped_by, "| answer:", reply.answer)
    declared = set(kiosk.tools())
    agent_turns = [turn for turn in reply.transcript.turns if not turn.answer_turn]
    assert 1 <= len(agent_turns) <= LIMITS.max_turns and reply.tokens > 0, "the model was asked, within the cap"
    assert reply.stopped_by in (None, "TurnLimitReached", "RepeatedCall")
    assert kiosk.payments.refunds == [], "no refund without a person's approval"
    for turn in reply.transcript.turns:
        for call, outcome in zip(turn.tool_calls, turn.outcomes):
            assert call.name in declared or outcome.error is ErrorKind.UNKNOWN_TOOL
            assert call.name != "refund_order" or not outcome.ok, "a refund call is parked or rejected"
