"""The exercise system: the generator, and proof that every check can fail.

Here the checks fail on the stub; tests/grading/test_wrong_answers.py makes them fail on plausible
wrong answers too (tests/grading/wrong_answers.py)."""

import os
from pathlib import Path

import nbformat
import pytest

from course_grading.exercises import STUB, build, strip_solutions

ROOT = Path(__file__).parents[2]
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_strip_solutions_keeps_the_indentation_and_everything_outside():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    return x * 2\n    ### END SOLUTION\n\nprint(f)"
    assert strip_solutions(source) == f"def f(x):\n    {STUB}\n\nprint(f)"


@pytest.mark.parametrize("source", ["### BEGIN SOLUTION\nx = 1", "x = 1\n### END SOLUTION",
                                    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION"])
def test_unbalanced_markers_are_an_error(source):
    with pytest.raises(ValueError):
        strip_solutions(source)


def test_exercises_are_in_sync_with_solutions():
    stale = build(ROOT / "solutions", ROOT / "exercises", check=True)
    assert not stale, f"run `python -m course_grading exercises build`: {stale}"


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith("# CHECK")


@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_every_exercise_notebook_has_checks_and_no_solution(path):
    notebook = nbformat.read(path, as_version=4)
    assert any(is_check_cell(cell) for cell in notebook.cells), \
        "an exercise notebook needs check cells (code cells starting with '# CHECK')"
    assert all("### BEGIN SOLUTION" not in cell.source for cell in notebook.cells)


# Each check failing on the stub is proven by running the exercise notebooks, unsolved. That each
# passes when solved is nbval's run of solutions/, and that each passes without the others'
# solutions is tests/grading/test_grading.py's test_no_exercise_reads_another_exercises_names.
@pytest.mark.model
@pytest.mark.parametrize("path", EXERCISES, ids=[p.name for p in EXERCISES])
def test_every_check_fails_on_the_unsolved_exercises(path, url):
    """Against the suite's one server (``url``): the notebooks do not each start their own."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    checks = [cell for cell in notebook.cells if is_check_cell(cell)]
    resources = {"metadata": {"path": str(path.parent)}}
    env = {key: value for key, value in os.environ.items() if key != "COURSE_EMBEDDED"} | {"OLLAMA_HOST": url}
    NotebookClient(notebook, timeout=600, allow_errors=True, kernel_name="python3",
                   resources=resources).execute(env=env)
    passing = [cell.source.splitlines()[0] for cell in checks
               if not any(output.output_type == "error" for output in cell.outputs)]
    assert not passing, f"these checks pass without a solution, so they cannot fail: {passing}"
