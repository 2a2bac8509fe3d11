"""``course.py``'s build of llama-cpp-python: only a CPU that lists AMX gets its own CMake arguments."""

import importlib.util
from pathlib import Path

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
