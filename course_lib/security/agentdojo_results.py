"""What one run of AgentDojo's benchmark leaves: the record both of its modules share.

``agentdojo_bridge`` makes a :class:`PairResult` from each run; ``agentdojo_table`` counts
them into rows, saves them and reads them back. Both import this module and neither imports
the other at load time, so a saved table can be read without AgentDojo installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["native", "prompting"]  # the model's tool calls: its own format, or AgentDojo's prompt


@dataclass(frozen=True)
class PairResult:
    """One run: a user task, alone (``injection_task`` None) or with an injection task's attack."""

    user_task: str
    injection_task: str | None
    utility: bool  # the user task was done, by AgentDojo's own check of the environment
    attack_succeeded: bool | None  # the injection task was done (None on a benign run)
    injection_seen: bool | None  # a tool result the model read held the injected text
    model_calls: int
    seconds: float
    calls: list[str] = field(default_factory=list)  # the tools the model called, as name(arguments)
    answer: str = ""  # the model's last text
    context_full: bool = False  # the run ended when the conversation outgrew the server's context
