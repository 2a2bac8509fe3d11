"""``python -m course_tools bundle OUT``: write what a room needs for an offline install into OUT.

    python3 course.py bundle OUT                       # wheels (llama-cpp-python built once, portable), model, README
    python3 course.py bundle OUT --model qwen2.5-coder:1.5b   # another registry model besides the default
    python3 course.py bundle OUT --add-wheels DIR      # add wheels built on another platform
    python3 course.py bundle OUT --this-machine        # for this machine only, nothing compiled

``course.py bundle`` installs what is missing, then runs this with the course's Python. The
bundle's README is written from the templates in ``bundle_readme/``. On each laptop,
``python3 course.py setup --from OUT`` (in ``course.py``) checks the bundle's ``SHA256SUMS``
and installs from it with no network and no compiler.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

TEMPLATES = Path(__file__).with_name("bundle_readme")  # the bundle's README.md, in Markdown with {fields}


def bootstrap() -> ModuleType:
    """``course.py``, the repository's bootstrap, loaded as a module.

    The bootstrap is standard-library code that runs before any package is installed, so it
    is no package of its own; the bundle writer reuses its wheel helpers (the llama-cpp-python
    builds, the manifest that ``setup --from`` checks, ``install``) rather than keeping a second
    copy. It lives next to this package in the course's clone (``course.py bundle`` runs this
    there); otherwise it is looked for in the current folder."""
    for script in (Path(__file__).resolve().parents[1] / "course.py", Path.cwd() / "course.py"):
        if script.is_file():
            spec = importlib.util.spec_from_file_location("course_bootstrap", script)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    sys.exit("The bundle is written from the course's clone: run `python3 course.py bundle OUT` there.")


course = bootstrap()


def template(name: str) -> str:
    """The Markdown template ``bundle_readme/NAME.md``, without its last line break."""
    return (TEMPLATES / f"{name}.md").read_text(encoding="utf-8").removesuffix("\n")


def write_manifest(bundle: Path) -> str:
    """Write the bundle's ``SHA256SUMS`` from the files its ``wheels/`` holds now, and return the
    manifest's own SHA-256: the bundle's fingerprint, to pass on to the room by another way than the
    stick (the setup mail, the board) for ``setup --from BUNDLE --fingerprint ...``."""
    files = sorted(path for path in (bundle / "wheels").iterdir() if path.is_file())
    text = "".join(f"{course.sha256_of(path)}  wheels/{path.name}\n" for path in files)
    (bundle / course.MANIFEST).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


# llama.cpp's build for the laptops of a room, whatever CPU the instructor's machine has: no
# "-march=native" (a wheel built for this CPU can stop with an illegal instruction on another);
# on x86-64, the vector extensions every x86-64 CPU since about 2015 has (x86-64-v3: AVX2, FMA,
# F16C, BMI2), no AVX-512, no AMX; no OpenMP, whose library a laptop without a compiler may lack.
PORTABLE_X86 = ("-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON "
                "-DGGML_F16C=ON -DGGML_BMI2=ON")


def portable_build_args() -> str:
    """CMake arguments for a llama-cpp-python wheel that runs on other machines of this kind."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return PORTABLE_X86
    return "-DGGML_OPENMP=OFF"  # elsewhere llama.cpp's own choice for this CPU (not tested here)


def wheel_platform(wheel: str) -> tuple[str | None, str] | None:
    """Which Python (``"3.11"``, or None for any Python 3) and which system (``"Linux x86_64"``) a
    wheel's file name says it is for; None for a pure-Python wheel that fits everywhere."""
    _python, abi, platform_tag = wheel.removesuffix(".whl").split("-")[-3:]
    if platform_tag == "any":
        return None
    version = f"{abi[2]}.{abi[3:]}" if re.fullmatch(r"cp3\d+", abi) else None  # abi3 and none: any Python 3
    first = platform_tag.split(".")[0]
    system = ("Linux" if "linux" in first else "macOS" if first.startswith("macosx") else
              "Windows" if first.startswith("win") else first)
    arch = re.search(r"(x86_64|aarch64|arm64|amd64|universal2|i686|win32)$", first)
    return version, f"{system} {arch.group(1) if arch else first}"


