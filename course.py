#!/usr/bin/env python3
"""Set up the course and run it: the only two commands a learner needs.

    python3 course.py lab     # install what is missing, fetch the model, open JupyterLab
    python3 course.py test    # install what is missing, fetch the model, run every test

``lab`` opens ``notebooks/``; a folder named first opens that one instead
(``python3 course.py lab exercises``). ``--lang ja`` opens the Japanese edition instead
(``notebooks/ja/``, or ``exercises/ja/`` with ``exercises``), whose checks and grading speak
Japanese (``COURSE_LANG=ja`` in JupyterLab's environment); ``--lang en`` is the default. Every
other argument goes to JupyterLab as it is:
``python3 course.py lab --no-browser --port 8899 --IdentityProvider.token=SECRET`` runs it
headless on a port and with a token of your choice (what ``tests/test_browser.py`` does).

Also:

    python3 course.py setup                 # only install and fetch the model
    python3 course.py setup --from BUNDLE   # the same from a course bundle: no network, no compiler
    python3 course.py check                 # what is there, what is missing, which Python, which model source
    python3 course.py grade NOTEBOOK        # grade exercises (-v: nbval's output; --class DIR --out OUT)
    python3 course.py bundle OUT            # a room's offline bundle (python -m course_tools bundle OUT):
                                            #   wheels, model, README [--model qwen2.5-coder:1.5b]
                                            #   [--add-wheels DIR] [--this-machine: this machine only]
    python3 course.py slides OUT            # the lessons as slides (python -m course_tools slides OUT)
    python3 course.py python ARGS           # run the course's Python with ARGS, e.g. -m course_server

``grade`` prints one line per exercise: passed, failed with the check's message, or not
attempted; no notebook: a table over all of them; ``--class DIR --out OUT``: an
instructor's gradebook, see ``course_grading/gradebook.py``. Arguments after ``test`` go to pytest.

This script is the bootstrap, standard library only: it makes the environment and installs the
course; what runs after that is a room's own entry, run with the course's Python (``grade``:
``python -m course_grading gradebook``; ``bundle`` and ``slides``: ``python -m course_tools``).

Everything is installed into ``.venv`` next to this file, unless you run this script
from an environment you activated yourself (a venv, or a conda environment other than
``base``), which is then used.
The first install compiles llama-cpp-python from source: about 5 minutes on 2 cores,
once (pip keeps the built wheel in its cache; on a CPU that lists AMX it is built for the
CPU's vector extensions without AMX and kept in the course's cache folder, see
``llama_without_amx``). A bundle (``course.py bundle``, written by ``course_tools/bundle.py`` with
the wheel helpers here) carries that wheel built once, on the instructor's machine, for laptops
like it; ``setup --from`` checks the bundle's ``SHA256SUMS`` and installs it with no compiler.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import importlib.metadata as metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zipfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name the same folder or file (after following links)."""
    return Path(a).resolve() == Path(b).resolve()


def venv_activated() -> bool:
    """Whether this script runs in a virtual environment other than the course's ``.venv``."""
    return sys.prefix != sys.base_prefix and not same_path(sys.prefix, VENV)


def conda_env_activated() -> bool:
    """Whether this script runs on a conda environment you activated, other than ``base``.

    Conda's installer can activate ``base`` in every new shell: nobody chose it for this
    course, and installing into it would mix the course's packages with conda's own. Conda
    names it ``CONDA_DEFAULT_ENV=base``, and its folder is conda's root, the one that holds
    ``condabin/``. A named environment counts only if this script runs on its Python (the
    ``python3`` on your ``PATH`` can be another one).
    """
    prefix = os.environ.get("CONDA_PREFIX")
    if not prefix or os.environ.get("CONDA_DEFAULT_ENV") == "base" or (Path(prefix) / "condabin").is_dir():
        return False
    return same_path(sys.prefix, prefix)


def in_own_environment() -> bool:
    """Whether to install into the environment that runs this script (yours) instead of ``.venv``."""
    return venv_activated() or conda_env_activated()


def python() -> Path:
    """The interpreter the course runs on: your environment's, or ``.venv``'s
    (``.venv/bin/python``; on Windows ``.venv\\Scripts\\python.exe``)."""
    if in_own_environment():
        return Path(sys.executable)
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def works(interpreter: Path) -> bool:
    """Whether ``interpreter`` starts and has pip: a venv whose making failed half-way has not."""
    try:
        return subprocess.run([str(interpreter), str(Path(__file__).resolve()), "probe", "pip"],
                              capture_output=True).returncode == 0
    except OSError:  # no such file, or not a program
        return False


def imports(*modules: str) -> bool:
    """Whether the course's Python can import all of ``modules``."""
    return works(python()) and subprocess.run([str(python()), str(Path(__file__).resolve()), "probe", *modules],
                                              capture_output=True, cwd=ROOT).returncode == 0


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    """Run a command in the course's folder (with ``env`` as its whole environment, if given);
    stop with its exit status if it fails."""
    print("$", " ".join(str(a) for a in args), flush=True)
    done = subprocess.run([str(a) for a in args], cwd=ROOT, env=env)
    if done.returncode != 0:
        sys.exit(done.returncode)


