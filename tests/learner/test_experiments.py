"""Rates, intervals and the experiment pipeline, with a scripted model."""

import pytest

from course_lib.experiments import (
    Experiment,
    Rate,
    load_rates,
    rate_text,
    run_condition,
    save,
    trials,
    wilson_interval,
)
from course_lib.fake_model import ScriptedModel, calls, says


@pytest.mark.parametrize("successes, n, low, high", [
    (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (5, 10, 0.2366, 0.7634), (81, 263, 0.2553, 0.3662)])
def test_wilson_interval_matches_published_values(successes, n, low, high):
    assert wilson_interval(successes, n) == pytest.approx((low, high), abs=1e-4)


def test_an_empty_sample_says_nothing():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_quick_mode_shrinks_trials(monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert trials(10) == 1
    monkeypatch.delenv("COURSE_QUICK")
    assert trials(10) == 10


def test_a_condition_is_run_scored_recorded_and_saved(tmp_path):
    prompts = [{"id": "p1", "text": "Time?", "tool": "now"}, {"id": "p2", "text": "Hi!", "tool": None}]
    model = ScriptedModel([calls("now"), calls("now"), calls("now"), says("Hello")])
    experiment = Experiment("toy", "scripted")

    def build(prompt, trial):
        return {"messages": [{"role": "user", "content": prompt["text"]}], "options": {"seed": trial}}

    def score(prompt, response):
        called = [c["function"]["name"] for c in response["message"].get("tool_calls") or []]
        return called == ([prompt["tool"]] if prompt["tool"] else [])

    run_condition(experiment, "baseline", prompts, lambda request: model.chat(request["messages"]), build, score, 2)
    assert [(r.prompt_id, r.trial, r.success) for r in experiment.records] == [
        ("p1", 0, True), ("p2", 0, False), ("p1", 1, True), ("p2", 1, True)]
    assert experiment.rates()["baseline"] == Rate(3, 4, units=2)
    path = save(experiment, tmp_path, server="scripted")
    assert load_rates(path) == {"baseline": Rate(3, 4, units=2)}
    assert "baseline" in experiment.table() and "(3/4 trials, 2 prompts)" in experiment.table()


def test_the_labelled_prompt_set_is_well_formed():
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).parents[2] / "data" / "tool_prompts.json").read_text())
    prompts = data["prompts"]
    assert len(prompts) >= 40 and len({p["id"] for p in prompts}) == len(prompts)
    assert {p["kind"] for p in prompts} == {"call", "no_call", "near_miss"}
    assert all(p["tool"] in data["tools"] for p in prompts if p["kind"] == "call")
    assert all(p["tool"] is None for p in prompts if p["kind"] != "call")


CALL = {"id": "c", "kind": "call", "tool": "get_weather", "arguments": {"city": "Tokyo"}}
ANY_EXPRESSION = {"id": "e", "kind": "call", "tool": "calc", "arguments": {"expression": None}}
NEAR_MISS = {"id": "n", "kind": "near_miss", "tool": None, "arguments": {}}


def called(name, **arguments):
    return {"calls": [{"name": name, "arguments": arguments, "style": "bare"}]}


@pytest.mark.parametrize("prompt, response, expected", [
    (CALL, called("get_weather", city="tokyo"), True),          # values compare case-insensitively
    (CALL, called("get_weather", city="Osaka"), False),         # the wrong value
    (CALL, called("get_weather"), False),                       # a missing argument
    (CALL, called("now"), False),                               # the wrong tool
    (CALL, {"calls": []}, False),                               # no call
    (ANY_EXPRESSION, called("calc", expression="17*23"), True),  # None: any value
    (NEAR_MISS, {"calls": []}, True),
    (NEAR_MISS, called("get_weather", city="Tokyo"), False),    # a call nobody needed
])
def test_right_call_scores_labelled_prompts(prompt, response, expected):
    from course_lib.experiments import right_call
    assert right_call(prompt, response) is expected


def test_raw_requests_render_the_template_and_sends_parse_the_text():
    from course_lib.experiments import raw_sender, raw_tool_request

    class RawModel:
        def generate(self, prompt, raw, options):
            self.seen = (prompt, raw, options)
            return {"response": '{"name": "now", "arguments": {}}', "prompt_eval_count": 12,
                    "total_duration": 2_000_000_000}

    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}[{{ tools | length }} tools]"
    tool = {"type": "function", "function": {"name": "now", "description": "Time.", "parameters": {}}}
    request = raw_tool_request(template, [tool], temperature=0.3)({"text": "Time?"}, 4)
    assert request["prompt"] == "<user>Time?[1 tools]"
    assert request["options"] == {"temperature": 0.3, "seed": 4, "num_predict": 80}
    model = RawModel()
    response = raw_sender(model)(request)
    assert model.seen[1] is True
    assert response["calls"] == [{"name": "now", "arguments": {}, "style": "bare"}]
    assert (response["prompt_eval_count"], response["seconds"]) == (12, 2.0)


