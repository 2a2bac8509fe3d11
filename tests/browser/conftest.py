"""``panels.ipynb`` here is driven in a browser by ``tests/test_browser.py``, from a copy next to a
copy of the lessons; nbval does not run it on its own (its paths are those of that copy)."""

collect_ignore_glob = ["*.ipynb"]
