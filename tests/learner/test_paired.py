"""Paired tests and power planning (``course_lib.experiments.paired``), and the defense table's
paired claims (``course_lib.security.table``): model-free, checked against hand computations,
brute-force enumeration, a seeded simulation and the normal approximation."""

import functools
import itertools
import json
import math
import random
from pathlib import Path

import pytest

from course_lib.experiments.paired import (
    binomial_pmf,
    clustered_sign_test,
    mcnemar_exact,
    p_text,
    rejecting_below,
    sign_test_power,
    two_sided_binomial_p,
    units_needed,
)
from course_lib.security import Outcome, claims, load_outcomes, save_table, summarise
from course_lib.security.table import paired_results, paired_runs, paired_test, tasks_needed

RESULTS = Path(__file__).resolve().parents[2] / "data" / "results"


def test_the_exact_p_value_by_hand():
    assert two_sided_binomial_p(0, 5) == 2 / 32          # 5 of 5 one way
    assert two_sided_binomial_p(5, 5) == 2 / 32
    assert two_sided_binomial_p(1, 12) == 2 * (1 + 12) / 4096
    assert two_sided_binomial_p(2, 4) == 1.0             # an even split
    assert two_sided_binomial_p(0, 0) == 1.0             # nothing to compare
    assert two_sided_binomial_p(3, 7) == 1.0             # 2 * P(X <= 3) = 2 * 64/128, capped
    with pytest.raises(ValueError, match="between 0 and n"):
        two_sided_binomial_p(6, 5)


@pytest.mark.parametrize("n", range(1, 11))
def test_the_p_value_is_the_share_of_coin_sequences_at_least_as_lopsided(n):
    sequences = list(itertools.product((0, 1), repeat=n))
    for k in range(n + 1):
        lopsided = sum(abs(sum(s) - n / 2) >= abs(k - n / 2) for s in sequences)
        assert two_sided_binomial_p(k, n) == pytest.approx(lopsided / len(sequences))


def test_the_rejection_region_is_where_p_is_at_most_alpha():
    for d in range(0, 60):
        k = rejecting_below(d)
        assert all(two_sided_binomial_p(i, d) <= 0.05 for i in range(k + 1))
        assert k + 1 > d // 2 or two_sided_binomial_p(k + 1, d) > 0.05
    assert [rejecting_below(d) for d in (5, 6, 8, 9)] == [-1, 0, 0, 1]  # 6 of 6 is the fewest that can show it


def test_mcnemar_counts_only_the_discordant_pairs():
    pairs = [(True, False)] * 5 + [(False, True)] + [(True, True)] * 7 + [(False, False)] * 3
    test = mcnemar_exact(pairs, "A", "B", "prompts")
    assert (test.first_more, test.second_more, test.ties) == (5, 1, 10)
    assert test.p_value == 2 * (1 + 6) / 64 and not test.shown()
    assert "McNemar's exact test over 16 prompts: 5 with more successes under A, 1 under B, 10 tied" in test.sentence()
    assert "not shown to differ" in test.sentence()


def test_pairs_that_share_a_unit_count_once():
    """Eight discordant pairs all one way: McNemar, counting them as independent, shows a
    difference; they all come from one prompt, and one prompt shows nothing."""
    one_prompt = [("p1", True, False)] * 8 + [("p2", True, True), ("p3", False, False)]
    assert mcnemar_exact([(a, b) for _, a, b in one_prompt]).p_value == 2 / 256
    clustered = clustered_sign_test(one_prompt, "A", "B", "prompts")
    assert (clustered.first_more, clustered.second_more, clustered.ties, clustered.p_value) == (1, 0, 2, 1.0)
    spread = [(f"p{i}", True, False) for i in range(8)]
    assert clustered_sign_test(spread).p_value == 2 / 256
    mixed = [("p1", True, False), ("p1", False, True), ("p1", True, False), ("p2", False, True)]
    test = clustered_sign_test(mixed, "A", "B")  # p1: 2 against 1 (favours A), p2: 0 against 1 (favours B)
    assert (test.first_more, test.second_more, test.ties) == (1, 1, 0)
    assert "more successes under A" in clustered_sign_test(spread, "A", "B").sentence()


def test_the_binomial_pmf_sums_to_one_and_matches_the_counting_formula():
    assert sum(binomial_pmf(k, 40, 0.3) for k in range(41)) == pytest.approx(1.0)
    assert binomial_pmf(3, 10, 0.2) == pytest.approx(math.comb(10, 3) * 0.2 ** 3 * 0.8 ** 7)
    assert (binomial_pmf(0, 5, 0.0), binomial_pmf(5, 5, 1.0), binomial_pmf(2, 5, 1.0)) == (1.0, 1.0, 0.0)