def test_rates_can_be_taken_over_a_subset_of_records():
    from course_lib.experiments import Record
    records = [Record("a", "p1", 0, {}, {}, True), Record("a", "p2", 0, {}, {}, False)]
    experiment = Experiment("toy", "scripted", records)
    assert experiment.rates(lambda record: record.prompt_id == "p1") == {"a": Rate(1, 1, units=1)}


def test_an_interval_rests_on_the_prompts_not_on_repeated_trials():
    """Ten trials each of 4 prompts are not 40 independent observations: the interval is the one
    of the observed rate with 4 as the sample size, and it prints both counts."""
    repeated = Rate(30, 40, units=4)
    assert repeated.value == 0.75 and repeated.sample_size == 4
    assert repeated.interval == wilson_interval(3, 4)
    assert repeated.interval[1] - repeated.interval[0] > 2 * (Rate(30, 40).interval[1] - Rate(30, 40).interval[0])
    assert str(repeated).endswith("(30/40 trials, 4 prompts)")
    assert Rate(3, 4, units=4).interval == Rate(3, 4).interval and str(Rate(3, 4, units=4)).endswith("(3/4)")
    assert Rate(0, 0, units=0).interval == (0.0, 1.0)


def test_every_table_spells_its_rates_with_one_function():
    """Lesson 8's ``str(rate)``, the defense table's cells and AgentDojo's: one ``rate_text``, three
    spellings, the committed lessons' outputs unchanged."""
    from course_lib.security.agentdojo_table import _cell
    from course_lib.security.table import cell

    assert str(Rate(16, 22)) == " 72.7%  [51.8%, 86.8%]  (16/22)"
    assert str(Rate(27, 44, units=22)) == " 61.4%  [40.8%, 78.5%]  (27/44 trials, 22 prompts)"
    assert cell(Rate(4, 12, units=12)) == " 33% [14%-61%] n=12"
    assert cell(Rate(10, 60, units=12)) == " 17% [ 5%-45%] 10/60 runs of 12 tasks"
    assert cell(Rate(0, 0)) == "- (n=0)"
    assert _cell(Rate(5, 16)) == "31% [14%, 56%] (5/16)"
    assert _cell(Rate(0, 0)) == "–"
    assert rate_text(Rate(3, 12), "{successes} of {n}: {value:.1%}") == "3 of 12: 25.0%"


def test_results_saved_before_units_were_counted_still_load(tmp_path):
    path = tmp_path / "old.json"
    path.write_text('{"conditions": {"a": {"successes": 2, "n": 3}}}')
    assert load_rates(path) == {"a": Rate(2, 3)}


def test_refresh_drops_progress_bars_but_keeps_other_widgets():
    import nbformat

    from course_tools.refresh import WIDGET, without_progress_bars

    def widget(text):
        return nbformat.v4.new_output("display_data", data={WIDGET: {"model_id": "m"}, "text/plain": text})

    notebook = nbformat.v4.new_notebook(metadata={"widgets": {"state": {}}})
    notebook.cells = [nbformat.v4.new_code_cell("run()", outputs=[
        widget("vague (trial 1/2):   0%|          | 0/45 [00:00<?, ?it/s]"),
        nbformat.v4.new_output("stream", name="stdout", text="done\n")])]
    cleaned = without_progress_bars(notebook)
    assert [o.output_type for o in cleaned.cells[0].outputs] == ["stream"] and "widgets" not in cleaned.metadata
    notebook.cells[0].outputs.append(widget("VBox(children=(HTML(value='<b>The user asked:</b>'),))"))
    notebook.metadata["widgets"] = {"state": {}}
    assert "widgets" in without_progress_bars(notebook).metadata


def test_run_all_keeps_the_order_of_its_items_whatever_finishes_first():
    import time

    from course_lib.experiments import run_all

    def slow_for_small(n: int) -> int:
        time.sleep(0.02 * (5 - n))  # the first items finish last
        return n * n

    assert run_all(slow_for_small, range(5), workers=5) == [0, 1, 4, 9, 16]
    assert run_all(slow_for_small, [3, 1], workers=1) == [9, 1]

    def fails_on_two(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n

    with pytest.raises(ValueError, match="two"):
        run_all(fails_on_two, range(4), workers=2)


def test_workers_come_from_the_environment_and_must_be_a_count(monkeypatch):
    from course_lib.config import workers

    monkeypatch.delenv("COURSE_WORKERS", raising=False)
    assert workers() == 4
    monkeypatch.setenv("COURSE_WORKERS", "1")
    assert workers() == 1
    for bad in ("0", "-2", "four"):
        monkeypatch.setenv("COURSE_WORKERS", bad)
        with pytest.raises(ValueError, match="COURSE_WORKERS"):
            workers()