class Prerequisite(NamedTuple):
    """Something the machine must provide before the course can be installed."""

    what: str
    found: bool
    how: str  # what to do when it is missing
    only_to_build: bool  # needed only until llama-cpp-python is built and installed


def compilers_found() -> bool:
    """Whether a C and a C++ compiler are there to build llama-cpp-python.

    On Windows they come with Visual Studio's Build Tools; CMake finds them through the
    Visual Studio Installer (``vswhere.exe``) even when ``cl`` is not on ``PATH``.
    """
    if os.name == "nt":
        installer = Path(os.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)"),
                         "Microsoft Visual Studio", "Installer", "vswhere.exe")
        return bool(shutil.which("cl")) or installer.is_file()
    return (any(shutil.which(c) for c in ("cc", "gcc", "clang"))
            and any(shutil.which(c) for c in ("c++", "g++", "clang++")))


def prerequisites() -> list[Prerequisite]:
    """What the machine must provide: the one list that ``install`` acts on and ``check`` reports.

    llama-cpp-python is on the package index as source code only, so pip compiles it, once:
    that needs a C and a C++ compiler, which are not needed any more once it is installed.
    """
    if os.name == "nt":
        how = "install Visual Studio Build Tools with 'Desktop development with C++'"
    elif sys.platform == "darwin":
        how = "run `xcode-select --install`"
    else:
        how = "on Debian/Ubuntu run `sudo apt install build-essential`"
    if conda_env_activated():
        how += ", or in conda `conda install -c conda-forge c-compiler cxx-compiler`"
    return [
        Prerequisite("Python 3.10 or newer", sys.version_info >= (3, 10),
                     f"this is {sys.version.split()[0]}; install a newer Python", only_to_build=False),
        Prerequisite("a C and C++ compiler (to build llama-cpp-python)", compilers_found(), how,
                     only_to_build=True),
    ]


NO_VENV = ("Python could not make a virtual environment with pip in it{error}. On Debian and Ubuntu "
           "that part of Python is a package of its own: `sudo apt install python3-venv` "
           "(or python3.{minor}-venv), then run this again. Or use conda: see 'Using conda' in README.md.")


NO_PIP = ("The environment you activated has no pip: `conda install pip` (conda) or "
          "`python -m ensurepip` adds it; then run this again.")


def make_venv() -> None:
    """Make sure ``.venv`` has a Python that runs and has pip; say what to do if it cannot be made.

    A ``python3 -m venv`` that failed (on Debian/Ubuntu without ``python3-venv``) leaves a
    ``.venv`` folder with no working Python or no pip in it, and every later pip command
    fails without saying why. Such a folder is removed and made again, but only if it looks
    like a venv (it has ``pyvenv.cfg``) or is empty: a folder of yours is never deleted.
    """
    if works(python()):
        return
    if VENV.exists() or VENV.is_symlink():
        looks_like_a_venv = VENV.is_dir() and ((VENV / "pyvenv.cfg").is_file() or not any(VENV.iterdir()))
        if VENV.is_symlink() or not looks_like_a_venv:
            sys.exit(f"{VENV} is in the way and is not a virtual environment: move it, then run this again.")
        print(f"{VENV.name}/ is half-made (no working Python or no pip in it), probably left by an "
              "earlier attempt that failed; making it again.", flush=True)
        shutil.rmtree(VENV)
    print(f"Creating a virtual environment in {VENV.name}/ ...", flush=True)
    error = ""
    try:
        venv.create(VENV, with_pip=True)
    except (subprocess.CalledProcessError, OSError) as failure:
        error = f" ({failure})"
    if error or not works(python()):
        shutil.rmtree(VENV, ignore_errors=True)  # ours, just made: the next run starts clean
        sys.exit(NO_VENV.format(error=error, minor=sys.version_info.minor))


def stamp_path() -> Path:
    """The file, inside the environment, that records which ``pyproject.toml`` was installed."""
    prefix = subprocess.check_output([str(python()), str(Path(__file__).resolve()), "probe", "--prefix"], text=True)
    return Path(prefix.strip()) / "course-install.stamp"


# llama.cpp's build option for each x86 vector extension, by the extension's name in /proc/cpuinfo
GGML_OPTIONS = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "bmi2": "GGML_BMI2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
                "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512", "avx512vbmi": "GGML_AVX512_VBMI",
                "avx512_vnni": "GGML_AVX512_VNNI", "avx512_bf16": "GGML_AVX512_BF16"}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def llama_build_args(flags: set[str]) -> str | None:
    """CMake arguments for llama-cpp-python where its default build would crash, else None.

    llama.cpp builds for "this CPU" (``-march=native``). A CPU that lists AMX, Intel's matrix
    unit, can run under a kernel or a virtual machine that does not let programs use it; the
    library then stops with an illegal instruction at the first generation. There, build for
    the CPU's vector extensions one by one, without AMX."""
    if "amx_tile" not in flags:
        return None
    options = [f"-D{option}=ON" for flag, option in GGML_OPTIONS.items() if flag in flags]
    return " ".join(["-DGGML_NATIVE=OFF", *options])


