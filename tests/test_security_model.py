"""The defense table's runs on the real model do not depend on the order they ran in.

Every case starts from an empty prompt cache (``unload``), so a case gives the same
transcript whatever ran before it, and an agent turn already answered can be replayed
(``RememberedReplies``) without changing any result.
"""

from pathlib import Path

import pytest

from course_lib.client import Client
from course_lib.security import TwoInstances, load_scenarios, run_case, standard_defenses
from course_lib.security.bench import RememberedReplies

pytestmark = pytest.mark.model
SCENARIOS = load_scenarios(Path(__file__).parents[1] / "data" / "security_scenarios.json")
OPTIONS = {"temperature": 0, "seed": 0, "num_predict": 40}


def results(model, cases, defense):
    found = {}
    for case in cases:
        model.unload()
        outcome, _ = run_case(model, SCENARIOS, case, standard_defenses()[defense], defense, OPTIONS)
        found[case.id] = (outcome.calls, outcome.answer, outcome.tokens)
    return found


def test_a_case_gives_the_same_run_whatever_ran_before_it_and_replayed_turns_change_nothing(url):
    client = Client(url)
    model = TwoInstances(client, client)  # one instance for both: the harder case for order effects
    cases = [SCENARIOS.attacked_cases()[7], SCENARIOS.benign_cases()[0]]
    forward = results(model, cases, "no defense")
    assert results(model, cases[::-1], "no defense") == forward
    remembered = TwoInstances(RememberedReplies(client), client)
    results(remembered, cases, "no defense")
    assert results(remembered, cases, "argument policy") == results(model, cases, "argument policy")
    assert remembered.agent.hits >= 1
