"""Lesson 9: prompt injection through tool results, defenses, and the defense table.

- ``workspace``: an in-memory inbox, web pages, contacts, e-mail and payments, with tools;
- ``scenarios``: user tasks, attacker goals and attack templates, loaded from JSON;
- ``defenses``: guards at the four positions (input, tool call, tool result, output);
- ``executor``: the order in which a run's calls meet the guards (``guarded_executor``);
- ``bench``: runs every case under every defense and builds the table.
"""

from .bench import (
    Outcome,
    RememberedReplies,
    Row,
    best_defense,
    claims,
    load_outcomes,
    plot_table,
    run_case,
    run_table,
    save_table,
    summarise,
    table_cases,
    table_text,
)
from .defenses import (
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
from .executor import guarded_executor
from .scenarios import Case, ScenarioError, Scenarios, holds, load_scenarios
from .workspace import Workspace, build_workspace


def standard_defenses() -> dict[str, list[Defense]]:
    """The rows of the defense table, each a stack of guards."""
    return {"no defense": [], "tool allowlist": [Allowlist()], "argument policy": [ArgumentPolicy()],
            "spotlighting": [Spotlighting()], "repeat user prompt": [RepeatPrompt()], "tool filter": [ToolFilter()],
            "approval gate": [ApprovalGate()], "quarantined reader": [Quarantine()]}


__all__ = ["Allowlist", "ApprovalGate", "ArgumentPolicy", "Case", "Defense", "Facts", "InjectionDetector", "LinkFilter",
           "Outcome", "ParkedCall", "Quarantine", "RememberedReplies", "RepeatPrompt",
           "Row", "RunContext", "ScenarioError", "Scenarios",
           "Spotlighting", "ToolFilter", "Workspace", "best_defense", "build_workspace", "claims",
           "guarded_executor", "holds", "load_outcomes", "load_scenarios", "plot_table", "request_reviewer",
           "run_case", "run_table", "save_table", "standard_defenses", "summarise", "table_cases", "table_text",
           "tools_for_request"]