def install(extras: tuple[str, ...] = ("test",), wheelhouse: Path | None = None, bundle: Path | None = None) -> None:
    """Install the course (editable) with its ``extras`` (the test tools; ``course.py test``
    adds AgentDojo), if needed: into ``.venv``, which is made here, or into the environment you
    activated.

    With a ``wheelhouse`` (the checked copy of a ``bundle``'s ``wheels/`` folder, see
    ``checked_wheels``) nothing is downloaded and nothing is compiled: pip takes every package
    from that folder, as a wheel (``--no-index --only-binary=:all:``), or stops and says which
    one the bundle lacks for this machine."""
    missing = [p for p in prerequisites() if not p.found and not (wheelhouse and p.only_to_build)]
    for p in missing:
        if not p.only_to_build:
            sys.exit(f"The course needs {p.what}: {p.how}.")
    if not in_own_environment():
        make_venv()
    elif not works(python()):
        sys.exit(NO_PIP)
    stamp = stamp_path()
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    done, *installed = stamp.read_text().split() if stamp.exists() else [""]
    if done == wanted and set(extras) <= set(installed):
        return
    if missing and not imports("llama_cpp"):
        for p in missing:
            print(f"warning: no {p.what} found; {p.how}.", flush=True)
    extras = tuple(sorted(set(extras) | (set(installed) if done == wanted else set())))
    if wheelhouse is not None:
        bundle = bundle or wheelhouse.parent
        print(f"Installing the course's packages from {bundle}, with no network and no compiler.", flush=True)
        offline = ["--no-index", "--find-links", str(wheelhouse), "--only-binary=:all:"]
        if not in_own_environment() and list(wheelhouse.glob("pip-*.whl")):
            run_pip_offline(bundle, "install", *offline, "--upgrade", "pip")
        run_pip_offline(bundle, "install", *offline, "-e", f".[{','.join(extras)}]")
    else:
        print("Installing the course's packages. The first time, pip compiles llama-cpp-python "
              "from source (about 5 minutes on 2 cores).", flush=True)
        if not in_own_environment():  # your own environment's pip is yours to upgrade, not ours
            run(python(), "-m", "pip", "install", "--upgrade", "pip")
        run(python(), "-m", "pip", "install", "-e", f".[{','.join(extras)}]", *llama_without_amx())
    stamp.write_text(" ".join([wanted, *extras]))


def this_platform() -> str:
    """This machine as wheels name it, roughly: the OS and CPU, and the Python version."""
    return f"{sysconfig.get_platform()}, Python {sys.version_info.major}.{sys.version_info.minor}"


def run_pip_offline(bundle: Path, *args: str) -> None:
    """Run the course's pip with ``args`` (showing its output as it comes), ignoring pip's settings
    on this machine (its configuration files and ``PIP_*`` variables: no other index or folder of
    wheels creeps in); if it fails
    because the wheelhouse lacks a package for this machine, stop and say which, and how to add it."""
    command = [str(python()), "-m", "pip", "--isolated", *args]
    print("$", " ".join(command), flush=True)
    no_settings = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # with --isolated: no pip.conf, no PIP_* variable
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=no_settings)
    assert process.stdout is not None
    output = []
    for line in process.stdout:
        print(line, end="", flush=True)
        output.append(line)
    if process.wait() == 0:
        return
    lacking = re.findall(r"No matching distribution found for (\S+)", "".join(output))
    if not lacking:
        sys.exit(process.returncode)
    sys.exit(f"\nThe bundle's wheels ({bundle / 'wheels'}) have no {', '.join(lacking)} for this machine "
             f"({this_platform()}); nothing was compiled. A bundle serves the platforms it was built on "
             f"(its README.md lists them). To add this one: on a machine like this one, with a C/C++ compiler, run "
             f"`python3 course.py bundle {bundle}` (it adds that machine's wheels to the bundle), or "
             f"build the wheels there with `pip wheel` and add them with `python3 course.py bundle "
             f"{bundle} --add-wheels DIR`.")


def dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirements of ``pyproject.toml``'s ``[project] dependencies`` and of its ``server``
    extra (where llama-cpp-python is), as written there.

    Python 3.11 and newer read TOML (``tomllib``). Python 3.10 cannot, and this script runs
    before anything is installed, so there the two arrays are cut out of the text and their
    quoted strings read in order, comments skipped: enough for this file (strings in double
    quotes without escapes), not for TOML in general."""
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        arrays = re.findall(r"^(?:dependencies|server)\s*=\s*\[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
        if not arrays:
            sys.exit(f"{pyproject} has no dependencies array")
        return [string for array in arrays for string in re.findall(r'"([^"]*)"|#[^\n]*', array) if string]
    project = tomllib.loads(text)["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("server", [])]


def pinned_requirement(name: str, pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``name``'s requirement among the course's dependencies, e.g. ``llama-cpp-python>=0.3.16,<0.4``."""
    for requirement in dependencies(pyproject):
        if re.split(r"[\s\[<>=!~;@]", requirement, maxsplit=1)[0].lower() == name.lower():
            return requirement
    sys.exit(f"{pyproject} does not list {name} among its dependencies")


