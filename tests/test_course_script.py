"""``course.py``: what it says about the set-up must be true."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("course_script", Path(__file__).parents[1] / "course.py")
course = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course)


def test_the_model_check_asks_about_the_chosen_model(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_MODEL_PATH", raising=False)
    monkeypatch.delenv("COURSE_MODEL", raising=False)
    assert course.model_fetched(), "the default model is fetched before the tests run"
    monkeypatch.setenv("COURSE_MODEL", "no-such-model:1b")
    assert not course.model_fetched(), "an unknown model is not reported as fetched"
    monkeypatch.delenv("COURSE_MODEL")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    assert not course.model_fetched(), "a model listed as 'not fetched' is not reported as fetched"
