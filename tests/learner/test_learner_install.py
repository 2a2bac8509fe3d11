"""A learner's install: the learner's library alone, in its own venv, runs lesson 1 against a
server started from the full install.

This is the promise of ``pyproject.toml``'s base dependencies and of ``runtime.connect()``:
``pip install .`` (no extras, so no llama-cpp-python, no FastAPI) is enough for a lesson, as
long as some Ollama-compatible server with the model answers at ``OLLAMA_HOST``."""

import json
import os
import shutil
import subprocess
import textwrap
import time
import venv
from pathlib import Path

import pytest

from course_lib.runtime import free_port

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "01_the_wire.ipynb"
# What a build of the distribution reads: the four rooms, and the files pyproject.toml names.
BUILD_INPUTS = ("pyproject.toml", "README.md", "course_lib", "course_server", "course_grading", "course_tools")

# Run by the learner venv's python: what is importable there, and what connect() does with no server.
PROBE = textwrap.dedent("""
    import importlib.metadata, importlib.util, json, sys
    import course_lib
    from course_lib import runtime
    found = {name: importlib.util.find_spec(name) is not None
             for name in ("llama_cpp", "fastapi", "uvicorn", "nbclient", "nbconvert", "ipykernel")}
    try:
        runtime.connect(quiet=True)
        refusal = None
    except runtime.ServerStartError as error:
        refusal = str(error)
    mcp_needs = [requirement.split(">")[0].split(";")[0].strip() for requirement in importlib.metadata.requires("mcp")]
    print(json.dumps({"found": found, "server_installed": runtime.server_installed(), "refusal": refusal,
                      "mcp_needs": mcp_needs,
                      "course_lib": course_lib.__file__, "prefix": sys.prefix}))
""")

# Run by the learner venv's python: lesson 1 in a kernel of that venv, from the repository's
# notebooks/ folder; one cell added at the end (in memory) says which Python the kernel was.
RUN_LESSON = textwrap.dedent("""
    import json, sys
    import nbformat
    from nbclient import NotebookClient
    lesson, folder, out = sys.argv[1:4]
    notebook = nbformat.read(lesson, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(
        "import sys, course_lib; print('KERNEL', sys.prefix, course_lib.__file__)"))
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": folder}}).execute()
    nbformat.write(notebook, out)
""")


def learner_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """This process's environment without what would point the learner's venv back at the full
    install (the suite's COURSE_EMBEDDED, a PYTHONPATH, a user's Jupyter kernels)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("COURSE_EMBEDDED", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "COURSE_MODEL_PATH")}
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")  # only the venv's own kernel spec
    env["COURSE_QUICK"] = "1"
    return {**env, **settings}


def outputs_text(cell: dict) -> str:
    return "".join("".join(output.get("text", "")) for output in cell.get("outputs", ()))


@pytest.mark.timeout(3600)  # beyond the suite's 900 s: an install and a whole lesson
def test_a_learners_venv_without_the_server_runs_lesson_1_against_the_full_installs_server(server, tmp_path):
    """A fresh venv gets ``pip install`` of a copy of the repository, with no extras: no llama.cpp,
    no FastAPI, so ``server_installed()`` is False and ``connect()`` with nothing
    answering refuses with its clear message. Lesson 1 then runs in a kernel of that venv, with
    ``OLLAMA_HOST`` at the session's server (the full install, the real model): every cell runs,
    ``connect()`` says it uses that server, and the model's reply is in the outputs. So the base
    dependencies and the installed package (not the work tree) are enough for a lesson. (uvicorn
    is in the learner's venv all the same: the MCP SDK, a base dependency, requires it.)

    Cost (the test prints both times): the venv and its install, 45 s to 2 min on 2 cores with
    the wheels in pip's cache (more when pip downloads them: JupyterLab, matplotlib, the SDKs);
    lesson 1, about 7 min on 2 cores shared with another test run (its cells ask the model for
    some thirty replies)."""
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
    venv.EnvBuilder(with_pip=True, clear=True).create(learner)
    pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
                         capture_output=True, text=True, timeout=1800, env=learner_env(tmp_path))
    install_seconds = time.perf_counter() - started
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-5000:]

    nobody = f"http://127.0.0.1:{free_port()}"  # nothing answers there
    probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=learner_env(tmp_path, OLLAMA_HOST=nobody), check=True)
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(facts["prefix"]).resolve() == learner.resolve()
    assert Path(facts["course_lib"]).resolve().is_relative_to(learner.resolve()), facts["course_lib"]
    assert not facts["found"]["llama_cpp"] and not facts["found"]["fastapi"], facts["found"]
    # uvicorn is there only because the MCP SDK (a base dependency, for lesson 12's MCP servers) requires it
    assert not facts["found"]["uvicorn"] or "uvicorn" in facts["mcp_needs"], facts["mcp_needs"]
    assert all(facts["found"][name] for name in ("nbclient", "nbconvert", "ipykernel")), facts["found"]
    assert facts["server_installed"] is False
    assert facts["refusal"] and "not installed in this environment" in facts["refusal"], facts["refusal"]

    executed = tmp_path / "01_the_wire.executed.ipynb"
    started = time.perf_counter()
    run = subprocess.run([str(python), "-c", RUN_LESSON, str(LESSON), str(LESSON.parent), str(executed)],
                         capture_output=True, text=True, timeout=2400, cwd=tmp_path,
                         env=learner_env(tmp_path, OLLAMA_HOST=server.url))
    lesson_seconds = time.perf_counter() - started
    print(f"\nthe learner's venv and its install: {install_seconds:.0f} s; "
          f"lesson 1 in its kernel: {lesson_seconds:.0f} s")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    cells = [cell for cell in json.loads(executed.read_text())["cells"] if cell["cell_type"] == "code"]
    errors = [output for cell in cells for output in cell.get("outputs", ()) if output["output_type"] == "error"]
    assert not errors, errors
    assert all(cell.get("execution_count") for cell in cells), "every code cell ran"
    assert f"Using the Ollama server at {server.url} (qwen2.5-coder:0.5b)." in outputs_text(cells[0])
    kernel = outputs_text(cells[-1]).split()
    assert kernel[0] == "KERNEL" and Path(kernel[1]).resolve() == learner.resolve(), kernel
    assert Path(kernel[2]).resolve().is_relative_to(learner.resolve()), kernel
    reply = json.loads(next(outputs_text(cell) for cell in cells if "json.dumps(reply" in "".join(cell["source"])))
    assert reply["done"] and reply["message"]["role"] == "assistant" and reply["message"]["content"].strip(), reply
