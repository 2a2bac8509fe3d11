"""A learner's install: the learner's library alone, in its own venv, runs lesson 1 against a
server started from the full install.

This is the promise of ``pyproject.toml``'s base dependencies and of ``runtime.connect()``:
``pip install .`` (no extras, so no llama-cpp-python, no FastAPI) is enough for a lesson, as
long as some Ollama-compatible server with the model answers at ``OLLAMA_HOST``."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import time
import venv
from pathlib import Path

import pytest
from uv import find_uv_bin

from course_lib.runtime import free_port

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "01_the_wire.ipynb"
# What a build of the distribution reads: the four rooms, and the files pyproject.toml names.
BUILD_INPUTS = ("pyproject.toml", "README.md", "course_lib", "course_server", "course_grading", "course_tools")

PROBE = Path(__file__).with_name("learner_probe.py")  # run by the learner venv's python


def installed_versions() -> dict[str, str]:
    """The distributions of this environment (the full install) and their versions, the course's
    own package left out: it is what the learner's venv installs from its source."""
    versions = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name and name.lower().replace("_", "-") != "course-lib":
            versions[name] = distribution.version
    return versions


def learner_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """This process's environment without what would point the learner's venv back at the full
    install (the suite's COURSE_EMBEDDED, a PYTHONPATH, a user's Jupyter kernels)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("COURSE_EMBEDDED", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "COURSE_MODEL_PATH")}
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")  # only the venv's own kernel spec
    env["COURSE_QUICK"] = "1"
    return {**env, **settings}


@pytest.mark.timeout(3600)  # beyond the suite's 900 s: an install and a whole lesson
def test_a_learners_venv_without_the_server_runs_lesson_1_against_the_full_installs_server(server, tmp_path):
    """A fresh venv gets an install of a copy of the repository, with no extras: no llama.cpp,
    no FastAPI, so ``server_installed()`` is False and ``connect()`` with nothing
    answering refuses with its clear message. Lesson 1 then runs under nbval (installed there as the
    test tool it is) in a kernel of that venv, with ``OLLAMA_HOST`` at the session's server (the
    full install, the real model): every cell runs, and the cells marked ``# NBVAL_CHECK_OUTPUT``
    give their committed output. So the base dependencies and the installed package (not the work
    tree) are enough for a lesson. This is the suite's one run of lesson 1: ``tests/conftest.py``
    leaves its cells out of the main collection when this test is collected. (uvicorn
    is in the learner's venv all the same: the MCP SDK, a base dependency, requires it.)

    The install is uv's ``uv pip install``, which reads the same ``pyproject.toml`` as pip and
    resolves the same base dependencies, held to the versions this suite runs (a constraints
    file, so the lesson is tested with what the rest of the suite tested). It is the test's tool,
    not the learner's (the README's ``pip install .`` is): measured on 2 cores, pip took 53 s and
    uv 3 s for the same install from warm caches, the largest part of this test.

    Cost (the test prints both times): the venv and its install, a few seconds with the wheels in
    uv's cache (more when uv downloads them once: JupyterLab, matplotlib, the SDKs); lesson 1 as
    long as nbval's run of it in the full install."""
    source = tmp_path / "source"  # the build writes build/ and *.egg-info into its source: not the work tree
    tracked = subprocess.run(["git", "ls-files", "-z", "--", *BUILD_INPUTS], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():  # as it is in the work tree now (a file deleted there is left out)
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    learner = tmp_path / "learner-venv"
    python = learner / "bin" / "python"

    started = time.perf_counter()
    venv.EnvBuilder(with_pip=False, clear=True).create(learner)
    constraints = tmp_path / "constraints.txt"  # the versions this suite runs, so both installs agree
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in installed_versions().items()))
    pip = subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", str(python),
                          "--constraint", str(constraints), str(source),
                          "nbval"],  # the test tool that runs the lesson, not a part of the library
                         capture_output=True, text=True, timeout=1800, env=learner_env(tmp_path))
    install_seconds = time.perf_counter() - started
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-5000:]

    nobody = f"http://127.0.0.1:{free_port()}"  # nothing answers there
    probe = subprocess.run([str(python), str(PROBE)], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=learner_env(tmp_path, OLLAMA_HOST=nobody), check=True)
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(facts["prefix"]).resolve() == learner.resolve()
    assert Path(facts["course_lib"]).resolve().is_relative_to(learner.resolve()), facts["course_lib"]
    assert not facts["found"]["llama_cpp"] and not facts["found"]["fastapi"], facts["found"]
    # uvicorn is there only because the MCP SDK (a base dependency, for lesson 12's MCP servers) requires it
    assert not facts["found"]["uvicorn"] or "uvicorn" in facts["mcp_needs"], facts["mcp_needs"]
    assert all(facts["found"][name] for name in ("nbclient", "ipykernel", "nbval")), facts["found"]
    assert facts["server_installed"] is False
    assert facts["refusal"] and "not installed in this environment" in facts["refusal"], facts["refusal"]

    started = time.perf_counter()
    run = subprocess.run([str(python), "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-q", "-rA", str(LESSON.relative_to(ROOT))],
                         capture_output=True, text=True, timeout=2400, cwd=ROOT,
                         env=learner_env(tmp_path, OLLAMA_HOST=server.url))
    lesson_seconds = time.perf_counter() - started
    print(f"\nthe learner's venv and its install: {install_seconds:.0f} s; "
          f"lesson 1 under nbval in its kernel: {lesson_seconds:.0f} s")
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    cells = json.loads(LESSON.read_text())["cells"]
    assert f"{sum(cell['cell_type'] == 'code' for cell in cells)} passed" in run.stdout, run.stdout[-3000:]
