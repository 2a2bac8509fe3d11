"""Lesson 9: prompt injection through tool results, defenses, and the defense table (and what
lessons 9b, 12 and 13 build on them).

- ``workspace``: an in-memory inbox, web pages, contacts, e-mail and payments, with tools;
- ``scenarios``: user tasks, attacker goals and attack templates, loaded from JSON;
- ``defenses``: guards at the four positions (input, tool call, tool result, output);
- ``executor``: the order in which a run's calls meet the guards (``guarded_executor``);
- ``budget``: rate limits and spend caps, a guard at the tool-call position (lesson 13);
- ``bench``: runs every case under every defense and judges each run;
- ``table``: the judged runs counted into the defense table, as text and claims, saved and read back;
- ``poisoning``: lesson 12's tool-poisoning table, the same cases with tools served over MCP;
- ``agentdojo_results``, ``agentdojo_bridge``, ``agentdojo_table``: lesson 9b, AgentDojo's own
  benchmark against the course's server (``agentdojo_bridge`` needs ``pip install agentdojo``).

Plots and widgets (``plot_table``, the approval panel) are in ``course_lib.display``, above this layer.
"""

from course_lib.security.bench import Outcome, RememberedReplies, run_case, run_table, table_cases
from course_lib.security.defenses import (
    Allowlist,
    ApprovalGate,
    ArgumentPolicy,
    Defense,
    Facts,
    InjectionDetector,
    LinkFilter,
    ParkedCall,
    Quarantine,
    RepeatPrompt,
    RunContext,
    Spotlighting,
    ToolFilter,
    request_reviewer,
    tools_for_request,
)
from course_lib.security.executor import guarded_executor
from course_lib.security.scenarios import Case, ScenarioError, Scenarios, holds, load_scenarios
from course_lib.security.table import Row, best_defense, claims, load_outcomes, save_table, summarise, table_text
from course_lib.security.workspace import Workspace, build_workspace


def standard_defenses() -> dict[str, list[Defense]]:
    """The rows of the defense table, each a stack of guards."""
    return {"no defense": [], "tool allowlist": [Allowlist()], "argument policy": [ArgumentPolicy()],
            "spotlighting": [Spotlighting()], "repeat user prompt": [RepeatPrompt()], "tool filter": [ToolFilter()],
            "approval gate": [ApprovalGate()], "quarantined reader": [Quarantine()]}


__all__ = ["Allowlist", "ApprovalGate", "ArgumentPolicy", "Case", "Defense", "Facts", "InjectionDetector", "LinkFilter",
           "Outcome", "ParkedCall", "Quarantine", "RememberedReplies", "RepeatPrompt",
           "Row", "RunContext", "ScenarioError", "Scenarios",
           "Spotlighting", "ToolFilter", "Workspace", "best_defense", "build_workspace", "claims",
           "guarded_executor", "holds", "load_outcomes", "load_scenarios", "request_reviewer",
           "run_case", "run_table", "save_table", "standard_defenses", "summarise", "table_cases", "table_text",
           "tools_for_request"]
