"""The batched engine (``--parallel N``): requests served at once give the same tokens as alone."""

import threading
from collections import Counter

import pytest
from llama_reference import reference_engine

from course_server import batching
from course_server.batching import BatchedDecoder
from course_server.engine import Engine, GenerationStats, PromptTooLong, batched_engine
from course_server.generation import STALL_SECONDS
from course_server.models import resolve_model
from course_server.wire import Options

pytestmark = pytest.mark.model

TOOLS = [{"type": "function", "function": {
    "name": "get_product_stock", "description": "Units in stock of a product, by warehouse.",
    "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}}]
GREEDY = Options(temperature=0, num_predict=40)
REQUESTS = [  # (question, tools, options, format)
    ("Is SKU-12345 in stock?", TOOLS, GREEDY, None),
    ("Write a short story about a lighthouse keeper.", None, GREEDY, None),
    ("Give the name and age of a fictional cat as JSON.", None, GREEDY, "json"),
    ("Write a haiku about rain.", None, Options(temperature=0.8, seed=7, num_predict=40), None),
]


@pytest.fixture(scope="module")
def engine():
    name, path = resolve_model()
    return batched_engine(name, path, n_ctx=2048, parallel=4)


def reply(engine: Engine, question: str, tools, options: Options, format) -> str:
    prompt = engine.render_prompt([{"role": "user", "content": question}], tools)
    pieces = list(engine.generate(prompt, options, format))
    assert isinstance(pieces[-1], GenerationStats)
    return "".join(piece for piece in pieces if isinstance(piece, str))


def test_the_engine_measures_how_many_rows_keep_the_arithmetic(engine):
    decoder = engine.decoder
    assert 1 <= decoder.rows == decoder.exact_rows <= decoder.parallel == engine.parallel == 4
    by_default = BatchedDecoder(engine.model, 256, 256)
    assert by_default.parallel == min(by_default.rows, batching.MAX_AUTO_PARALLEL)  # one call a step
    faster = BatchedDecoder(engine.model, 256, 256, parallel=4, batch_rows=4)
    assert faster.rows == 4 and faster.exact_rows == decoder.exact_rows


def decoded_together(engine: Engine, monkeypatch) -> tuple[list[str], list[str], Counter[int]]:
    """Every request's answer alone, then all sent at once, and how many rows each decoding step had."""
    alone = [reply(engine, *request) for request in REQUESTS]
    rows: Counter[int] = Counter()
    decode = batching.Context.decode

    def counted(context, entries, every_row=True):
        if every_row:
            rows[len(entries)] += 1
        return decode(context, entries, every_row)

    monkeypatch.setattr(batching.Context, "decode", counted)
    together: list[str] = [""] * len(REQUESTS)

    def run(i: int) -> None:
        together[i] = reply(engine, *REQUESTS[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(REQUESTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return alone, together, rows


def test_requests_decoded_together_get_the_tokens_they_get_alone(engine, monkeypatch):
    alone, together, rows = decoded_together(engine, monkeypatch)
    assert together == alone
    assert max(rows) > 1 and max(rows) <= engine.decoder.rows, "the requests were decoded in shared batches"


def test_weights_not_repacked_batch_four_rows_with_the_same_tokens(monkeypatch):
    name, path = resolve_model()
    unpacked = batched_engine(name, path, n_ctx=2048, parallel=4, repack=False)
    if unpacked.decoder.exact_rows < 4:
        pytest.skip(f"on this CPU only {unpacked.decoder.exact_rows} rows keep their arithmetic without repacking")
    alone, together, rows = decoded_together(unpacked, monkeypatch)
    assert together == alone
    assert max(rows) == 4, "all four requests were decoded in one batch"


def test_a_smaller_window_fits_in_the_servers_context_without_rebuilding_it(engine):
    """A request's smaller ``num_ctx`` limits its own tokens; it does not drain every slot to
    build a smaller context and then a default one again for the next request."""
    question = REQUESTS[1]
    before = reply(engine, *question)
    context = engine.decoder.context
    assert reply(engine, question[0], None, Options(temperature=0, num_predict=40, num_ctx=1024), None) == before
    assert engine.n_ctx == 2048 and engine.decoder.context is context
    with pytest.raises(PromptTooLong, match="num_ctx is 16"):
        reply(engine, question[0], None, Options(num_ctx=16, num_predict=1), None)
    assert reply(engine, *question) == before and engine.n_ctx == 2048


def test_the_batched_engine_answers_as_llama_cpp_python_with_the_same_prompt_cache(engine):
    reference = reference_engine(engine.model, 2048, prompt_cache=4)  # Llama.generate, one at a time
    for request in REQUESTS[:2]:
        assert reply(engine, *request) == reply(reference, *request)


def test_an_unexpected_failure_reaches_the_request_and_the_engine_goes_on(engine, monkeypatch):
    def broken(self):
        raise RuntimeError("a bug in the decoder")

    with monkeypatch.context() as patched:
        patched.setattr(BatchedDecoder, "_step", broken)
        with pytest.raises(RuntimeError, match="a bug in the decoder"):
            reply(engine, *REQUESTS[0])
    assert reply(engine, *REQUESTS[0])  # the decoder thread is still there


def test_a_context_for_the_models_whole_length_gets_one_sequence_not_one_per_slot(engine):
    assert engine.decoder._sequences_for(engine.default_n_ctx) == engine.parallel
    assert engine.decoder._sequences_for(engine.max_n_ctx) == 1  # memory as in the one-at-a-time engine


def test_a_decoder_whose_safety_net_fails_reports_itself_unhealthy(engine):
    """If the decoder's own error handling raises, its thread ends and its requests would wait for
    ever; ``healthy()`` says so, and the supervisor's liveness check then restarts the process."""
    broken = Engine(engine.model, BatchedDecoder(engine.model, 512, 512, parallel=1), 512)
    assert broken.healthy()

    def fail(*_: object) -> None:
        raise RuntimeError("a bug in the decoder")

    broken.decoder._step = fail  # type: ignore[method-assign]
    broken.decoder._fail_all = fail  # type: ignore[method-assign]
    prompt = broken.render_prompt([{"role": "user", "content": "Hi"}])
    threading.Thread(target=lambda: list(broken.generate(prompt, GREEDY)), daemon=True).start()
    broken.decoder.thread.join(timeout=30)
    assert not broken.healthy()


def test_a_step_that_takes_minutes_reports_the_engine_unhealthy(engine):
    """A grammar can make one token cost minutes inside llama.cpp, where nothing can interrupt it:
    ``healthy()`` says so once a step has run past ``STALL_SECONDS``, and the supervisor restarts."""
    import time

    assert engine.healthy()
    engine.decoder.busy_since = time.monotonic() - STALL_SECONDS - 1
    try:
        assert not engine.healthy()
    finally:
        engine.decoder.busy_since = None


def test_the_exact_rows_are_measured_once_per_model_build_and_machine(tmp_path, monkeypatch):
    """The start-up probe (about 2 to 4 s) runs at the first start; later starts read its result from
    the cache folder, under a key of everything it depends on: another model file, setting or probe
    size is measured again, and a broken file is measured over, never trusted."""
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"weights")

    class Model:
        path, n_threads, repack = weights, 2, True

    measured = []

    def measure(rows: int):
        return lambda: measured.append(rows) or rows

    assert batching.kept_rows(Model(), 4, measure(3)) == (3, True)
    assert batching.kept_rows(Model(), 4, measure(1)) == (3, False), "read back, not measured"
    assert batching.kept_rows(Model(), 6, measure(2)) == (2, True), "another probe size is another key"
    Model.repack = False
    assert batching.kept_rows(Model(), 4, measure(5)) == (5, True), "another weights' layout too"
    weights.write_bytes(b"other weights")
    Model.repack = True
    assert batching.kept_rows(Model(), 4, measure(2)) == (2, True), "another file too"
    (tmp_path / batching.KEPT_ROWS).write_text("not json")
    assert batching.kept_rows(Model(), 4, measure(3)) == (3, True)
    assert measured == [3, 2, 5, 2, 3]
