"""Rates, intervals and the experiment pipeline, with a scripted model."""

import pytest

from course_lib.experiments import Experiment, Rate, load_rates, run_condition, save, trials, wilson_interval
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
    assert experiment.rates()["baseline"] == Rate(3, 4)
    path = save(experiment, tmp_path, server="scripted")
    assert load_rates(path) == {"baseline": Rate(3, 4)}
    assert "baseline" in experiment.table() and "(3/4)" in experiment.table()


def test_the_labelled_prompt_set_is_well_formed():
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).parents[1] / "data" / "tool_prompts.json").read_text())
    prompts = data["prompts"]
    assert len(prompts) >= 40 and len({p["id"] for p in prompts}) == len(prompts)
    assert {p["kind"] for p in prompts} == {"call", "no_call", "near_miss"}
    assert all(p["tool"] in data["tools"] for p in prompts if p["kind"] == "call")
    assert all(p["tool"] is None for p in prompts if p["kind"] != "call")
