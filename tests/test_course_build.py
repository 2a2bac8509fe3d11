"""``course.py``'s build of llama-cpp-python: only a CPU that lists AMX gets its own CMake arguments,
and the version it builds is the one ``pyproject.toml`` pins."""

import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("course_script_build", Path(__file__).parents[1] / "course.py")
course = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course)


def test_a_cpu_without_amx_keeps_llamas_own_native_build():
    assert course.llama_build_args({"avx", "avx2", "fma", "f16c", "avx512f"}) is None
    assert course.llama_build_args(set()) is None  # not Linux, or no /proc/cpuinfo


def test_a_cpu_with_amx_is_built_for_its_vector_extensions_without_amx():
    args = course.llama_build_args({"amx_tile", "amx_int8", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni"})
    assert args.split() == ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                            "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON"]
    assert "AMX" not in args and "BF16" not in args, "only what the CPU lists"


def test_cpu_flags_are_read_from_the_flags_lines(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_tile\nbugs\t\t: spectre\n\nprocessor\t: 1\n"
                       "flags\t\t: fpu avx2 amx_tile\n")
    assert course.cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_tile"}
    assert course.cpu_flags(tmp_path / "missing") == set()


def test_an_amx_machine_installs_the_wheel_built_for_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(course, "cpu_flags", lambda: {"amx_tile", "avx2"})
    built = []

    def run(*args):  # pip wheel: leave a wheel where it was asked to go
        built.append([str(a) for a in args])
        folder = Path(args[args.index("-w") + 1])
        folder.mkdir(parents=True)
        (folder / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    monkeypatch.setattr(course, "run", run)
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    first = course.llama_without_amx()
    assert first[-1] == "llama-cpp-python==0.3.36" and first[0] == "--find-links"
    assert built[0][2:6] == ["pip", "wheel", "--no-cache-dir", "--no-deps"]
    assert built[0][-1].startswith("llama-cpp-python>=")
    assert "-DGGML_NATIVE=OFF" in course.os.environ["CMAKE_ARGS"]
    assert course.llama_without_amx() == first and len(built) == 1, "the second install reuses the wheel"
    monkeypatch.setattr(course, "cpu_flags", lambda: {"avx2"})
    assert course.llama_without_amx() == []


PYPROJECT = """[project]
name = "x"  # "llama-cpp-python==9" in a comment is no requirement
dependencies = [
    # the model runtime, "quoted" in a comment
    "httpx>=0.27",
    "llama-cpp-python>=0.3.16,<0.4",  # the pin
    "jinja2>=3.1",
]

[project.optional-dependencies]
test = ["pytest>=8", "llama-cpp-python[server]>=0.3.16,<0.4"]
"""


@pytest.mark.parametrize("python", ["3.11", "3.10"])
def test_the_llama_pin_is_read_from_the_dependencies(tmp_path, monkeypatch, python):
    """tomllib where Python has it; on 3.10 (no tomllib) the dependencies array, read by the
    fallback: the same list, comments and the optional dependencies left out."""
    if python == "3.10":
        monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` fails, as on 3.10
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    assert course.dependencies(tmp_path / "pyproject.toml") == ["httpx>=0.27", "llama-cpp-python>=0.3.16,<0.4",
                                                                 "jinja2>=3.1"]
    assert course.pinned_requirement("llama-cpp-python", tmp_path / "pyproject.toml") == "llama-cpp-python>=0.3.16,<0.4"
    with pytest.raises(SystemExit, match="does not list pytest"):
        course.pinned_requirement("pytest", tmp_path / "pyproject.toml")


def test_the_fallback_reads_the_course_s_own_pyproject_as_tomllib_does(monkeypatch):
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    with_tomllib = course.dependencies(pyproject)
    monkeypatch.setitem(sys.modules, "tomllib", None)
    assert course.dependencies(pyproject) == with_tomllib
    assert course.pinned_requirement("llama-cpp-python").startswith("llama-cpp-python")
