"""``python -m course_tools``: the maintainers' room, one entry with a command per tool.

    python -m course_tools translation status|build|messages|adopt ja ...   # the Japanese edition
    python -m course_tools lesson_plan [--write-times]                      # the lessons' time lines
    python -m course_tools slides OUT [NOTEBOOK ...]                        # the lessons as offline slides
    python -m course_tools refresh NOTEBOOK ...                             # re-execute notebooks in full
    python -m course_tools security [--quick]                               # lesson 9's defense table
    python -m course_tools kiosk [--quick]                                  # the capstone's evaluation
    python -m course_tools agentdojo [--quick]                              # AgentDojo's table (lesson 9b)
    python -m course_tools bundle OUT ...                                   # a room's offline bundle
    python -m course_tools benchmark NAME [ARGS]                            # a benchmark (NAME: see below)

Each command's ``--help`` says more. A tool is imported only when its command runs, so one
tool's dependencies (nbconvert, AgentDojo, llama.cpp) are not needed by the others.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

COMMANDS = {  # command -> the module whose main(argv) runs it
    "translation": "course_tools.translation.cli",
    "lesson_plan": "course_tools.lesson_plan",
    "slides": "course_tools.slides",
    "refresh": "course_tools.refresh",
    "security": "course_tools.security_table",
    "kiosk": "course_tools.kiosk_table",
    "agentdojo": "course_lib.security.agentdojo_table",
    "bundle": "course_tools.bundle",
}
BENCHMARKS = sorted(path.stem for path in (Path(__file__).parent / "benchmarks").glob("*.py")
                    if path.stem != "__init__")


def benchmark(argv: list[str]) -> int:
    """Run ``course_tools/benchmarks/NAME.py``'s ``main``, which reads its own arguments from ``sys.argv``."""
    if not argv or argv[0] not in BENCHMARKS:
        print(f"python -m course_tools benchmark NAME [ARGS]: NAME is one of {', '.join(BENCHMARKS)}")
        return 2
    sys.argv = [f"python -m course_tools benchmark {argv[0]}", *argv[1:]]
    import_module(f"course_tools.benchmarks.{argv[0]}").main()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["benchmark"]:
        return benchmark(argv[1:])
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.replace("(NAME: see below)", f"(NAME: {', '.join(BENCHMARKS)})"))
        return 2
    run: Callable[[list[str]], int | None] = import_module(COMMANDS[argv[0]]).main
    return run(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
