"""``course.py``: what it says about the set-up must be true."""

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pip
import pytest

from course_lib import runtime
from course_server.models import REGISTRY, local_path, note_path, source_path
from course_tools import bundle as writer

spec = importlib.util.spec_from_file_location("course_script", Path(__file__).parents[1] / "course.py")
course = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course)


@pytest.fixture
def bundle_writer(monkeypatch):
    """``course_tools.bundle`` working with this file's ``course`` module, so that what a test
    changes in ``course`` (``install``, ``run``, ...) is what the bundle writer calls."""
    monkeypatch.setattr(writer, "course", course)
    return writer


def pretend_fetched(name: str) -> None:
    """Put a file that ``is_fetched`` accepts in the cache: the right size (sparse: no disk used) and the note."""
    model = REGISTRY[name]
    with open(local_path(model), "wb") as file:
        file.truncate(model.size)
    note_path(local_path(model)).write_text(model.sha256 + "\n")


def test_the_model_check_asks_about_the_chosen_model(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("COURSE_MODEL_PATH", raising=False)
    monkeypatch.delenv("COURSE_MODEL", raising=False)
    pretend_fetched("qwen2.5-coder:1.5b")  # the second row of the registry, not the first
    assert not course.model_fetched(), "the default model is 'not fetched' here, so not reported as fetched"
    ok, line = course.model_state()
    assert not ok and "qwen2.5-coder:0.5b" in line and "not fetched" in line
    monkeypatch.setenv("COURSE_MODEL", "qwen2.5-coder:1.5b")
    assert course.model_state() == (True, "the model qwen2.5-coder:1.5b fetched; source: not recorded (fetched "
                                          "before the course kept a record of it)")
    record = {"source": "Hugging Face", "from": "https://hub/x", "sha256": REGISTRY["qwen2.5-coder:1.5b"].sha256}
    source_path(local_path(REGISTRY["qwen2.5-coder:1.5b"])).write_text(json.dumps(record))
    assert course.model_state() == (True, "the model qwen2.5-coder:1.5b fetched; source: Hugging Face, https://hub/x")
    monkeypatch.setenv("COURSE_MODEL", "no-such-model:1b")
    ok, line = course.model_state()
    assert not ok and "unknown model" in line, "an unknown model is not reported as fetched, and says why"
    monkeypatch.setenv("COURSE_MODEL_PATH", str(tmp_path / "missing.gguf"))
    assert not course.model_fetched(), "a COURSE_MODEL_PATH that is no file is not a fetched model"
    (tmp_path / "mine.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("COURSE_MODEL_PATH", str(tmp_path / "mine.gguf"))
    assert course.model_fetched()


def test_models_check_names_the_model_and_exits_1_with_the_reason_when_it_is_not_there(monkeypatch, tmp_path):
    env = {**os.environ, "COURSE_CACHE_DIR": str(tmp_path), "COURSE_MODEL": "qwen2.5-coder:1.5b"}
    env.pop("COURSE_MODEL_PATH", None)
    command = [sys.executable, "-m", "course_server", "models", "check"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout) == (1, "qwen2.5-coder:1.5b\n") and "not fetched" in done.stderr
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    pretend_fetched("qwen2.5-coder:1.5b")
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "qwen2.5-coder:1.5b\nsource: not recorded (fetched before the course kept a record of it)\n"


# 2. a .venv left half-made


@pytest.fixture
def venv_in_tmp(monkeypatch, tmp_path):
    """``course.VENV`` in ``tmp_path``, as if course.py ran outside any environment of yours."""
    monkeypatch.setattr(course, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(course, "in_own_environment", lambda: False)
    return tmp_path / ".venv"


def a_working_venv(path: Path, with_pip: bool) -> None:
    """What ``venv.create`` makes when it works; its Python here is a script that runs the tests' (it has pip)."""
    course.python().parent.mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    course.python().write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    course.python().chmod(0o755)


def no_ensurepip(path: Path, with_pip: bool) -> None:
    """What ``venv.create`` does on Debian/Ubuntu without ``python3-venv``: a folder, then an error."""
    path.mkdir()
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    raise subprocess.CalledProcessError(1, ["python", "-m", "ensurepip"])


@pytest.mark.skipif(os.name == "nt", reason="the fake Python is a shell script")
def test_a_half_made_venv_is_made_again(venv_in_tmp, monkeypatch, capsys):
    venv_in_tmp.mkdir()
    (venv_in_tmp / "pyvenv.cfg").write_text("home = /usr/bin\n")  # and no bin/python: a failed attempt
    monkeypatch.setattr(course.venv, "create", a_working_venv)
    course.make_venv()
    assert course.works(course.python())
    assert "half-made" in capsys.readouterr().out


def test_a_venv_that_cannot_be_made_says_what_to_install_and_leaves_nothing(venv_in_tmp, monkeypatch):
    monkeypatch.setattr(course.venv, "create", no_ensurepip)
    with pytest.raises(SystemExit) as stop:
        course.make_venv()
    assert "sudo apt install python3-venv" in str(stop.value.code)
    assert not venv_in_tmp.exists(), "the next run must not find a half-made .venv"


def test_a_folder_that_is_not_a_venv_is_never_deleted(venv_in_tmp, monkeypatch):
    venv_in_tmp.mkdir()
    (venv_in_tmp / "notes.txt").write_text("mine")
    monkeypatch.setattr(course.venv, "create", no_ensurepip)
    with pytest.raises(SystemExit) as stop:
        course.make_venv()
    assert "not a virtual environment" in str(stop.value.code)
    assert (venv_in_tmp / "notes.txt").read_text() == "mine"


def test_check_calls_a_half_made_venv_what_it_is(venv_in_tmp, capsys):
    venv_in_tmp.mkdir()
    (venv_in_tmp / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert course.check() == 1
    assert "[FAIL] .venv/ is half-made" in capsys.readouterr().out


# 3. which environment is "yours"


@pytest.mark.parametrize(("conda_env", "runs_on_it", "counts"), [
    ("base", True, False),  # auto-activated by conda's installer: not chosen for the course
    ("course", True, True),  # a named environment you activated
    ("course", False, False),  # activated, but course.py runs on another python3
])
def test_conda_base_is_not_the_environment_you_activated(monkeypatch, tmp_path, conda_env, runs_on_it, counts):
    prefix = tmp_path / "envs" / conda_env
    prefix.mkdir(parents=True)
    monkeypatch.setenv("CONDA_PREFIX", str(prefix))
    monkeypatch.setenv("CONDA_DEFAULT_ENV", conda_env)
    monkeypatch.setattr(sys, "prefix", str(prefix) if runs_on_it else "/usr")
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # no venv
    assert course.in_own_environment() is counts


def test_conda_root_counts_as_base_whatever_its_name(monkeypatch, tmp_path):
    (tmp_path / "condabin").mkdir()
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path))
    monkeypatch.setenv("CONDA_DEFAULT_ENV", str(tmp_path))  # activated by path
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    assert not course.in_own_environment()


def test_a_venv_counts_but_the_course_venv_is_the_course_s(monkeypatch, tmp_path):
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "my-venv"))
    assert course.in_own_environment()
    monkeypatch.setattr(sys, "prefix", str(course.VENV))  # `.venv/bin/python course.py ...`
    assert not course.in_own_environment()