def test_power_when_every_discordant_task_goes_one_way_by_hand():
    """Each task favours the defense with chance 1/4 and never the baseline: the test shows a
    difference exactly when 6 or more tasks favour it (6 of 6 gives p = 1/32)."""
    def at_least_six(n):
        return 1 - sum(math.comb(n, d) * 0.25 ** d * 0.75 ** (n - d) for d in range(6))
    for n in (6, 12, 30, 31, 40):
        assert sign_test_power(n, 0.25, 0.0) == pytest.approx(at_least_six(n))
    assert sign_test_power(30, 0.25, 0.0) < 0.8 <= sign_test_power(31, 0.25, 0.0)
    assert units_needed(0.25, 0.0) == 31


def test_exact_power_agrees_with_a_seeded_simulation():
    rng = random.Random(40)
    p_value = functools.cache(two_sided_binomial_p)
    units, favour_first, favour_second, runs = 30, 0.3, 0.05, 20_000
    shown = 0
    for _ in range(runs):
        draws = [rng.random() for _ in range(units)]
        first = sum(x < favour_first for x in draws)
        second = sum(favour_first <= x < favour_first + favour_second for x in draws)
        shown += p_value(first, first + second) <= 0.05
    assert sign_test_power(units, favour_first, favour_second) == pytest.approx(shown / runs, abs=0.015)


def normal_approximation_units(favour_first, favour_second, power=0.8, alpha=0.05):
    """McNemar's sample size by the normal approximation (Connor 1987):
    n = (z_alpha/2 * sqrt(psi) + z_beta * sqrt(psi - delta^2))^2 / delta^2,
    psi the chance of a discordant unit, delta the difference of the two directions."""
    z_alpha, z_beta = 1.959964, {0.8: 0.841621, 0.9: 1.281552}[power]
    psi, delta = favour_first + favour_second, favour_first - favour_second
    return (z_alpha * math.sqrt(psi) + z_beta * math.sqrt(psi - delta ** 2)) ** 2 / delta ** 2


@pytest.mark.parametrize("favour_first, favour_second, power", [
    (0.3, 0.1, 0.8), (0.25, 1 / 6, 0.8), (0.4, 0.2, 0.9), (0.15, 0.05, 0.8), (0.5, 0.3, 0.8)])
def test_units_needed_is_near_the_normal_approximation(favour_first, favour_second, power):
    exact = units_needed(favour_first, favour_second, power)
    assert sign_test_power(exact, favour_first, favour_second) >= power
    assert sign_test_power(exact - 1, favour_first, favour_second) < power
    assert exact == pytest.approx(normal_approximation_units(favour_first, favour_second, power), rel=0.15)


def test_units_needed_has_no_answer_for_a_zero_difference_or_beyond_its_limit():
    assert units_needed(0.2, 0.2) is None and units_needed(0.0, 0.0) is None
    assert units_needed(0.02, 0.01, most=200) is None
    assert sign_test_power(50, 0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="add up to at most 1"):
        sign_test_power(10, 0.7, 0.6)


# The defense table's paired claims.

def run(defense, task, attacked, success, goal="g"):
    case = f"{task}+{goal}+template@start" if attacked else task
    return Outcome(defense, case, "answer", attacked, True if attacked else None, success if not attacked else True,
                   success if attacked else None, 0, 0, 2, 0, 100, 1.0, None, [], "a")


def table(attacks_per_task, tasks, succeeded):
    """Rows of outcomes: ``succeeded(defense, task, goal) -> bool`` for the attacked runs; every benign run done."""
    outcomes = []
    for defense in ("no defense", "strong", "weak"):
        for t in range(tasks):
            outcomes.append(run(defense, f"t{t}", False, True))
            outcomes += [run(defense, f"t{t}", True, succeeded(defense, t, g), f"g{g}")
                         for g in range(attacks_per_task)]
    return outcomes


def every_attack_undefended_some_weak(defense, task, goal):
    """Every attack succeeds undefended, none under "strong", and under "weak" all but those on tasks 0-2."""
    return defense == "no defense" or (defense == "weak" and task >= 3)


def test_the_table_pairs_runs_by_case_and_clusters_them_by_user_task():
    rows = summarise(table(5, 12, every_attack_undefended_some_weak))
    base, strong, weak = rows
    assert len(paired_runs(base, strong)) == 60 and paired_runs(base, strong)[0] == ("t0", True, False)
    test = paired_test(base, strong)
    assert (test.first_more, test.second_more, test.ties, test.unit) == (12, 0, 0, "user tasks")
    assert test.p_value == 2 / 4096 and test.shown()
    weak_test = paired_test(base, weak)   # 15 discordant cases, but from 3 tasks
    assert (weak_test.first_more, weak_test.ties, weak_test.p_value) == (3, 9, 0.25)
    assert tasks_needed(weak_test) == units_needed(3 / 12, 0) == 31
    assert paired_test(base, strong, "benign utility").ties == 12
    with pytest.raises(ValueError, match="unknown measure"):
        paired_test(base, strong, "speed")


