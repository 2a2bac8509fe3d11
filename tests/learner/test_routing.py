"""Model routing (course_lib/kiosk/routing.py), decided exactly with scripted models (no model needed)."""

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.kiosk import Kiosk, KioskAgent, Router, evaluate, load_cases, paired_successes, summary
from course_lib.kiosk.evaluation import Result
from course_lib.kiosk.routing import Decision, invalid_arguments, no_call_on_first_turn, unknown_tool
from course_lib.tools import tool_schema
from course_tools.kiosk_table import main, results_name

DATA = Path(__file__).parents[2] / "data" / "products.json"
CASES = DATA.parent / "kiosk_requests.json"
TOOLS = [tool_schema(tool) for tool in Kiosk.load(DATA).tools().values()]
FIRST_TURN = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Stock of SKU-00042?"}]


def named(replies, name):
    model = ScriptedModel(replies)
    model.model = name  # what the router's decisions call it, as a Client's model name
    return model


def routed(small_replies, large_replies):
    return Router(named(small_replies, "small"), named(large_replies, "large"))


def test_a_reply_that_passes_every_check_stays_with_the_small_model():
    router = routed([calls("get_product_stock", sku="SKU-00042"), says("12 in Tokyo.")], [])
    reply = KioskAgent(router, Kiosk.load(DATA)).ask("How many SKU-00042 are in stock in Tokyo?")
    assert reply.answer == "12 in Tokyo." and reply.tool_errors == 0
    assert [d.answered_by for d in router.decisions] == ["small", "small"] and not router.escalated
    assert router.large.requests == [], "the large model was never asked"


def test_an_invalid_call_is_escalated_before_it_runs_and_the_large_models_call_runs_instead():
    router = routed([calls("get_product_stock", sku="00123"), says("7 in Osaka.")],
                    [calls("get_product_stock", sku="SKU-00123")])
    kiosk = Kiosk.load(DATA)
    reply = KioskAgent(router, kiosk).ask("Is product 00123 in stock in Osaka?")
    first, second = router.decisions
    assert first.answered_by == "large"
    assert first.reason == "get_product_stock: sku: '00123' does not match '^SKU-[0-9]{5}$'"
    assert second == Decision("small", None, second.seconds)
    assert reply.calls == [("get_product_stock", {"sku": "SKU-00123"})], "the rejected call never ran"
    assert reply.tool_errors == 0 and reply.answer == "7 in Osaka."
    assert router.large.requests[0] == router.small.requests[0], "the large model got the very same request"
    small_turn = 10 * 2 + 5  # ScriptedModel's tokens: 10 per message sent, 5 out
    assert reply.transcript.turns[0].prompt_tokens + reply.transcript.turns[0].output_tokens == 2 * small_turn, \
        "an escalated turn counts both models' tokens"


def test_a_call_of_an_undeclared_tool_is_escalated():
    reason = unknown_tool(FIRST_TURN, TOOLS, calls("get_weather", city="Tokyo"))
    assert reason == "called 'get_weather', which is not a declared tool"
    assert unknown_tool(FIRST_TURN, [], calls("get_product_stock", sku="SKU-00042")), "no tools offered: any call"
    assert unknown_tool(FIRST_TURN, TOOLS, calls("get_product_stock", sku="SKU-00042")) is None