def pip_commands(monkeypatch, tmp_path, own: bool) -> list[tuple[str, ...]]:
    """The commands ``install`` runs, with nothing installed and nothing really run."""
    commands: list[tuple[str, ...]] = []
    monkeypatch.setattr(course, "in_own_environment", lambda: own)
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setattr(course, "make_venv", lambda: None)
    monkeypatch.setattr(course, "stamp_path", lambda: tmp_path / "course-install.stamp")
    monkeypatch.setattr(course, "prerequisites", lambda: [])
    monkeypatch.setattr(course, "run", lambda *args: commands.append(tuple(map(str, args))))
    course.install()
    return commands


def test_pip_is_upgraded_only_in_the_venv_course_py_made(monkeypatch, tmp_path):
    upgrade = (sys.executable, "-m", "pip", "install", "--upgrade", "pip")
    assert upgrade in pip_commands(monkeypatch, tmp_path, own=False)
    (tmp_path / "course-install.stamp").unlink()
    assert upgrade not in pip_commands(monkeypatch, tmp_path, own=True), "your environment's pip is yours"


def test_an_install_is_redone_only_for_extras_it_did_not_install(monkeypatch, tmp_path):
    commands = pip_commands(monkeypatch, tmp_path, own=True)
    assert commands[-1][:5] == (sys.executable, "-m", "pip", "install", "-e") and commands[-1][5] == ".[test]"
    course.install(("test", "agentdojo"))  # `course.py test` wants AgentDojo too
    assert commands[-1][5] == ".[agentdojo,test]" and len(commands) == 2
    course.install(("test",))  # `course.py lab` afterwards: all there
    course.install(("test", "agentdojo"))
    assert len(commands) == 2
    assert (tmp_path / "course-install.stamp").read_text().split()[1:] == ["agentdojo", "test"]


# 4. one list of prerequisites, and the right interpreter on every platform


def test_install_and_check_read_the_same_prerequisites(monkeypatch, tmp_path, capsys):
    missing = course.Prerequisite("a fake compiler", False, "apt install fake", only_to_build=True)
    monkeypatch.setattr(course, "imports", lambda *modules: False)  # llama-cpp-python not built yet
    monkeypatch.setattr(course, "prerequisites", lambda: [missing])
    monkeypatch.setattr(course, "works", lambda interpreter: False)
    assert course.check() == 1
    assert "[FAIL] a fake compiler: apt install fake" in capsys.readouterr().out
    monkeypatch.setattr(course, "run", lambda *args: None)
    monkeypatch.setattr(course, "make_venv", lambda: None)
    monkeypatch.setattr(course, "in_own_environment", lambda: False)
    monkeypatch.setattr(course, "stamp_path", lambda: tmp_path / "stamp")
    course.install()
    assert "warning: no a fake compiler found; apt install fake" in capsys.readouterr().out
    monkeypatch.setattr(course, "prerequisites", lambda: [missing._replace(only_to_build=False)])
    with pytest.raises(SystemExit, match="apt install fake"):
        course.install()


def test_a_compiler_is_not_required_once_llama_cpp_is_built(monkeypatch, capsys):
    missing = course.Prerequisite("a fake compiler", False, "apt install fake", only_to_build=True)
    monkeypatch.setattr(course, "prerequisites", lambda: [missing])
    monkeypatch.setattr(course, "imports", lambda *modules: True)
    monkeypatch.setattr(course, "works", lambda interpreter: True)
    monkeypatch.setattr(course, "model_state", lambda: (True, "the model m fetched"))
    assert course.check() == 0
    assert "[OK] a fake compiler: not needed" in capsys.readouterr().out