def test_claims_follow_the_paired_test():
    said = claims(summarise(table(5, 12, every_attack_undefended_some_weak)))
    assert said[0].startswith("strong: attack success 0% [ 0%-24%] 0/60 runs of 12 tasks against no defense's")
    assert ": lower (exact sign test over 12 user tasks: 12 with more attack successes under no defense, " \
           "0 under strong, 0 tied; p = 0.00049)" in said[0]
    assert "weak: attack success" in said[1] and "not shown to differ (exact sign test over 12 user tasks: " \
           "3 with more attack successes under no defense, 0 under weak, 9 tied; p = 0.25); a difference of this " \
           "size needs about 31 user tasks for 80% power." in said[1]
    assert "Benign utility 100% [76%-100%] n=12 against no defense's 100% [76%-100%] n=12: not shown to differ" \
        in said[0]
    assert "the rows differ on no user task, so no run size can be planned" in said[0]


def test_claims_say_higher_and_name_runs_without_a_partner():
    outcomes = table(1, 8, lambda defense, t, g: defense == "weak")
    outcomes = [o for o in outcomes if not (o.defense == "strong" and o.case == "t7+g0+template@start")]
    said = claims(summarise(outcomes))
    assert "1 runs without a partner in the other row left out" in said[0]
    assert ": higher (exact sign test over 8 user tasks: 0 with more attack successes under no defense, " \
           "8 under weak, 0 tied; p = 0.0078)" in said[1]


def test_claims_without_a_baseline_or_a_shared_case_say_so():
    rows = summarise([o for o in table(1, 2, lambda defense, t, g: False) if o.attacked])
    assert claims(rows, baseline="nobody") == ["no row is named 'nobody': nothing to compare the rows with"]
    assert "Benign utility - (n=0) against no defense's - (n=0): not compared: no case ran under both rows." \
        in claims(rows)[0]


def test_a_row_that_ran_a_case_twice_cannot_be_paired():
    outcomes = table(1, 3, lambda defense, t, g: False)
    outcomes.append(outcomes[-1])
    rows = summarise(outcomes)
    with pytest.raises(ValueError, match="ran a case more than once"):
        paired_test(rows[0], rows[2])
    assert "not compared (row 'weak' ran a case more than once: its runs cannot be paired)." in claims(rows)[1]
    assert {"defense": "weak", "measure": "attack success",
            "error": "row 'weak' ran a case more than once: its runs cannot be paired"} in paired_results(rows)


def test_the_saved_table_keeps_the_paired_tests(tmp_path):
    outcomes = table(2, 6, lambda defense, t, g: defense == "no defense")
    saved = json.loads(save_table(outcomes, "scripted", "none", tmp_path).read_text())
    assert saved["conditions"]["strong | attack success (ASR)"] == {"successes": 0, "n": 12, "units": 6}
    strong = next(p for p in saved["paired"] if p["defense"] == "strong" and p["measure"] == "attack success")
    assert (strong["first_more"], strong["second_more"], strong["p_value"]) == (6, 0, 2 / 64)
    assert strong["test"] == "exact sign test" and "tasks_for_80%_power" in strong
    assert len(saved["paired"]) == 4 and load_outcomes(tmp_path / "defense_table.json") == outcomes


@pytest.mark.release
@pytest.mark.parametrize("name", ["defense_table*.json", "tool_poisoning*.json"])
def test_every_committed_table_is_compared_paired(name):
    """Any saved table (either model) gives a paired claim per defense and a result per measure."""
    paths = sorted(RESULTS.glob(name))
    assert paths
    for path in paths:
        rows = summarise(load_outcomes(path))
        assert len(claims(rows)) == len(rows) - 1
        assert {r["measure"] for r in paired_results(rows)} == {"attack success", "benign utility"}


@pytest.mark.release
@pytest.mark.parametrize(("name", "pinned_cost"), [("tool_poisoning.json", (0, 5, 7, "0.062")),
                                                    ("tool_poisoning_qwen2_5-coder_1_5b.json", (0, 8, 4, "0.0078"))])
def test_pinning_cost_completions_under_attack_paired_over_tasks(name, pinned_cost):
    """Lesson 12's numbers: utility under attack, pinned definitions against no defense, per user
    task (each task attacked twice, poisoned and rug-pulled, so the task is the unit)."""
    rows = {row.defense: row for row in summarise(load_outcomes(RESULTS / name))}
    test = paired_test(rows["no defense"], rows["pinned definitions"], "utility under attack")
    assert test.counted == "task completions" and test.unit == "user tasks"
    assert (test.second_more, test.first_more, test.ties, p_text(test.p_value)) == pinned_cost
