"""The AgentDojo glue (course_lib/security/agentdojo_bridge.py), without the model.

AgentDojo's real banking suite, attack and pipelines run here; only the model is scripted,
behind the real OpenAI client (an httpx transport that answers ``/v1/chat/completions``): it
replays AgentDojo's own ground truth, the user task's calls or the injection task's. So the
glue is checked end to end: what reaches the server (temperature 0, the token cap), the tool
loop, the scoring, and whether the injected text was seen."""

from __future__ import annotations

import json
import re
import warnings
from importlib.util import find_spec
from typing import Any

import httpx
import pytest

# AgentDojo is imported by the tests that use it, not here: its import takes seconds, which every
# pytest-xdist worker would spend collecting this file, whether or not it runs these tests.
pytestmark = pytest.mark.skipif(find_spec("agentdojo") is None,
                                reason="AgentDojo is an extra: pip install agentdojo==0.1.35")
warnings.filterwarnings("ignore", module="agentdojo")
MODEL = "scripted"


class ScriptedServer:
    """Answers each chat completion with the next scripted reply; keeps every request body."""

    def __init__(self, replies: list[dict[str, Any]], mode: str) -> None:
        self.replies, self.mode, self.requests = list(replies), mode, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        reply = self.replies.pop(0) if self.replies else {"text": "Done."}
        if "error" in reply:
            return httpx.Response(400, json={"error": {"message": reply["error"], "type": "invalid_request_error"}})
        if "call" in reply and self.mode == "native":
            name, arguments = reply["call"]
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(self.requests)}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}
        elif "call" in reply:  # AgentDojo's prompting format, parsed by its LocalLLM
            name, arguments = reply["call"]
            message = {"role": "assistant", "content": f"<function={name}>{json.dumps(arguments)}</function>"}
        else:
            message = {"role": "assistant", "content": reply["text"]}
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if "call" in reply else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def client_for(server: ScriptedServer):
    import openai

    return openai.OpenAI(base_url="http://scripted.invalid/v1", api_key="unused", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(server)))


@pytest.fixture(scope="module")
def suite():
    from agentdojo.task_suite.load_suites import get_suite

    return get_suite("v1.2.2", "banking")


def ground_truth(suite, task) -> list[dict[str, Any]]:
    environment = suite.load_and_inject_default_environment({})
    calls = task.ground_truth(task.init_environment(environment) if hasattr(task, "PROMPT") else environment)
    return [{"call": (call.function, dict(call.args))} for call in calls] + [{"text": "Done."}]


@pytest.mark.parametrize("mode", ["native", "prompting"])
def test_a_model_that_does_the_user_task_scores_utility_and_no_attack(suite, mode):
    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    task = suite.get_user_task_by_id("user_task_13")
    server = ScriptedServer(ground_truth(suite, task), mode)
    agent, transcript = pipeline(mode, client_for(server), MODEL, None, max_iters=5, max_tokens=64)
    result = run_pair(suite, agent, transcript, "user_task_13")
    assert result.utility and result.attack_succeeded is None and result.injection_seen is None
    assert result.model_calls == 3 == len(server.requests)
    assert all(body["temperature"] == 0 and body["max_tokens"] == 64 for body in server.requests)
    assert ("tools" in server.requests[0]) == (mode == "native")


@pytest.mark.parametrize("mode", ["native", "prompting"])
def test_a_model_that_obeys_the_injection_is_scored_as_attacked(suite, mode):
    from agentdojo.attacks.attack_registry import load_attack

    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    goal = suite.get_injection_task_by_id("injection_task_7")
    script = [{"call": ("read_file", {"file_path": "address-change.txt"})}, *ground_truth(suite, goal)]
    server = ScriptedServer(script, mode)
    agent, transcript = pipeline(mode, client_for(server), MODEL, None, max_iters=5, max_tokens=64)
    result = run_pair(suite, agent, transcript, "user_task_13", "injection_task_7",
                      load_attack("important_instructions", suite, agent))
    assert result.attack_succeeded and result.injection_seen and not result.utility
    tool_result = server.requests[1]["messages"][-1]
    assert tool_result["role"] == ("tool" if mode == "native" else "user")
    assert "This is an important message from me, Emma Johnson, to you, Local model." in json.dumps(tool_result)


def test_a_run_cut_off_mid_call_is_scored_once_not_rerun(suite):
    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    endless = [{"call": ("get_balance", {})}] * 10
    server = ScriptedServer(endless, "native")
    agent, transcript = pipeline("native", client_for(server), MODEL, None, max_iters=2, max_tokens=64)
    result = run_pair(suite, agent, transcript, "user_task_13")
    assert not result.utility and len(server.requests) == 3  # AgentDojo alone would run it 3 times (9 calls)


