"""``python -m course_grading``: the grading room, one entry.

    python -m course_grading gradebook [NOTEBOOK | --class DIR --out OUT] ...   # grade (what `course.py grade` runs)
    python -m course_grading exercises build [--check]                           # exercises/ from solutions/
"""

import sys

from course_grading import exercises, gradebook

COMMANDS = {"gradebook": gradebook.main, "exercises": exercises.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        return 2
    return COMMANDS[argv[0]](argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
