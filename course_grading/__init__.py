"""The grading room: exercises graded where the learner's code cannot decide the verdict.

- ``grading``: one notebook graded (``grade``, ``report``): executed in a fresh kernel, each
  check cell's answers judged here by the published notebook's judge;
- ``sandbox``: the kernels of a class run in bubblewrap (no network but the model, the course
  read-only, limits), the refusal when that is not possible;
- ``gradebook``: a whole class, and ``python3 course.py grade``'s report;
- ``exercises``: ``exercises/`` written from ``solutions/`` (and checked to match).

It imports the learner's library (the checks a check cell calls, ``course_lib.checks``; the
runtime that starts the model server) and nothing of the server's or the maintainers' rooms.
``python -m course_grading`` is its one entry.
"""