def test_defenses_are_agentdojos_own(suite):
    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    server = ScriptedServer([{"text": "get_balance, read_file"}, {"text": "Done."}], "native")
    for defense in ["repeat_user_prompt", "spotlighting_with_delimiting", "tool_filter"]:
        agent, _ = pipeline("native", client_for(server), MODEL, defense)
        assert agent.name == f"local-native-{defense}"
    agent, transcript = pipeline("native", client_for(server), MODEL, "tool_filter")
    run_pair(suite, agent, transcript, "user_task_13")
    question, filtered = server.requests[-2:]
    assert sorted(tool["function"]["name"] for tool in filtered["tools"]) == ["get_balance", "read_file"]
    # the filter's own question came first: every tool offered, none to be called, and capped like the model
    assert re.search(r"tool", json.dumps(question["messages"][-1])) and len(question["tools"]) == len(suite.tools)
    assert question["tool_choice"] == "none" and question["max_tokens"] == filtered["max_tokens"] == 256
    assert question["temperature"] == 0
    with pytest.raises(ValueError, match="native"):
        pipeline("prompting", client_for(server), MODEL, "tool_filter")


def test_a_row_scores_benign_and_attacked_runs_and_saves_every_run(suite, tmp_path):
    from course_lib.security.agentdojo_table import load, run_row, save, table_text

    user_task, goal = suite.get_user_task_by_id("user_task_13"), suite.get_injection_task_by_id("injection_task_7")
    obeying = [{"call": ("read_file", {"file_path": "address-change.txt"})}, *ground_truth(suite, goal)]
    server = ScriptedServer([*ground_truth(suite, user_task), *obeying], "native")
    row = run_row(suite, client_for(server), MODEL, "native", None, ["user_task_13"], ["injection_task_7"],
                  max_iters=5, max_tokens=64)
    [benign], [attacked] = row.benign, row.attacked
    assert benign.utility and benign.calls[0] == "read_file(file_path='address-change.txt')"
    assert benign.answer == "Done." and attacked.attack_succeeded and attacked.injection_seen
    rates = row.rates()
    assert (rates["benign utility"].successes, rates["benign utility"].n) == (1, 1)
    assert (rates["attack success"].successes, rates["utility under attack"].successes) == (1, 0)
    assert "| native, no defense | 100% [21%, 100%] (1/1) | 0% [0%, 79%] (0/1) |" in table_text([row])
    settings, [again] = load(save([row], tmp_path / "table.json", MODEL, "scripted", minutes=0.0))
    assert again == row and settings["model"] == MODEL and settings["attack"] == "important_instructions"


def test_the_rows_and_tasks_asked_for(suite):
    from course_lib.security.agentdojo_table import chosen_tasks, rows_to_run

    assert rows_to_run(["native", "prompting"], [None, "tool_filter"]) == [
        ("native", None), ("native", "tool_filter"), ("prompting", None)]
    users, goals = chosen_tasks(suite, False, None, "none")
    assert len(users) == 16 and users[:3] == ["user_task_0", "user_task_1", "user_task_2"] and goals == []
    assert chosen_tasks(suite, False, "user_task_3", "injection_task_7") == (["user_task_3"], ["injection_task_7"])
    assert chosen_tasks(suite, True) == (["user_task_1", "user_task_13"], ["injection_task_7", "injection_task_0"])
    assert chosen_tasks(suite, True, "user_task_3") == (["user_task_3"], ["injection_task_7", "injection_task_0"])
    with pytest.raises(ValueError, match="user_task_99"):
        chosen_tasks(suite, False, "user_task_99")


@pytest.mark.parametrize("argv,message", [
    (["--modes", "native,chat"], "unknown mode 'chat'"),
    (["--defenses", "none,firewall"], "unknown defenses ['firewall']"),
    (["--user-tasks", "user_task_99"], "user_task_99"),
    (["--resume", "--user-tasks", "user_task_1"], "other tasks or another model"),
    (["--user-tasks", "user_task_13"], "exists: --resume goes on with it"),
])
def test_the_command_line_refuses_what_it_cannot_run(argv, message, tmp_path, capsys):
    from course_lib.security.agentdojo_table import Row, main, save

    out = tmp_path / "table.json"
    save([Row("native", None)], out, "qwen2.5-coder:0.5b", "scripted", quick=False, user_tasks=["user_task_13"],
         injection_tasks=["injection_task_7"])
    with pytest.raises(SystemExit):
        main([*argv, "--out", str(out), "--model", "qwen2.5-coder:0.5b", "--injection-tasks", "injection_task_7"])
    assert message in capsys.readouterr().err