def glibc_needed(wheels: list[str]) -> str | None:
    """The newest glibc the Linux wheels ask for (``manylinux_2_34`` is 2.34), if any do."""
    older = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}  # manylinux1_x86_64 is glibc 2.5, ...
    versions = []
    for wheel in wheels:
        for tag in wheel.removesuffix(".whl").split("-")[-1].split("."):
            if found := re.match(r"manylinux_(\d+)_(\d+)_", tag):
                versions.append((int(found[1]), int(found[2])))
            elif (found := re.match(r"manylinux(1|2010|2014)_", tag)) and found[1] in older:
                versions.append(older[found[1]])
    return ".".join(map(str, max(versions))) if versions else None


def bundle(out: Path, models: list[str], add_wheels: list[Path], this_machine: bool = False) -> None:
    """Write what a room needs into ``out``: wheels of every package the course installs, with
    llama-cpp-python built once here for laptops like this machine; the verified model files;
    a README. Running it again on another platform into the same folder adds that platform.

    ``this_machine``: a bundle for this machine only, written in seconds instead of the
    portable build's minutes (22.5 measured on 2 busy cores): its llama-cpp-python is the
    wheel this machine's course was installed from (``this_machine_llama_wheel``), built for
    this CPU; nothing is compiled. It is never mixed with a room's bundle, whose portable
    wheel has the same name."""
    out = out.expanduser().resolve()
    if this_machine and add_wheels:
        sys.exit("--this-machine writes a bundle for this machine only; --add-wheels adds other platforms: not both.")
    for folder in add_wheels:
        if not list(folder.glob("*.whl")):
            sys.exit(f"{folder} holds no wheel (.whl) to add")
    wheels = out / "wheels"
    marked = (out / course.THIS_MACHINE).exists()
    if this_machine and not marked and list(wheels.glob("*.whl")):
        sys.exit(f"{out} holds a room's bundle: --this-machine would put this CPU's llama-cpp-python in place of its "
                 "portable one. Write a bundle for this machine into another folder.")
    if marked and not this_machine:
        sys.exit(f"{out} holds a bundle for one machine only ({course.THIS_MACHINE}): write a room's bundle into "
                 "another folder.")
    if list(wheels.glob("*.whl")):  # adding a platform: what is there must still be what was written
        with tempfile.TemporaryDirectory(prefix="course-bundle-") as scratch:
            course.checked_wheels(out, Path(scratch))
    course.install()
    wheels.mkdir(parents=True, exist_ok=True)
    for folder in add_wheels:
        for wheel in sorted(folder.glob("*.whl")):
            shutil.copy2(wheel, wheels / wheel.name)
    if this_machine:
        cmake_args = ""
        llama = course.this_machine_llama_wheel()
        print(f"llama-cpp-python: the wheel this machine's course was installed from ({course.llama_origin(llama)}: "
              f"{llama}), built for this CPU only.", flush=True)
    else:
        cmake_args = portable_build_args()
        llama = course.llama_wheel(cmake_args, f"Building llama-cpp-python once, for laptops like this machine "
                                               f"({cmake_args}): about 10 minutes on 2 cores.")
    version = llama.name.split("-")[1]
    build = course.ROOT / "build"  # setuptools builds the course's own wheel in build/; what it adds there goes again
    before = set(build.iterdir()) if build.is_dir() else None
    course.run(course.python(), "-m", "pip", "wheel", "--wheel-dir", wheels, "--find-links", llama.parent,
               "pip", "setuptools>=68", ".[test]", f"llama-cpp-python=={version}")
    if before is None:
        shutil.rmtree(build, ignore_errors=True)
    else:
        for added in set(build.iterdir()) - before:
            if added.is_dir():
                shutil.rmtree(added, ignore_errors=True)
            else:
                added.unlink()
    for own in wheels.glob("course_lib-*.whl"):  # the course itself is installed from its clone
        own.unlink()
    taken = wheels / llama.name
    if not taken.is_file() or course.wheel_hashes(taken) != course.wheel_hashes(llama):  # another (built, an index's)
        sys.exit(f"pip put another llama-cpp-python than {llama} into {wheels}: the bundle is not finished.")
    if this_machine:
        (out / course.THIS_MACHINE).write_text(f"{course.cpu_identity()}\nllama-cpp-python: {llama.name}, from "
                                               f"{course.llama_origin(llama)}\n", encoding="utf-8")
    course.run(course.python(), "-m", "course_server", "models", "bundle", out, *models)
    fingerprint = write_manifest(out)
    write_bundle_readme(out, cmake_args, this_machine=llama if this_machine else None)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"\nThe bundle is in {out} ({size / 1e9:.2f} GB): see its README.md. Its fingerprint (the SHA-256 of "
          f"its {course.MANIFEST}) is {fingerprint}: give it to the room another way than the stick (the setup mail, "
          f"the board). On each laptop: `python3 course.py setup --from {out} --fingerprint {fingerprint}`.")