@pytest.mark.skipif(os.name == "nt", reason="the POSIX compiler names")
@pytest.mark.parametrize(("on_path", "found"), [({"gcc", "g++"}, True), ({"clang", "clang++"}, True),
                                                ({"cc"}, False), (set(), False)])
def test_a_c_and_a_cpp_compiler_are_both_needed(monkeypatch, on_path, found):
    monkeypatch.setattr(course.shutil, "which", lambda name: f"/usr/bin/{name}" if name in on_path else None)
    assert course.compilers_found() is found


def test_course_py_python_runs_the_course_interpreter(monkeypatch):
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    assert course.main(["python", "-c", "import sys; sys.exit(7)"]) == 7
    monkeypatch.setattr(course, "works", lambda interpreter: False)
    with pytest.raises(SystemExit, match="course.py setup"):
        course.main(["python", "-c", "pass"])


# 5. python -m course_server models without a warning


@pytest.mark.parametrize("args", [["--help"], ["list"]])
def test_the_models_command_runs_without_a_runtime_warning(tmp_path, args):
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "course_server", "models", *args],
                          capture_output=True, text=True, env={**os.environ, "COURSE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr


# 6. connect(model=...) starts the embedded server with that model


class FakeServer:
    """Stands in for ``EmbeddedServer``: records the model, starts nothing."""

    started: list[str | None] = []

    def __init__(self, *server_args: str, model: str | None = None) -> None:
        self.model, self.url, self.running = model, f"http://127.0.0.1:{9000 + len(self.started)}", True
        self.started.append(model)


@pytest.fixture
def fake_server(monkeypatch):
    FakeServer.started = []
    monkeypatch.setattr(runtime, "EmbeddedServer", FakeServer)
    monkeypatch.setattr(runtime, "_embedded", {})
    monkeypatch.setenv("COURSE_EMBEDDED", "1")
    monkeypatch.delenv("COURSE_MODEL", raising=False)
    monkeypatch.delenv("COURSE_MODEL_PATH", raising=False)
    return FakeServer


def test_connect_starts_the_embedded_server_with_the_model_asked_for(fake_server):
    client = runtime.connect("qwen2.5-coder:1.5b", quiet=True)
    assert fake_server.started == ["qwen2.5-coder:1.5b"] and client.model == "qwen2.5-coder:1.5b"
    assert runtime.connect(quiet=True).model == "qwen2.5-coder:0.5b"
    assert fake_server.started == ["qwen2.5-coder:1.5b", "qwen2.5-coder:0.5b"], "one server per model"
    assert runtime.connect("qwen2.5-coder:1.5b", quiet=True).host == client.host, "and reused"
    assert len(fake_server.started) == 2


def test_connect_without_the_courses_server_says_what_to_do(fake_server, monkeypatch):
    """A learner's library installed alone (no course_server, no llama.cpp) and no Ollama answering:
    ``connect()`` starts nothing and says how to get a server, instead of a child's traceback."""
    monkeypatch.setattr(runtime, "server_installed", lambda: False)
    with pytest.raises(runtime.ServerStartError, match="not installed.*ollama pull qwen2.5-coder:0.5b|OLLAMA_HOST"):
        runtime.connect(quiet=True)
    assert fake_server.started == []


def test_connect_defaults_to_the_model_the_server_loads(fake_server, monkeypatch):
    monkeypatch.setenv("COURSE_MODEL", "qwen2.5-coder:1.5b")
    assert runtime.connect(quiet=True).model == "qwen2.5-coder:1.5b"


def test_the_server_loads_the_model_named_even_with_a_model_path_set(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_MODEL_PATH", str(tmp_path / "mine.gguf"))
    assert runtime.server_env(None) is None and runtime.server_env("mine") is None
    env = runtime.server_env("qwen2.5-coder:1.5b")
    assert env["COURSE_MODEL"] == "qwen2.5-coder:1.5b" and "COURSE_MODEL_PATH" not in env


def test_connect_says_when_a_running_server_lacks_the_model(fake_server, monkeypatch, capsys):
    monkeypatch.delenv("COURSE_EMBEDDED")
    monkeypatch.setattr(runtime, "answers", lambda url: True)
    monkeypatch.setattr(runtime, "served_models", lambda url: {"llama3.2:3b"})
    client = runtime.connect("qwen2.5-coder:1.5b", quiet=True)
    said = capsys.readouterr().out
    assert "does not have qwen2.5-coder:1.5b (it has: llama3.2:3b)" in said
    assert "ollama pull qwen2.5-coder:1.5b" in said
    assert fake_server.started == ["qwen2.5-coder:1.5b"] and client.host != runtime.resolve_host()


# 7. course.py lab: which folder, and JupyterLab's own options passed through


@pytest.fixture
def lab_runs(monkeypatch):
    """What ``course.py lab`` would run, with nothing installed and nothing started."""
    commands: list[list[str]] = []
    monkeypatch.setattr(course, "setup", lambda: None)
    monkeypatch.setattr(course, "python", lambda: Path("py"))
    monkeypatch.setattr(course, "run", lambda *args, env=None: commands.append([str(a) for a in args]))
    return commands


@pytest.fixture
def lab_environments(monkeypatch):
    """The environment ``course.py lab`` would start JupyterLab with, one per run."""
    environments: list[dict[str, str]] = []
    monkeypatch.setattr(course, "setup", lambda: None)
    monkeypatch.setattr(course, "python", lambda: Path("py"))
    monkeypatch.setattr(course, "run", lambda *args, env=None: environments.append({"folder": str(args[4]), **env}))
    return environments


def test_lab_opens_the_notebooks_and_passes_jupyterlab_options_through(lab_runs):
    assert course.main(["lab", "--no-browser", "--port", "8899", "--IdentityProvider.token=abc"]) == 0
    (command,) = lab_runs
    assert command[:5] == ["py", "-m", "jupyter", "lab", "notebooks"]
    assert command[-4:] == ["--no-browser", "--port", "8899", "--IdentityProvider.token=abc"]


def test_lab_opens_the_japanese_edition_with_its_language_in_jupyterlabs_environment(lab_environments, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setattr(course, "ROOT", tmp_path)
    for folder in ("notebooks/ja", "exercises/ja"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setenv("COURSE_LANG", "ja")  # from the shell: --lang decides, and en is the default
    monkeypatch.chdir(tmp_path)
    course.main(["lab"])
    course.main(["lab", "--lang", "ja", "--no-browser"])
    course.main(["lab", "--lang=ja"])
    course.main(["lab", "--lang", "en"])
    course.main(["lab", "exercises", "--lang", "ja"])
    course.main(["lab", str(tmp_path / "exercises" / "ja")])  # an edition's folder named: its language
    seen = [(run["folder"], run["COURSE_LANG"]) for run in lab_environments]
    assert seen == [("notebooks", "en"), ("notebooks/ja", "ja"), ("notebooks/ja", "ja"), ("notebooks", "en"),
                    (str(tmp_path / "exercises" / "ja"), "ja"), (str(tmp_path / "exercises" / "ja"), "ja")]
    assert all(run["PATH"] == os.environ["PATH"] for run in lab_environments), "the rest of the environment is kept"


def test_lab_refuses_an_unknown_language_and_an_edition_not_built(lab_environments, tmp_path, monkeypatch):
    monkeypatch.setattr(course, "ROOT", tmp_path)
    (tmp_path / "notebooks").mkdir()
    with pytest.raises(SystemExit, match="editions en, ja"):
        course.main(["lab", "--lang", "fr"])
    with pytest.raises(SystemExit, match="needs a language"):
        course.main(["lab", "--lang"])
    with pytest.raises(SystemExit, match="no notebooks/ja/ yet: build the edition"):
        course.main(["lab", "--lang", "ja"])
    assert lab_environments == [], "nothing started"


def test_lab_opens_another_folder_named_first(lab_runs, tmp_path, monkeypatch):
    copy = tmp_path / "copy of the notebooks"
    copy.mkdir()
    course.main(["lab", str(copy), "--no-browser"])
    monkeypatch.chdir(tmp_path)  # a folder of the clone is found from anywhere, a relative one from here
    course.main(["lab", "exercises"])
    course.main(["lab", "copy of the notebooks"])
    assert [command[4] for command in lab_runs] == [str(copy), str(course.ROOT / "exercises"), str(copy)]
    assert lab_runs[0][-1] == "--no-browser"
    assert lab_runs[1][5:] in ([], ["--allow-root"]), "the folder is not passed on as an option too"


def test_lab_stops_before_installing_anything_when_the_folder_is_not_there(lab_runs, monkeypatch, tmp_path):
    monkeypatch.setattr(course, "setup", lambda: pytest.fail("nothing is installed for a folder that is not there"))
    with pytest.raises(SystemExit, match="no-such-folder is not a folder"):
        course.main(["lab", str(tmp_path / "no-such-folder")])
    assert lab_runs == []


# 7. a room's bundle: setup --from installs from its wheels with no network and no compiler


TINY_BACKEND = '''"""A build backend in a few lines, so the tiny course installs editable with nothing downloaded."""
import base64, hashlib, os, zipfile

NAME, VERSION = "tiny_course", "0.1"
METADATA = ("Metadata-Version: 2.1\\nName: tiny-course\\nVersion: 0.1\\nRequires-Dist: tinydep==1.0\\n"
            "Provides-Extra: test\\n")


def wheel(directory, files):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    files = {**files, f"{info}/METADATA": METADATA,
             f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\\n".join([*record, f"{info}/RECORD,,"]) + "\\n")
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return wheel(wheel_directory, {f"{NAME}.pth": os.path.abspath(".") + "\\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return wheel(wheel_directory, {f"{NAME}/__init__.py": ""})
'''


def tiny_wheel(folder: Path, filename: str) -> Path:
    """A wheel of the package ``tinydep`` (one module) under ``filename``'s tags."""
    name, version = filename.split("-")[:2]
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / filename, "w") as archive:
        archive.writestr(f"{name}.py", "ANSWER = 42\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        tag = "-".join(filename.removesuffix(".whl").split("-")[2:])
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: tiny\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{info}/RECORD", "")
    return folder / filename


def a_venv_with_this_pip(path: Path) -> None:
    """A venv at ``path`` whose pip is this Python's (linked in): made in a blink, unlike ``ensurepip``'s."""
    venv.create(path, with_pip=False, symlinks=os.name != "nt")
    interpreter = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = subprocess.check_output([str(interpreter), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                   text=True).strip()
    Path(site, "pip").symlink_to(Path(pip.__file__).parent, target_is_directory=True)


@pytest.fixture
def tiny_course(monkeypatch, tmp_path):
    """course.py pointed at a tiny course (one dependency, ``tinydep==1.0``) with its own
    ``.venv``, and an empty bundle folder; the model fetch is only recorded."""
    root = tmp_path / "course"
    root.mkdir()
    (root / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "tiny_backend"\n'
                                         'backend-path = ["."]\n')
    (root / "tiny_backend.py").write_text(TINY_BACKEND)
    (root / "tiny_course.py").write_text("")
    a_venv_with_this_pip(tmp_path / ".venv")
    interpreter = tmp_path / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    monkeypatch.setattr(course, "ROOT", root)
    monkeypatch.setattr(course, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(course, "in_own_environment", lambda: False)
    monkeypatch.setattr(course, "python", lambda: interpreter)
    commands = []
    monkeypatch.setattr(course, "run", lambda *args: commands.append([str(a) for a in args]))
    (tmp_path / "stick" / "wheels").mkdir(parents=True)
    return tmp_path / "stick", commands


def test_setup_from_a_bundle_installs_its_wheels_with_no_index_then_copies_its_models(tiny_course, capfd):
    stick, commands = tiny_course
    tiny_wheel(stick / "wheels", "tinydep-1.0-py3-none-any.whl")
    writer.write_manifest(stick)
    course.main(["setup", "--from", str(stick)])
    assert subprocess.run([str(course.python()), "-c", "import tinydep, tiny_course; assert tinydep.ANSWER == 42"],
                          cwd=stick).returncode == 0
    out = capfd.readouterr().out
    assert "--no-index" in out and "--only-binary=:all:" in out and "Building wheel for tinydep" not in out
    assert f"--find-links {stick.resolve() / 'wheels'}" not in out, "pip reads the checked copy, not the stick"
    assert commands == [[str(course.python()), "-m", "course_server", "models", "fetch", "--bundle",
                         str(stick.resolve())]]
    assert course.stamp_path().read_text().split()[1:] == ["test"], "installed: later runs do not install again"


@pytest.mark.parametrize("lacking", ["tinydep-1.0-py3-none-win_arm64.whl", "tinydep-1.0.tar.gz"])
def test_setup_from_a_bundle_without_a_wheel_for_this_machine_names_it_and_compiles_nothing(tiny_course, lacking,
                                                                                            monkeypatch, tmp_path):
    stick, commands = tiny_course
    (tmp_path / "elsewhere").mkdir()  # this machine's pip settings name a folder that has the wheel: not used
    tiny_wheel(tmp_path / "elsewhere", "tinydep-1.0-py3-none-any.whl")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "elsewhere"))
    (tmp_path / "pip.conf").write_text(f"[global]\nfind-links = {tmp_path / 'elsewhere'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    if lacking.endswith(".whl"):
        tiny_wheel(stick / "wheels", lacking)  # built for another platform
    else:  # only the source: pip would build it, and a compiled package needs a compiler
        (stick / "wheels" / lacking).write_bytes(b"")
        tiny_wheel(stick / "wheels", "other-1.0-py3-none-any.whl")
    writer.write_manifest(stick)
    with pytest.raises(SystemExit) as stop:
        course.setup_from(stick)
    message = str(stop.value)
    assert "have no tinydep==1.0 for this machine" in message and course.this_platform() in message
    assert "nothing was compiled" in message and "--add-wheels DIR" in message
    assert commands == [], "no model is copied after a failed install"


def tamper_swap(stick: Path) -> None:
    """A wheel rewritten after the bundle was written: same name, a .pth file that would run at every start."""
    with zipfile.ZipFile(stick / "wheels" / "tinydep-1.0-py3-none-any.whl", "a") as archive:
        archive.writestr("evil.pth", "import os; os.system('touch pwned')\n")


def tamper_add(stick: Path) -> None:
    """A wheel dropped in beside the written ones: pip would prefer its higher version."""
    tiny_wheel(stick / "wheels", "tinydep-9.0-py3-none-any.whl")


def tamper_remove(stick: Path) -> None:
    (stick / "wheels" / "tinydep-1.0-py3-none-any.whl").unlink()
    tiny_wheel(stick / "wheels", "other-1.0-py3-none-any.whl")
    other = stick / "wheels" / "other-1.0-py3-none-any.whl"
    (stick / course.MANIFEST).write_text((stick / course.MANIFEST).read_text()
                                         + f"{course.sha256_of(other)}  wheels/{other.name}\n")


def tamper_manifest_gone(stick: Path) -> None:
    (stick / course.MANIFEST).unlink()


def tamper_manifest_path(stick: Path) -> None:
    """A manifest line that points outside wheels/."""
    (stick / course.MANIFEST).write_text((stick / course.MANIFEST).read_text() + f"{'0' * 64}  wheels/../setup.py\n")


def tamper_link(stick: Path, tmp_path: Path) -> None:
    """The listed wheel replaced by a link to another file with the same bytes (a stick can hold links)."""
    target = tmp_path / "elsewhere.whl"
    shutil.copy2(stick / "wheels" / "tinydep-1.0-py3-none-any.whl", target)
    (stick / "wheels" / "tinydep-1.0-py3-none-any.whl").unlink()
    (stick / "wheels" / "tinydep-1.0-py3-none-any.whl").symlink_to(target)


@pytest.mark.parametrize(("tamper", "said"), [
    (tamper_swap, "does not match its SHA-256"), (tamper_add, "which its SHA256SUMS does not list"),
    (tamper_remove, "lacks wheels/tinydep-1.0-py3-none-any.whl"), (tamper_manifest_gone, "has no SHA256SUMS"),
    (tamper_manifest_path, "is not a SHA-256 and a file of wheels/"), (tamper_link, "does not match its SHA-256")])
def test_setup_from_a_bundle_changed_after_it_was_written_installs_nothing_and_runs_nothing(tiny_course, tamper, said,
                                                                                           tmp_path, capfd):
    stick, commands = tiny_course
    tiny_wheel(stick / "wheels", "tinydep-1.0-py3-none-any.whl")
    writer.write_manifest(stick)
    tamper(stick, tmp_path) if tamper is tamper_link else tamper(stick)
    with pytest.raises(SystemExit, match=said) as stop:
        course.main(["setup", "--from", str(stick)])
    assert "Nothing was installed" in str(stop.value)
    assert "pip" not in capfd.readouterr().out, "pip never started"
    assert commands == [] and not course.stamp_path().exists(), "no install, no model copied"
    assert subprocess.run([str(course.python()), "-c", "import tinydep"], cwd=tmp_path).returncode != 0


def test_setup_from_a_bundle_checks_the_fingerprint_given_another_way(tiny_course, capfd):
    stick, commands = tiny_course
    tiny_wheel(stick / "wheels", "tinydep-1.0-py3-none-any.whl")
    fingerprint = writer.write_manifest(stick)
    assert fingerprint == hashlib.sha256((stick / course.MANIFEST).read_bytes()).hexdigest()
    # the manifest rewritten to match a swapped wheel: every file matches it, the fingerprint does not
    tamper_swap(stick)
    forged = writer.write_manifest(stick)
    with pytest.raises(SystemExit, match=f"has the fingerprint {forged}, not the {fingerprint}"):
        course.main(["setup", "--from", str(stick), "--fingerprint", fingerprint])
    assert commands == []
    with pytest.raises(SystemExit):
        course.main(["setup", "--fingerprint", fingerprint])  # only with --from
    course.main(["setup", "--from", str(stick), "--fingerprint", forged.upper()])
    assert len(commands) == 1, "the fingerprint that matches installs"


def test_setup_from_a_folder_that_is_no_bundle_says_so(tmp_path):
    with pytest.raises(SystemExit, match="is not a course bundle"):
        course.main(["setup", "--from", str(tmp_path)])


def test_a_bundle_readme_names_what_it_serves_and_each_model_s_sha256(tmp_path, bundle_writer):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "models").mkdir()
    for wheel in ["llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl", "pydantic_core-2.33.2-cp311-cp311-"
                  "manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "httpx-0.28.1-py3-none-any.whl"]:
        (tmp_path / "wheels" / wheel).write_bytes(b"")
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "models" / "m.gguf.sha256").write_text("ab" * 32 + "\n")
    writer.write_bundle_readme(tmp_path, "-DGGML_NATIVE=OFF")
    readme = (tmp_path / "README.md").read_text()
    assert "Python 3.11 on Linux x86_64 (glibc 2.17 or newer)" in readme
    assert f"`models/m.gguf`: SHA-256 `{'ab' * 32}`, 4 bytes" in readme
    assert "`wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl`" in readme and "`-DGGML_NATIVE=OFF`" in readme
    assert writer.wheel_platform("httpx-0.28.1-py3-none-any.whl") is None
    assert writer.wheel_platform("cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl") == (None, "Linux x86_64")
    assert writer.wheel_platform("numpy-2.4.6-cp312-cp312-win_amd64.whl") == ("3.12", "Windows amd64")
    assert writer.wheel_platform("numpy-2.4.6-cp313-cp313-macosx_14_0_arm64.whl") == ("3.13", "macOS arm64")
    assert writer.glibc_needed(["a-1-cp311-abi3-manylinux_2_34_x86_64.whl", "b-1-py3-none-manylinux1_x86_64.whl",
                                "c-1-py3-none-any.whl"]) == "2.34"


def test_bundle_refuses_a_folder_of_wheels_with_none_in_it_before_installing_anything(tmp_path, monkeypatch,
                                                                                     bundle_writer):
    monkeypatch.setattr(course, "install", lambda *args: pytest.fail("nothing is installed first"))
    with pytest.raises(SystemExit, match="holds no wheel"):
        writer.main([str(tmp_path / "out"), "--add-wheels", str(tmp_path)])


def test_adding_a_platform_to_a_bundle_changed_since_refuses_before_installing_anything(tmp_path, monkeypatch,
                                                                                       bundle_writer):
    out = tmp_path / "out"
    (out / "wheels").mkdir(parents=True)
    tiny_wheel(out / "wheels", "tinydep-1.0-py3-none-any.whl")
    writer.write_manifest(out)
    tiny_wheel(out / "wheels", "tinydep-9.0-py3-none-any.whl")
    monkeypatch.setattr(course, "install", lambda *args: pytest.fail("nothing is installed first"))
    with pytest.raises(SystemExit, match="does not list"):
        writer.main([str(out)])


def test_the_portable_build_never_targets_this_cpu_on_x86(monkeypatch):
    monkeypatch.setattr(writer.platform, "machine", lambda: "x86_64")
    args = writer.portable_build_args().split()
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_OPENMP=OFF" in args and "-DGGML_AVX2=ON" in args
    assert not any("AVX512" in a or "AMX" in a for a in args)


# 8. a bundle for this machine only (--this-machine): the wheel this machine was installed from


def llama_wheel_file(folder: Path, library: bytes, version: str = "0.3.36") -> Path:
    """A llama-cpp-python wheel whose ``RECORD`` lists its files' SHA-256, as pip's and scikit-build's do."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"llama_cpp_python-{version}.dist-info"
    files = {"llama_cpp/__init__.py": b"", "lib/libllama.so": library, f"{info}/METADATA": b"Name: llama-cpp-python\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for path, data in files.items()]
    wheel = folder / f"llama_cpp_python-{version}-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


def test_installed_reads_the_hashes_pip_recorded_for_each_file(monkeypatch):
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    version, files = course.installed("pytest")
    assert version == pytest.__version__
    digest = base64.urlsafe_b64encode(hashlib.sha256(Path(pytest.__file__).read_bytes()).digest()).rstrip(b"=")
    assert files["pytest/__init__.py"] == f"sha256={digest.decode()}"
    assert course.installed("no-such-package-here") is None


def test_the_kept_wheels_are_the_course_s_and_those_in_pip_s_wheel_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "course"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip"))
    ours = llama_wheel_file(tmp_path / "course" / "wheels" / "0123456789ab", b"without AMX")
    pips = llama_wheel_file(tmp_path / "pip" / "wheels" / "a7" / "aa" / "8f", b"native")
    assert course.kept_llama_wheels() == [ours, pips]
    assert course.llama_origin(ours) == "the course's cache folder" and course.llama_origin(pips) == "pip's wheel cache"


def test_this_machine_takes_the_very_wheel_llama_cpp_python_was_installed_from(monkeypatch, tmp_path):
    portable = llama_wheel_file(tmp_path / "course", b"portable build")
    native = llama_wheel_file(tmp_path / "pip", b"native build")
    older = llama_wheel_file(tmp_path / "old", b"native build", version="0.3.16")
    monkeypatch.setattr(course, "kept_llama_wheels", lambda: [older, portable, native])
    monkeypatch.setattr(course, "installed", lambda name: ("0.3.36", {**course.wheel_hashes(native), "x.pyc": ""}))
    assert course.this_machine_llama_wheel() == native
    monkeypatch.setattr(course, "kept_llama_wheels", lambda: [older, portable])
    with pytest.raises(SystemExit, match="installed here is none of the 2 wheel.s. this machine keeps"):
        course.this_machine_llama_wheel()
    monkeypatch.setattr(course, "installed", lambda name: None)
    with pytest.raises(SystemExit, match="not installed in the course's Python"):
        course.this_machine_llama_wheel()


@pytest.fixture
def this_machine_bundle(monkeypatch, tmp_path, bundle_writer):
    """``bundle --this-machine`` with its pip and model steps only recorded: the pip step puts
    ``pip_puts`` (a wheel, or nothing) into the bundle's wheels folder as pip wheel would."""
    native = llama_wheel_file(tmp_path / "pip", b"native build")
    monkeypatch.setattr(course, "install", lambda *args: None)
    monkeypatch.setattr(course, "this_machine_llama_wheel", lambda: native)
    commands, puts = [], {"wheel": native}

    def run(*args):
        commands.append([str(a) for a in args])
        if "wheel" in commands[-1] and puts["wheel"] is not None:
            shutil.copy2(puts["wheel"], tmp_path / "out" / "wheels" / native.name)
    monkeypatch.setattr(course, "run", run)
    return tmp_path / "out", commands, puts


def test_a_bundle_for_this_machine_holds_its_installed_wheel_says_so_and_names_the_cpu(this_machine_bundle):
    out, commands, _ = this_machine_bundle
    writer.main([str(out), "--this-machine"])
    assert set(course.read_manifest(out)) == {path.name for path in (out / "wheels").iterdir()}, "every wheel listed"
    assert commands[-1][-4:] == ["course_server", "models", "bundle", str(out)]
    assert (out / course.THIS_MACHINE).read_text().splitlines()[0] == course.cpu_identity()
    readme = (out / "README.md").read_text()
    assert "do not carry this bundle to other laptops" in readme and "(pip's wheel cache)" in readme
    assert course.cpu_identity() in readme and "Adding a platform" not in readme


def test_a_bundle_whose_pip_step_took_another_llama_cpp_python_is_not_finished(this_machine_bundle, tmp_path):
    out, commands, puts = this_machine_bundle
    for other in (llama_wheel_file(tmp_path / "index", b"built again"), None):
        puts["wheel"] = other
        shutil.rmtree(out, ignore_errors=True)
        with pytest.raises(SystemExit, match="pip put another llama-cpp-python than"):
            writer.main([str(out), "--this-machine"])
    assert not any("models" in " ".join(command) for command in commands)


def test_a_bundle_for_this_machine_is_never_mixed_with_a_room_s(monkeypatch, tmp_path, bundle_writer):
    monkeypatch.setattr(course, "install", lambda *args: pytest.fail("nothing is installed first"))
    room, mine = tmp_path / "room", tmp_path / "mine"
    for bundle in (room, mine):
        (bundle / "wheels").mkdir(parents=True)
    tiny_wheel(room / "wheels", "tinydep-1.0-py3-none-any.whl")
    (mine / course.THIS_MACHINE).write_text(course.cpu_identity() + "\n")
    with pytest.raises(SystemExit, match="holds a room's bundle"):
        writer.main([str(room), "--this-machine"])
    with pytest.raises(SystemExit, match="holds a bundle for one machine only"):
        writer.main([str(mine)])
    with pytest.raises(SystemExit, match="not both"):
        writer.main([str(mine), "--this-machine", "--add-wheels", str(room / "wheels")])


def test_setup_from_a_bundle_for_another_cpu_stops_before_installing(tiny_course):
    stick, commands = tiny_course
    tiny_wheel(stick / "wheels", "tinydep-1.0-py3-none-any.whl")
    writer.write_manifest(stick)
    (stick / course.THIS_MACHINE).write_text("Some Other CPU, 80 feature flags (sha256 000000000000)\n")
    with pytest.raises(SystemExit, match="for another CPU .Some Other CPU.*illegal instruction"):
        course.setup_from(stick)
    assert commands == [] and not course.stamp_path().exists()
    (stick / course.THIS_MACHINE).write_text(course.cpu_identity() + "\nllama-cpp-python: ...\n")
    course.setup_from(stick)  # on the CPU it names: installed
    assert course.stamp_path().exists() and commands[-1][-2:] == ["--bundle", str(stick.resolve())]


def test_slides_runs_the_library_s_slides_command_in_the_course_s_python(monkeypatch):
    calls = []
    monkeypatch.setattr(course, "install", lambda *args: calls.append("install"))
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setattr(course.subprocess, "run", lambda command, **kw: calls.append(command)
                        or subprocess.CompletedProcess(command, 3))
    assert course.main(["slides", "OUT", "notebooks/01_the_wire.ipynb"]) == 3
    assert calls == ["install", [sys.executable, "-m", "course_tools", "slides", "OUT", "notebooks/01_the_wire.ipynb"]]


def test_bundle_installs_then_runs_the_tools_bundle_writer_in_the_course_s_python(monkeypatch):
    calls = []
    monkeypatch.setattr(course, "install", lambda *args: calls.append("install"))
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setattr(course.subprocess, "run", lambda command, **kw: calls.append(command)
                        or subprocess.CompletedProcess(command, 1))
    assert course.main(["bundle", "OUT", "--this-machine", "--model", "qwen2.5-coder:1.5b"]) == 1
    assert calls == ["install", [sys.executable, "-m", "course_tools", "bundle", "OUT", "--this-machine", "--model",
                                 "qwen2.5-coder:1.5b"]]


WORKERS = ["-n", "2", "--dist", "loadfile", "--no-loadscope-reorder"]


@pytest.mark.parametrize(("args", "workers"), [
    (["-x", "-k", "foo"], WORKERS), ([], WORKERS), (["tests/x.py", "--", "-v", "--lf"], WORKERS), (["-h"], WORKERS),
    (["--fast"], []), (["-n", "0"], []), (["-n3"], []), (["--dist", "load"], []), (["-p", "no:xdist"], []),
])
def test_the_arguments_after_test_go_to_pytest_as_they_are(monkeypatch, args, workers):
    """The whole suite runs on two workers, a file to each; the fast tier, or a run that says
    how to use xdist, runs as asked."""
    commands = []
    monkeypatch.setattr(course, "setup", lambda extras: commands.append(["setup", *extras]))
    monkeypatch.setattr(course, "python", lambda: Path("py"))
    monkeypatch.setattr(course, "run", lambda *args: commands.append([str(a) for a in args]))
    monkeypatch.setattr(course, "physical_cores", lambda: 2)
    assert course.main(["test", *args]) == 0
    assert commands == [["setup", "test", "agentdojo"], ["py", "-m", "pytest", *workers, *args]]
    monkeypatch.setattr(course, "physical_cores", lambda: 1)  # two hardware threads of one core
    commands.clear()
    assert course.main(["test", *args]) == 0
    assert commands[-1] == ["py", "-m", "pytest", *args]


def test_physical_cores_counts_cores_not_hardware_threads():
    assert 1 <= course.physical_cores() <= (os.cpu_count() or 1)


def test_help_lists_every_command(capsys):
    assert course.main(["--help"]) == 0
    usage = capsys.readouterr().out
    for command in ("lab", "test", "setup --from BUNDLE", "check", "grade", "bundle OUT", "slides OUT", "python ARGS"):
        assert f"course.py {command}" in usage
    assert course.main(["no-such-command"]) == 2


def test_grade_passes_its_arguments_to_the_gradebook_in_the_course_s_python(monkeypatch):
    calls = []
    monkeypatch.setattr(course, "install", lambda *args: calls.append("install"))
    monkeypatch.setattr(course, "model_fetched", lambda: True)
    monkeypatch.setattr(course, "python", lambda: Path(sys.executable))
    monkeypatch.setattr(course.subprocess, "run", lambda command, **kw: calls.append(command)
                        or subprocess.CompletedProcess(command, 0))
    assert course.main(["grade", "-v", "--class", "DIR", "--out", "OUT"]) == 0
    assert calls == ["install", [sys.executable, "-m", "course_grading", "gradebook", "-v", "--class", "DIR", "--out",
                                 "OUT"]]