def test_a_row_cut_off_is_gone_on_with_not_run_again(suite):
    from course_lib.security.agentdojo_table import PairResult, Row, run_row

    cut_off = Row("native", None, benign=[PairResult("user_task_13", None, True, None, None, 3, 2.5)], seconds=2.5)
    server = ScriptedServer([{"text": "Done."}], "native")
    saved = []
    row = run_row(suite, client_for(server), MODEL, "native", None, ["user_task_13"], ["injection_task_7"],
                  max_iters=5, max_tokens=64, row=cut_off, after_each=lambda row: saved.append(len(row.attacked)))
    assert row is cut_off and len(row.benign) == 1 and len(row.attacked) == 1 and saved == [1]
    assert len(server.requests) == 1 and row.seconds >= 2.5  # only the attacked run was sent


def test_an_agent_that_does_nothing_passes_the_checks_that_ask_for_nothing(suite):
    from course_lib.security.agentdojo_table import do_nothing_row

    row = do_nothing_row(suite, ["user_task_1", "user_task_5", "user_task_8"], ["injection_task_7"])
    assert [run.utility for run in row.benign] == [False, True, True]  # 5: the payment is already in the history
    assert not any(run.attack_succeeded or run.injection_seen for run in row.attacked)
    assert row.calls_per_run() == 0 and row.label == "do nothing"


@pytest.mark.parametrize("mode", ["native", "prompting"])
def test_a_conversation_that_outgrows_the_context_ends_the_run_and_is_scored(suite, mode):
    import openai

    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    full = "the prompt is 4154 tokens but num_ctx is 4096; shorten the conversation or raise options.num_ctx"
    server = ScriptedServer([{"call": ("get_balance", {})}, {"error": full}], mode)
    agent, transcript = pipeline(mode, client_for(server), MODEL, None, max_iters=5, max_tokens=64)
    result = run_pair(suite, agent, transcript, "user_task_1")
    assert result.context_full and not result.utility and result.model_calls == 1 and len(server.requests) == 2
    assert result.calls == ["get_balance()"] and result.answer == ""
    other = ScriptedServer([{"error": "tools[0].function.name must be a string"}], mode)
    agent, transcript = pipeline(mode, client_for(other), MODEL, None, max_iters=5, max_tokens=64)
    with pytest.raises(openai.BadRequestError, match="must be a string"):
        run_pair(suite, agent, transcript, "user_task_1")


def test_side_by_side_puts_each_source_in_its_column():
    from types import SimpleNamespace

    from course_lib.experiments import Rate
    from course_lib.security.agentdojo_table import PairResult, Row, side_by_side

    lesson_9 = [SimpleNamespace(defense="no defense", benign_utility=Rate(4, 12), attack_success=Rate(5, 60, 12))]
    benign = [PairResult(f"user_task_{n}", None, n < 1, None, None, 1, 1.0) for n in range(4)]
    attacked = [PairResult(f"user_task_{n}", "injection_task_7", False, n < 2, True, 1, 1.0) for n in range(4)]
    floor = Row("do nothing", None, benign=benign[:2], attacked=[])
    rows = {"tiny": [Row("native", None, benign, attacked)],
            "small": [Row("native", None, benign, []),
                      Row("prompting", "spotlighting_with_delimiting", benign, attacked)]}
    lines = side_by_side(lesson_9, rows, floor).splitlines()
    assert lines[0] == ("| defense | measure | GPT-4o, AgentDojo (published) | lesson 9's table, 0.5B | "
                        "AgentDojo banking, an agent that does nothing | AgentDojo banking, tiny (native) | "
                        "AgentDojo banking, small (native) | AgentDojo banking, small (prompting) |")
    assert lines[2] == "| no defense | benign utility | 69.0% | 33% [14%, 61%] (4/12) | 50% [9%, 91%] (1/2) | " \
                       "25% [5%, 70%] (1/4) | 25% [5%, 70%] (1/4) | not run |"
    assert lines[3].startswith("| no defense | attack success | 47.7% | 8% [1%, 35%] (5/60 runs of 12 tasks) | – | "
                               "50% [15%, 85%] (2/4)")
    assert "| spotlighting | attack success | 41.7% | – | – | not run | not run | 50% [15%, 85%] (2/4) |" in lines


def test_an_injection_is_seen_in_a_history_that_yaml_quotes(suite):
    """The history comes back as YAML, which writes the goal's ``user's`` as ``user''s``."""
    from agentdojo.attacks.attack_registry import load_attack

    from course_lib.security.agentdojo_bridge import pipeline, run_pair

    server = ScriptedServer([{"call": ("get_most_recent_transactions", {"n": 100})}, {"text": "Done."}], "native")
    agent, transcript = pipeline("native", client_for(server), MODEL, None, max_iters=5, max_tokens=64)
    result = run_pair(suite, agent, transcript, "user_task_1", "injection_task_3",
                      load_attack("important_instructions", suite, agent))
    assert "the user''s phone\\n    model" in json.dumps(server.requests[1]["messages"][-1])
    assert result.injection_seen and not result.attack_succeeded
