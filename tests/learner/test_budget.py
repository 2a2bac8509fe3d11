"""Rate limits and spend caps (``security.budget``), on a clock moved by hand: no sleeping, no model."""

import pytest

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.loop import run_agent
from course_lib.messages import ErrorKind
from course_lib.security import ApprovalGate, RunContext, guarded_executor
from course_lib.security.budget import Budget, RateLimit


class Clock:
    """A clock that stands still until a test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_rate_limit_lets_n_calls_through_per_window_and_no_more():
    clock = Clock()
    budget = Budget({"delivery_quote": RateLimit(2, 60)}, clock=clock)
    assert budget.allow("delivery_quote") is None
    clock.now += 10
    assert budget.allow("delivery_quote") is None
    clock.now += 10
    refused = budget.allow("delivery_quote")
    assert refused == ("rate limit: delivery_quote may run 2 times per 60 s; it can run again in 40 s. "
                       "Answer with what you have.")
    clock.now += 39.5
    assert budget.allow("delivery_quote") is not None, "the first call is still in the window"
    clock.now += 0.5
    assert budget.allow("delivery_quote") is None, "60 s after the first call, it has left the window"
    assert budget.allow("delivery_quote") is not None, "and the second and third are still in it"


def test_a_refused_call_does_not_use_up_the_window():
    clock = Clock()
    budget = Budget({"send_email": RateLimit(1, 30)}, clock=clock)
    assert budget.allow("send_email") is None
    for _ in range(5):
        clock.now += 5
        assert budget.allow("send_email") is not None
    clock.now += 5
    assert budget.allow("send_email") is None, "30 s after the one call that ran; refusals were not counted"


def test_limits_are_per_tool_and_tools_without_one_are_free():
    budget = Budget({"send_email": RateLimit(1, 60)}, clock=Clock())
    assert budget.allow("send_email") is None and budget.allow("send_email") is not None
    assert all(budget.allow("get_product_stock") is None for _ in range(100))


def test_the_spend_cap_refuses_the_call_that_would_go_over_it_and_charges_nothing_for_it():
    budget = Budget(prices_jpy={"delivery_quote": 20, "credit_check": 50}, cap_jpy=100, clock=Clock())
    assert budget.allow("credit_check") is None and budget.allow("delivery_quote") is None
    assert budget.spent_jpy == 70 and budget.remaining_jpy == 30
    refused = budget.allow("credit_check")
    assert refused == ("spend cap: credit_check costs 50 yen a call and 70 of the 100 yen budget is spent. "
                       "Answer with what you have.")
    assert budget.spent_jpy == 70, "a refused call costs nothing"
    assert budget.allow("delivery_quote") is None and budget.spent_jpy == 90, "a cheaper call still fits"
    assert budget.allow("get_product_stock") is None and budget.spent_jpy == 90, "an unpriced tool is free"


def test_a_cap_exactly_reached_is_not_exceeded():
    budget = Budget(prices_jpy={"delivery_quote": 20}, cap_jpy=40, clock=Clock())
    assert [budget.allow("delivery_quote") is None for _ in range(3)] == [True, True, False]
    assert budget.remaining_jpy == 0


@pytest.mark.parametrize("make", [lambda: RateLimit(0, 60), lambda: RateLimit(1, 0),
                                  lambda: Budget(prices_jpy={"x": -1}), lambda: Budget(cap_jpy=-5)],
                         ids=["no calls", "no window", "negative price", "negative cap"])
def test_a_budget_that_makes_no_sense_is_refused_when_it_is_made(make):
    with pytest.raises(ValueError):
        make()


def delivery_quote(postcode: str) -> str:
    """A delivery quote from the carrier's paid API.

    Args:
        postcode: the customer's postcode, e.g. 150-0001
    """
    QUOTES.append(postcode)
    return f"delivery to {postcode}: 2 days, 800 yen"


QUOTES: list[str] = []


def run_with(stack, script, prompt="Quote delivery to 150-0001, 530-0001 and 810-0001."):
    QUOTES.clear()
    model = ScriptedModel(script)
    run = RunContext(prompt, {}, model)
    transcript = run_agent(model, [{"role": "user", "content": prompt}], {"delivery_quote": delivery_quote},
                           execute=guarded_executor(stack, run, {"delivery_quote": delivery_quote}))
    return transcript, run, model


def test_in_the_loop_the_call_over_the_cap_never_runs_and_the_model_reads_why():
    budget = Budget(prices_jpy={"delivery_quote": 20}, cap_jpy=40, clock=Clock())
    script = [calls("delivery_quote", postcode=code) for code in ("150-0001", "530-0001", "810-0001")]
    transcript, run, model = run_with([budget], script + [says("Two quotes; the third is over budget.")])
    assert QUOTES == ["150-0001", "530-0001"] and budget.spent_jpy == 40
    third = transcript.turns[2].outcomes[0]
    assert third.error is ErrorKind.REFUSED and third.text.startswith("error: refused: spend cap: delivery_quote")
    assert model.requests[3][-1]["content"] == third.text, "the refusal went back to the model"
    assert transcript.answer == "Two quotes; the third is over budget." and len(run.refusals) == 1


def test_invalid_arguments_and_calls_refused_by_an_earlier_guard_cost_nothing():
    budget = Budget(prices_jpy={"delivery_quote": 20}, cap_jpy=40, clock=Clock())
    gate = ApprovalGate(reviewer=lambda run, name, arguments: False, tools=frozenset({"delivery_quote"}))
    script = [calls("delivery_quote", postcode=150), calls("delivery_quote", postcode="150-0001"), says("No.")]
    transcript, run, _ = run_with([gate, budget], script)
    kinds = [turn.outcomes[0].error for turn in transcript.turns[:2]]
    assert kinds == [ErrorKind.INVALID_ARGUMENTS, ErrorKind.REFUSED] and "reviewer denied" in run.refusals[0][2]
    assert budget.spent_jpy == 0 and QUOTES == []