def llama_without_amx() -> list[str]:
    """Extra ``pip install`` arguments that install llama-cpp-python built without AMX where
    this CPU lists AMX (``llama_build_args``); none elsewhere, and none when the environment
    you activated has llama-cpp-python already (conda-forge's).

    The wheel is built here, once (``llama_wheel``), and that exact wheel is installed; later
    installs find it in the course's cache folder."""
    cmake_args = llama_build_args(cpu_flags())
    if not cmake_args:
        return []
    if in_own_environment() and imports("llama_cpp"):
        return []  # yours, e.g. conda-forge's build (not built for this CPU, so no AMX either)
    wheel = llama_wheel(cmake_args, f"This CPU lists AMX: building llama-cpp-python without it ({cmake_args}).")
    return ["--find-links", str(wheel.parent), f"llama-cpp-python=={wheel.name.split('-')[1]}"]


def course_cache() -> Path:
    """The course's cache folder (``COURSE_CACHE_DIR``, else ``~/.cache/course-tool-calling``)."""
    return Path(os.environ.get("COURSE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "course-tool-calling").expanduser()


def llama_wheel(cmake_args: str, why: str) -> Path:
    """llama-cpp-python's wheel built with ``cmake_args``, built once (saying ``why``) into the
    course's cache folder, a folder per set of arguments, and found there afterwards.

    pip's own wheel cache knows nothing of CMake arguments and could hand back a wheel built
    with others, so the build skips it (``--no-cache-dir``)."""
    yours = os.environ.get("CMAKE_ARGS", "")
    effective = yours if cmake_args in yours else f"{yours} {cmake_args}".strip()  # set by an earlier build here
    wheels = course_cache() / "wheels" / hashlib.sha256(effective.encode()).hexdigest()[:12]
    if not list(wheels.glob("llama_cpp_python-*.whl")):
        print(why, flush=True)
        os.environ["CMAKE_ARGS"] = effective
        requirement = pinned_requirement("llama-cpp-python")
        run(python(), "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "-w", wheels, requirement)
    return sorted(wheels.glob("llama_cpp_python-*.whl"))[-1]


def record_hashes(record: str) -> dict[str, str]:
    """The files a wheel's ``RECORD`` lists with a hash, each with its hash (``sha256=...``);
    the ``.data/`` folder is left out (pip rewrites its scripts when it installs them)."""
    return {row[0]: row[1] for row in csv.reader(record.splitlines())
            if len(row) >= 2 and row[1] and ".data/" not in row[0]}


def wheel_hashes(wheel: Path) -> dict[str, str]:
    """The hashes a wheel's own ``RECORD`` gives its files (empty if it has none)."""
    with zipfile.ZipFile(wheel) as archive:
        records = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        return record_hashes(archive.read(records[0]).decode()) if records else {}


def site_folders(interpreter: Path) -> list[str] | None:
    """Where ``interpreter`` keeps its installed packages, read from the folder it lives in:
    ``lib/python3.X/site-packages`` of its environment (``Lib/site-packages`` on Windows); None
    when it is the Python running this script, whose own ``sys.path`` already says."""
    if same_path(interpreter, sys.executable):
        return None
    home = interpreter.parent.parent
    return [str(folder) for folder in [*sorted(home.glob("lib/python3*/site-packages")), home / "Lib" / "site-packages"]
            if folder.is_dir()]


def installed(name: str) -> tuple[str, dict[str, str]] | None:
    """The version of ``name`` installed in the course's Python and the hashes its ``RECORD``
    gives its files (pip keeps the wheel's own), or None if it is not installed there. Read
    from that Python's package folders (``importlib.metadata``), so nothing is run in it."""
    folders = site_folders(python())
    found = next(iter(metadata.distributions(name=name) if folders is None
                      else metadata.distributions(name=name, path=folders)), None)
    if found is None:
        return None
    return found.version, record_hashes(found.read_text("RECORD") or "")


def kept_llama_wheels() -> list[Path]:
    """The llama-cpp-python wheels this machine keeps from earlier builds: the course's (its cache
    folder's ``wheels/``, see ``llama_wheel``) and pip's (its wheel cache, ``pip cache list``)."""
    ours = sorted(course_cache().glob("wheels/*/llama_cpp_python-*.whl"))
    listed = subprocess.run([str(python()), "-m", "pip", "cache", "list", "llama_cpp_python", "--format=abspath"],
                            capture_output=True, text=True, cwd=ROOT)  # fails if pip's cache is off: none of pip's
    pips = [Path(line) for line in listed.stdout.split() if line.endswith(".whl")] if listed.returncode == 0 else []
    return ours + pips


def this_machine_llama_wheel() -> Path:
    """The very wheel the course's llama-cpp-python was installed from, found among the wheels
    this machine keeps (``kept_llama_wheels``), or a stop that says why; nothing is built.

    It is that wheel if every file it holds (its ``.dist-info``, named with the version, too) is
    installed with the same SHA-256: pip's wheel cache, say, may also keep a build made with
    other CMake arguments, or of another version, which is not taken."""
    found = installed("llama-cpp-python")
    if found is None:
        sys.exit("llama-cpp-python is not installed in the course's Python: run `python3 course.py setup` first.")
    version, files = found
    kept = kept_llama_wheels()
    for wheel in kept:
        hashes = wheel_hashes(wheel)
        if hashes and all(files.get(path) == digest for path, digest in hashes.items()):
            return wheel
    sys.exit(f"The llama-cpp-python {version} installed here is none of the {len(kept)} wheel(s) this machine keeps "
             f"(the course's cache folder's wheels/ and pip's wheel cache, `pip cache list llama_cpp_python`): "
             "it was installed from elsewhere (conda-forge, or a build whose wheel is gone), so --this-machine "
             "has no wheel to put in. `python3 course.py bundle OUT` without --this-machine builds a portable one.")


def cpu_identity() -> str:
    """This CPU as a build for it depends on it: on Linux its model and a digest of its feature
    flags (a virtual machine can hide some of the model's); elsewhere what ``platform`` says."""
    flags = cpu_flags()
    if not flags:
        return f"{platform.machine()} {platform.processor()}".strip()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.machine()
    digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return f"{model}, {len(flags)} feature flags (sha256 {digest})"


def llama_origin(wheel: Path) -> str:
    """Which of the places ``kept_llama_wheels`` looks in holds ``wheel``, in words."""
    return "the course's cache folder" if course_cache().resolve() in wheel.resolve().parents else "pip's wheel cache"


THIS_MACHINE = "THIS-MACHINE-ONLY.txt"  # in a bundle written with --this-machine: the CPU it was built for


def setup(extras: tuple[str, ...] = ("test",)) -> None:
    install(extras)
    run(python(), "-m", "course_server", "models", "fetch")


def setup_from(bundle: Path, extras: tuple[str, ...] = ("test",), fingerprint: str | None = None) -> None:
    """Set the course up from a bundle (``course.py bundle``) with no network at all: the
    packages from its wheels, the models it holds copied into the cache once their SHA-256
    matches.

    Nothing from the bundle runs before every file pip could install from it has been checked:
    its wheels are copied into a private folder, each checked against the bundle's
    ``SHA256SUMS`` on the way (``checked_wheels``), and pip installs from that copy only, so a
    wheel swapped or added on the stick (one with a ``.pth`` file runs at every Python start) is
    refused, not installed. ``fingerprint``: the manifest's own SHA-256, as ``bundle`` printed it
    on the instructor's machine; given, a bundle whose manifest was rewritten is refused too."""
    bundle = bundle.expanduser().resolve()
    wheelhouse = bundle / "wheels"
    if not list(wheelhouse.glob("*.whl")):
        sys.exit(f"{bundle} is not a course bundle: it has no wheels/ folder with wheels in it "
                 "(`python3 course.py bundle FOLDER` writes one, on the instructor's machine).")
    marker = bundle / THIS_MACHINE
    built_for = (marker.read_text(encoding="utf-8").splitlines() or [""])[0] if marker.is_file() else None
    if built_for is not None and built_for != cpu_identity():
        sys.exit(f"{bundle} was written with --this-machine for another CPU ({built_for}; this one is "
                 f"{cpu_identity()}): its llama-cpp-python can stop with an illegal instruction here. Nothing "
                 "was installed. A room's bundle is written without --this-machine (`python3 course.py bundle OUT`).")
    with tempfile.TemporaryDirectory(prefix="course-bundle-") as private:
        checked = checked_wheels(bundle, Path(private), fingerprint)
        install(extras, checked, bundle)
    run(python(), "-m", "course_server", "models", "fetch", "--bundle", bundle)


# in a bundle: the SHA-256 of every file in wheels/, a line each, as `sha256sum` writes them
# (written by course_tools/bundle.py, read here by `setup --from`)
MANIFEST = "SHA256SUMS"


def sha256_of(path: Path, copy_to: Path | None = None) -> str:
    """The SHA-256 of the file at ``path``, read once; with ``copy_to``, the bytes read are written
    there as well, so the copy is exactly what was hashed (the original may change afterwards)."""
    digest = hashlib.sha256()
    with path.open("rb") as source, (copy_to.open("xb") if copy_to else open(os.devnull, "wb")) as copy:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
            copy.write(chunk)
    return digest.hexdigest()


def read_manifest(bundle: Path, fingerprint: str | None = None) -> dict[str, str]:
    """The bundle's ``SHA256SUMS`` as {file name in wheels/: SHA-256}, or a stop that says what is
    wrong with it: missing, not matching the ``fingerprint`` given, or a line that is not a hash
    and a file of ``wheels/``."""
    manifest = bundle / MANIFEST
    if not manifest.is_file():
        sys.exit(f"{bundle} has no {MANIFEST}, the SHA-256 of every file it installs: it was written by an older "
                 "course.py, or altered. Nothing was installed. Write the bundle again with "
                 "`python3 course.py bundle FOLDER`.")
    raw = manifest.read_bytes()
    if fingerprint is not None and hashlib.sha256(raw).hexdigest() != fingerprint.strip().lower():
        sys.exit(f"{bundle}'s {MANIFEST} has the fingerprint {hashlib.sha256(raw).hexdigest()}, not the "
                 f"{fingerprint} you were given: the bundle was changed since it was written. Nothing was installed.")
    hashes = {}
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        found = re.fullmatch(r"([0-9a-f]{64})  wheels/([A-Za-z0-9._+-]+)", line)
        if found is None or found[2] in (".", ".."):
            sys.exit(f"{bundle}'s {MANIFEST}, line {number}, is not a SHA-256 and a file of wheels/: {line[:120]!r}. "
                     "Nothing was installed.")
        hashes[found[2]] = found[1]
    return hashes


def checked_wheels(bundle: Path, into: Path, fingerprint: str | None = None) -> Path:
    """Copy the bundle's ``wheels/`` into ``into``, every file checked against the bundle's
    manifest (``read_manifest``) as it is copied, and return the copy; or stop, having installed
    nothing, at the first file the manifest does not list, lists with another SHA-256, or lists
    and the bundle lacks."""
    hashes = read_manifest(bundle, fingerprint)
    wheelhouse = bundle / "wheels"
    present = {path.name: path for path in wheelhouse.iterdir()}
    if unlisted := sorted(set(present) - set(hashes)):
        sys.exit(f"{bundle} holds wheels/{unlisted[0]}, which its {MANIFEST} does not list"
                 f"{f' (and {len(unlisted) - 1} more)' if len(unlisted) > 1 else ''}: something was added to the "
                 "bundle after it was written. Nothing was installed.")
    if absent := sorted(set(hashes) - set(present)):
        sys.exit(f"{bundle} lacks wheels/{absent[0]}, which its {MANIFEST} lists: the copy is incomplete. Nothing "
                 "was installed.")
    copy = into / "wheels"
    copy.mkdir()
    for name, path in sorted(present.items()):
        if not path.is_file() or path.is_symlink() or sha256_of(path, copy / name) != hashes[name]:
            sys.exit(f"{bundle}'s wheels/{name} does not match its SHA-256 in {MANIFEST}: the file was changed or "
                     "damaged after the bundle was written. Nothing was installed.")
    return copy


def slides(args: list[str]) -> int:
    """Write the lessons as slides (``python -m course_tools slides OUT``, nbconvert's slides
    exporter) with the course's Python, installing the course first if needed."""
    install()
    return subprocess.run([str(python()), "-m", "course_tools", "slides", *args], cwd=ROOT).returncode


def bundle(args: list[str]) -> int:
    """Write a room's offline bundle (``python -m course_tools bundle OUT``, see
    ``course_tools/bundle.py``) with the course's Python, installing the course first if needed."""
    install()
    return subprocess.run([str(python()), "-m", "course_tools", "bundle", *args], cwd=ROOT).returncode


def model_state() -> tuple[bool, str]:
    """Whether the model the course will use (``COURSE_MODEL_PATH``, else ``COURSE_MODEL``,
    else the 0.5B) is here and verified, and a line that names it and the source that served
    it, with why not if it is not there. The course's Python answers (``python -m course_server
    models check``: the model's name, then ``source: ...``): the library is
    installed there, not in the Python that runs this script."""
    done = subprocess.run([str(python()), "-m", "course_server", "models", "check"], capture_output=True, text=True,
                          cwd=ROOT)
    name, *rest = done.stdout.strip().splitlines() or ["the chosen model"]
    source = [line.removeprefix("source: ") for line in rest if line.startswith("source: ")]
    why = done.stderr.strip().splitlines()[-1:] if done.returncode else []
    served = f"; source: {source[0]}" if source else ""
    return done.returncode == 0, ": ".join([f"the model {name} fetched{served}", *why])


OPTIONAL_MODEL = "qwen2.5-coder:1.5b"  # the second model some lessons compare with the 0.5B


def optional_model_line() -> str:
    """A line about the optional 1.5B: what it adds and costs, and whether it is here. Not a
    requirement: without it the lessons print the course's recorded runs of it."""
    done = subprocess.run([str(python()), "-m", "course_server", "models", "check"], capture_output=True, text=True,
                          cwd=ROOT, env={**{k: v for k, v in os.environ.items() if k != "COURSE_MODEL_PATH"},
                                         "COURSE_MODEL": OPTIONAL_MODEL})
    if done.returncode == 0:
        return f"optional: the model {OPTIONAL_MODEL} fetched: lessons 3, 4 and 11 run it beside the 0.5B"
    return (f"optional: the model {OPTIONAL_MODEL} not fetched: lessons 3, 4 and 11 show its recorded runs instead; "
            f"`python3 course.py python -m course_server models fetch {OPTIONAL_MODEL}` adds it (a 1.1 GB download)")


def model_fetched() -> bool:
    """Whether the model the course will use is here and verified (size and checksum)."""
    return model_state()[0]


def check() -> int:
    """Say OK or FAIL for each requirement, without changing anything; 0 if all are OK."""
    built = imports("course_lib", "course_server", "course_grading", "course_tools", "llama_cpp", "jupyterlab")
    lines = []
    for p in prerequisites():
        if p.found or (p.only_to_build and built):
            lines.append((True, p.what if p.found else f"{p.what}: not needed, llama-cpp-python is built"))
        else:
            lines.append((False, f"{p.what}: {p.how}"))
    where = "the environment you activated" if in_own_environment() else f"{VENV.name}/, made by course.py"
    if works(python()):
        lines.append((True, f"the course's Python: {python()} ({where})"))
        lines.append((built, "course packages installed" + ("" if built else ": `python3 course.py setup`")))
        lines.append(model_state())
    elif in_own_environment():
        lines.append((False, f"the course's Python: {python()} (the environment you activated): {NO_PIP}"))
    elif VENV.exists():
        lines.append((False, f"{VENV.name}/ is half-made (no working Python or no pip): "
                             "`python3 course.py setup` makes it again"))
    else:
        lines.append((False, f"the course's Python: none yet at {python()}; `python3 course.py setup` makes it"))
    for ok, label in lines:
        print(f"[{'OK' if ok else 'FAIL'}] {label}")
    if works(python()) and built:
        print(f"[--] {optional_model_line()}")
    return 0 if all(ok for ok, _ in lines) else 1


def grade(args: list[str]) -> int:
    """Grade exercise notebooks (``course_grading.gradebook``); set up first, quietly if all is there.

    The report is the only output when nothing is missing, so it can be piped or saved.
    """
    install()
    if not model_fetched():
        run(python(), "-m", "course_server", "models", "fetch")
    return subprocess.run([str(python()), "-m", "course_grading", "gradebook", *args]).returncode


def course_python(args: list[str]) -> int:
    """Run the course's Python with ``args``, so instructions need not spell its path
    (``.venv/bin/python``, ``.venv\\Scripts\\python.exe`` on Windows, or your environment's)."""
    if not works(python()):
        sys.exit(f"There is no course environment yet ({python()}): run `python3 course.py setup` first.")
    try:
        return subprocess.run([str(python()), *args]).returncode
    except KeyboardInterrupt:  # Ctrl-C reached the child too; it has stopped
        return 130


LANGUAGES = ("en", "ja")  # the editions: the English one, and the Japanese one in notebooks/ja/ and exercises/ja/
EDITION_FOLDERS = ("notebooks", "exercises")  # the folders that have an edition per language


def lab_language(args: list[str]) -> tuple[str | None, list[str]]:
    """The language ``--lang ja`` (or ``--lang=ja``) asks for (None: not given), and the other arguments."""
    rest, language = [], None
    index = 0
    while index < len(args):
        argument = args[index]
        if argument == "--lang" or argument.startswith("--lang="):
            if argument == "--lang" and index + 1 >= len(args):
                sys.exit(f"--lang needs a language: {', '.join(LANGUAGES)}")
            language = argument.split("=", 1)[1] if "=" in argument else args[index + 1]
            index += 1 if "=" in argument else 2
            if language not in LANGUAGES:
                sys.exit(f"--lang {language}: the course has the editions {', '.join(LANGUAGES)}")
            continue
        rest.append(argument)
        index += 1
    return language, rest


def lab_folder(args: list[str], language: str | None = None) -> tuple[str, list[str], str]:
    """The folder JupyterLab opens, the arguments left for JupyterLab itself, and the edition's language.

    ``notebooks`` (next to this file), unless the first argument is not an option: then it
    names the folder, relative to where you are or else to this file (``exercises`` works
    from anywhere). A folder that is not there stops here, before anything is installed.
    With ``language`` other than ``en``, the course's ``notebooks`` and ``exercises`` become
    that edition's folder (``notebooks/ja``); a folder of an edition named directly
    (``exercises/ja``) is in that edition's language without ``--lang``.
    """
    named = bool(args) and not args[0].startswith("-")
    folder, rest = ROOT / "notebooks", args
    if named:
        given = Path(args[0]).expanduser()
        found = next((f.resolve() for f in (given, ROOT / given) if f.is_dir()), None)
        if found is None:
            sys.exit(f"{args[0]} is not a folder: `python3 course.py lab` opens notebooks/, "
                     "`python3 course.py lab FOLDER` another folder (e.g. exercises).")
        folder, rest = found, args[1:]
    top_folders = [ROOT / name for name in EDITION_FOLDERS]
    edition = folder.name if folder.name in LANGUAGES and folder.parent in top_folders else None
    if language is None:
        language = edition or "en"
    elif language != "en" and edition is None and folder in top_folders:
        folder = folder / language
        if not folder.is_dir():
            sys.exit(f"There is no {folder.relative_to(ROOT).as_posix()}/ yet: build the edition with "
                     f"`python3 course.py python -m course_tools translation build {language}`.")
    return str(folder) if named else folder.relative_to(ROOT).as_posix(), rest, language


def lab(args: list[str]) -> int:
    """Open JupyterLab on a folder (``lab_folder``) in an edition's language (``lab_language``),
    after setting up; every other argument goes to JupyterLab."""
    language, rest = lab_language(args)
    folder, options, language = lab_folder(rest, language)
    setup()
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # e.g. in a container
    run(python(), "-m", "jupyter", "lab", folder, *as_root, *options, env={**os.environ, "COURSE_LANG": language})
    return 0


TEST_WORKERS = 2  # pytest-xdist workers for the whole suite at most (docs/maintainers.md has the measurements)


def physical_cores() -> int:
    """The CPU's cores, not its hardware threads: two model processes on the two threads of one
    core compete for it (Linux's topology files; elsewhere every logical CPU counts)."""
    cores = set()
    for topology in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            continue
    return len(cores) or os.cpu_count() or 1


def test(args: list[str]) -> int:
    """Run pytest with ``args`` in the course's Python, after setting up. The whole suite runs
    on up to ``TEST_WORKERS`` workers, one per physical core, a file to a worker (a notebook's
    cells share one kernel), in the order ``tests/conftest.py`` gives them (longest first: xdist
    would otherwise order the files by their number of tests); the fast tier, or a run that
    chooses its own ``-n``, runs as asked."""
    setup(("test", "agentdojo"))  # AgentDojo's benchmark is tested too
    chosen = ("--fast" in args or "no:xdist" in args
              or any(arg.startswith(("-n", "--numprocesses", "--dist")) for arg in args))
    count = min(TEST_WORKERS, physical_cores())
    workers = [] if chosen or count < 2 else ["-n", str(count), "--dist", "loadfile", "--no-loadscope-reorder"]
    run(python(), "-m", "pytest", *workers, *args)
    return 0


def setup_command(options: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``setup``, or ``setup --from BUNDLE [--fingerprint SHA256]``."""
    if options.fingerprint and not options.bundle:
        parser.error("--fingerprint goes with --from")
    if options.bundle:
        setup_from(options.bundle, fingerprint=options.fingerprint)
    else:
        setup()
    return 0


def probe(modules: list[str], prefix: bool) -> int:
    """``course.py probe [--prefix] MODULE ...``, run by another interpreter (the course's venv)
    to answer about itself: exit 0 if it imports every module, and with ``--prefix`` print its
    ``sys.prefix`` (the folder of its environment)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # not installed, or a compiled library that does not load
            return 1
    if prefix:
        print(sys.prefix)
    return 0


# the commands that hand their arguments on as they come: to JupyterLab (after --lang and a folder),
# pytest, course_grading's gradebook, course_tools' bundle and slides, the course's Python
PASSED_ON = {"lab": lab, "test": test, "grade": grade, "bundle": bundle, "slides": slides, "python": course_python}


def command_line() -> argparse.ArgumentParser:
    """``course.py``'s commands, one parser each; the parsed options' ``run`` runs the command.

    A command of ``PASSED_ON`` takes every argument as a word of its ``args``, options and ``--``
    included: its prefix character is NUL, which never starts a command-line argument (with
    ``-``, argparse would take a leading ``-x`` for an option of its own). No command or an
    unknown one is an ``argparse.ArgumentError`` (``exit_on_error=False``): ``main`` prints the
    module's docstring, as for ``help``."""
    parser = argparse.ArgumentParser(prog="python3 course.py", add_help=False, exit_on_error=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in PASSED_ON.items():
        passed_on = commands.add_parser(name, add_help=False, prefix_chars="\0")
        passed_on.add_argument("args", nargs=argparse.REMAINDER)
        passed_on.set_defaults(run=lambda options, command=command: command(options.args))
    setup_parser = commands.add_parser("setup")
    setup_parser.add_argument("--from", dest="bundle", type=Path,
                              help="a course bundle's folder: install from it, with no network")
    setup_parser.add_argument("--fingerprint", metavar="SHA256",
                              help="the bundle's fingerprint, as `bundle` printed it: refuse a bundle changed since")
    setup_parser.set_defaults(run=lambda options: setup_command(options, setup_parser))
    commands.add_parser("check").set_defaults(run=lambda options: check())
    probe_parser = commands.add_parser("probe")  # not in the usage: course.py asks another Python with it
    probe_parser.add_argument("modules", nargs="*")
    probe_parser.add_argument("--prefix", action="store_true")
    probe_parser.set_defaults(run=lambda options: probe(options.modules, options.prefix))
    return parser


def main(argv: list[str]) -> int:
    if argv[:1] in (["help"], ["-h"], ["--help"]):
        print(__doc__)
        return 0
    try:
        options = command_line().parse_args(argv)
    except argparse.ArgumentError:  # a command that is not one of them
        options = None
    if options is None or options.command is None:
        print(__doc__)
        return 2
    return options.run(options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