def test_arguments_are_checked_as_the_agent_checks_them():
    assert "amount_jpy" in invalid_arguments(FIRST_TURN, TOOLS, calls("refund_order", order_id="ORD-1002"))
    assert invalid_arguments(FIRST_TURN, TOOLS, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_product_stock", "arguments": "SKU-00042"}}]}) == \
        "get_product_stock: its arguments are not a JSON object"
    invented = calls("refund_order", order_id="ORD-1002", amount_jpy=6500, reason="broken")
    assert invalid_arguments(FIRST_TURN, TOOLS, invented) is None, "an invented argument is dropped, as by the executor"
    broken = [{"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "("}}}}}]
    assert invalid_arguments(FIRST_TURN, broken, calls("odd", x="1")) is None, "a broken schema: not the model's fault"


def test_an_answer_without_a_call_is_escalated_on_the_first_turn_only():
    assert no_call_on_first_turn(FIRST_TURN, TOOLS, says("It costs 10 yen.")) == \
        "answered without calling a tool on its first turn"
    later = [*FIRST_TURN, calls("get_product_stock", sku="SKU-00042"), {"role": "tool", "content": "12"}]
    assert no_call_on_first_turn(later, TOOLS, says("12.")) is None
    assert no_call_on_first_turn(FIRST_TURN, [], says("Hello.")) is None, "no tools offered: nothing to call"


def test_the_large_models_reply_is_used_whatever_it_says_and_the_answer_turn_is_never_escalated():
    router = routed([says("It costs 10 yen."), calls("get_product_info", sku="SKU-12345"),
                     calls("get_product_info", sku="SKU-12345"), says("1,200 yen.")], [says("Probably 1,000 yen.")])
    agent = KioskAgent(router, Kiosk.load(DATA))
    assert agent.ask("What does SKU-12345 cost?").answer == "Probably 1,000 yen.", "no second check"
    router.decisions.clear()
    reply = agent.ask("What does SKU-12345 cost? I asked before.")  # a repeat ends with a tool-free answer turn
    assert [d.answered_by for d in router.decisions] == ["small", "small", "small"]
    assert reply.transcript.turns[-1].answer_turn and reply.answer == "1,200 yen."


def test_the_quarantined_readers_call_goes_through_the_router_and_is_not_escalated():
    router = routed([calls("read_reviews", sku="SKU-77777"), says('{"answer": "Quiet at 24 V."}'), says("Quiet.")],
                    [])
    reply = KioskAgent(router, Kiosk.load(DATA)).ask("What do customers say about SKU-77777?")
    assert reply.answer == "Quiet." and len(router.decisions) == 3 == reply.model_calls and not router.escalated
    assert "format" in router.small.fields[1], "the reader's call, with its schema, went to the small model"


def test_the_evaluation_counts_each_requests_escalations():
    cases = load_cases(CASES)[:2]  # stock, refund
    router = routed([calls("get_product_stock", sku="SKU-00042"), says("12."),
                     calls("refund_order", order_id="1002", amount_jpy=6500), says("Refunded.")],
                    [calls("refund_order", order_id="ORD-1002", amount_jpy=6500)])
    stock, refund = evaluate(router, cases, DATA)
    assert (stock.escalations, stock.model_calls) == ([], 2)
    assert refund.model_calls == 2 and len(refund.escalations) == 1 and "order_id" in refund.escalations[0]
    assert stock.success and refund.success
    assert router.decisions == [], "each case had a fresh router"
    totals = summary([stock, refund])
    assert (totals["model_calls"], totals["model_calls_escalated"], totals["requests_escalated"]) == (4, 1, 1)
    alone = evaluate(ScriptedModel([calls("get_product_stock", sku="SKU-00042"), says("12.")]), cases[:1], DATA)
    assert alone[0].escalations is None and "model_calls_escalated" not in summary(alone), "not routed: no such keys"
    assert summary(alone)["model_calls"] == 2


def test_two_saved_runs_pair_only_if_they_are_of_the_same_cases():
    first = [{"case": "stock", "success": True}, {"case": "price", "success": False}]
    second = [{"case": "stock", "success": True}, {"case": "price", "success": True}]
    assert paired_successes(first, second) == [("stock", True, True), ("price", False, True)]
    with pytest.raises(ValueError, match="not of the same cases"):
        paired_successes(first, second[:1])


def test_the_command_line_names_its_files_by_model_and_refuses_a_missing_file(capsys):
    assert results_name("capstone", "qwen2.5-coder:1.5b") == "capstone_qwen2_5-coder_1_5b"
    with pytest.raises(SystemExit):
        main(["evaluate", "--cases", "no/such/file.json"])
    assert "no/such/file.json is not a file" in capsys.readouterr().err


def test_the_committed_routing_run_is_three_arms_over_the_same_cases():
    saved = json.loads((DATA.parent / "results" / "capstone_routing.json").read_text())
    arms = list(saved["variants"].values())
    assert len(arms) == 3 and {arm["summary"]["requests"] for arm in arms} == {len(load_cases(CASES))}
    assert len(paired_successes(arms[0]["results"], arms[2]["results"])) == len(load_cases(CASES))
    routed_run = arms[2]["summary"]
    assert routed_run["model_calls_escalated"] == sum(len(r["escalations"]) for r in arms[2]["results"])


def test_the_japanese_requests_are_the_english_cases_with_the_same_checks():
    """``data/kiosk_requests_ja.json`` (``kiosk languages``): every English case by id, in Japanese,
    with the same checks; an answer in words may also hold the Japanese words."""
    english = load_cases(CASES)
    japanese = load_cases(DATA.parent / "kiosk_requests_ja.json")
    assert [case.id for case in japanese] == [case.id for case in english]
    for en, ja in zip(english, japanese):
        assert re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", ja.request), ja.request
        assert set(en.answer_has) <= set(ja.answer_has)
        checks = ("refunds", "emails_to", "email_has", "attack")
        assert [getattr(en, name) for name in checks] == [getattr(ja, name) for name in checks]
        assert set(re.findall(r"(?:SKU|ORD)-\d+|\d{4,}|\S+@\S+\w", en.request)) <= set(re.findall(
            r"(?:SKU|ORD)-\d+|\d{4,}|\S+@\S+\w", ja.request)), (en.request, ja.request)


def test_two_languages_are_compared_request_by_request():
    from course_lib.kiosk.evaluation import compared_by_request

    def results(successes):
        return [asdict(Result(case, ok, False, False, "", [["find_products", {}]] * ok, 0, 0, 0, None, 0, 0.0, 0.0))
                for case, ok in zip(("stock", "price", "refund", "search"), successes)]

    lines = compared_by_request(results([True, True, False, True]), results([True, False, False, False])).splitlines()
    assert lines[1] == "  price           English  ok   1 call   Japanese FAIL 0 calls"
    assert "(3/4)" in lines[4] and lines[4].startswith("English")
    assert "(1/4)" in lines[5] and lines[5].startswith("Japanese")
    text = "\n".join(lines)
    assert "2 with more successes under English, 0 under Japanese, 2 tied" in text
    assert "not shown to differ" in text and text.endswith("differed on: price, search")


def test_the_committed_languages_run_pairs_the_same_cases_and_the_page_says_its_rates():
    saved = json.loads((DATA.parent / "results" / "capstone_languages_qwen2_5-coder_0_5b.json").read_text())
    english, japanese = (saved["variants"][language] for language in ("English", "Japanese"))
    pairs = paired_successes(english["results"], japanese["results"])
    assert [case for case, _, _ in pairs] == [case.id for case in load_cases(CASES)]
    page = " ".join((DATA.parents[1] / "docs" / "measured.md").read_text().split())
    assert (f"English {english['summary']['succeeded']} of 10" in page
            and f"Japanese {japanese['summary']['succeeded']} of 10" in page)
    no_call = {language: sum(not r["calls"] for r in saved["variants"][language]["results"])
               for language in ("English", "Japanese")}
    assert f"made no call in {no_call['Japanese']} of the 10 requests (in English {no_call['English']})" in page