def write_bundle_readme(out: Path, cmake_args: str, this_machine: Path | None = None) -> None:
    """The bundle's README.md, from what the folder holds now and the templates in
    ``bundle_readme/``; ``this_machine``: the wheel a bundle for this machine only took its
    llama-cpp-python from (``bundle``)."""
    wheels = sorted(p.name for p in (out / "wheels").glob("*.whl"))
    tags = {tag for wheel in wheels if (tag := wheel_platform(wheel))}
    pythons = sorted({version for version, _ in tags if version}, key=lambda v: int(v.split(".")[1])) or ["3"]
    platforms = sorted({system for _, system in tags}) or ["any system"]
    if glibc := glibc_needed(wheels):
        platforms = [f"{p} (glibc {glibc} or newer)" if p.startswith("Linux") else p for p in platforms]
    models = [f"- `models/{p.name}`: SHA-256 `{(p.parent / (p.name + '.sha256')).read_text().strip()}`, "
              f"{p.stat().st_size:,} bytes" for p in sorted((out / "models").glob("*.gguf"))]
    llama = [f"- `wheels/{w}`" for w in wheels if w.startswith("llama_cpp_python-")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=course.ROOT, capture_output=True, text=True)
    if this_machine:
        build = template("this_machine_build").format(source=course.llama_origin(this_machine),
                                                      cpu=course.cpu_identity(), marker=course.THIS_MACHINE)
    else:
        build = template("portable_build").format(cmake=cmake_args)
    (out / "README.md").write_text(template("bundle").format(
        commit=f"commit {commit.stdout.strip()}" if commit.returncode == 0 else "see the course's README.md",
        pythons=" or ".join(pythons), platforms=", ".join(platforms), models="\n".join(models) or "- none",
        llama="\n".join(llama) or "- none", build=build) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py bundle",
                                     description="write what a room needs for an offline install into OUT")
    parser.add_argument("out", type=Path, help="the bundle's folder, e.g. on a USB stick")
    parser.add_argument("--model", action="append", default=[], metavar="NAME",
                        help="another registry model to put in, besides the default (e.g. qwen2.5-coder:1.5b)")
    parser.add_argument("--add-wheels", action="append", default=[], type=Path, metavar="DIR",
                        help="a folder of wheels built on another platform to add")
    parser.add_argument("--this-machine", action="store_true",
                        help="for this machine only: its llama-cpp-python is the wheel this machine's course was "
                             "installed from, built for this CPU (-march=native); nothing is compiled. Never "
                             "carry it to other laptops (setup --from refuses it on another CPU)")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    bundle(options.out, options.model, options.add_wheels, options.this_machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
