"""The engine's prompt cache (``--prompt-cache N``): several prefixes kept, and the output at
temperature 0 the same token for token whether a prefix was restored or evaluated cold."""

from types import SimpleNamespace

import pytest

from course_lib.models import resolve_model
from course_lib.server.engine import Engine, GenerationStats
from course_lib.server.prompt_cache import CHUNK, PromptCache, shared_prefix
from course_lib.server.wire import Options

SKU = {"type": "string", "description": "Product code, e.g. SKU-01234."}
TOOLS = [{"type": "function", "function": {
    "name": name, "description": description,
    "parameters": {"type": "object", "properties": {"sku": SKU}, "required": ["sku"]}}}
    for name, description in [("get_product_stock", "Units in stock of a product, by warehouse."),
                              ("get_product_price", "The price of a product in yen."),
                              ("get_lead_time", "Days until a product that is out of stock can be delivered.")]]
QUESTIONS = ["Is SKU-12345 in stock?", "How much is SKU-00042?", "Write a haiku about rain."]
GREEDY = Options(temperature=0, num_predict=24)


def test_shared_prefix_counts_from_the_start():
    assert shared_prefix((1, 2, 3, 4), [1, 2, 9, 4]) == 2
    assert shared_prefix((), [1]) == 0 and shared_prefix((1, 2), [1, 2, 3]) == 2


def test_a_cache_needs_a_slot_and_a_chunk_that_fits_a_batch():
    llm = SimpleNamespace(n_batch=512)
    for slots, chunk in [(0, 64), (2, 0), (2, 1024)]:
        with pytest.raises(ValueError):
            PromptCache(llm, slots, chunk)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def engine():
    name, path = resolve_model()
    return Engine(name, path, n_ctx=2048, prompt_cache=4)


def answer(engine: Engine, question: str, with_tools: bool = True) -> tuple[str, int]:
    """The greedy reply to ``question`` and how many prompt tokens the cache let the engine skip."""
    prompt = engine.render_prompt([{"role": "system", "content": "You are the kiosk assistant of a parts shop."},
                                   {"role": "user", "content": question}], TOOLS if with_tools else None)
    pieces = list(engine.generate(prompt, GREEDY))
    assert isinstance(pieces[-1], GenerationStats)
    return "".join(p for p in pieces if isinstance(p, str)), engine.cache.reused


@pytest.mark.model
def test_an_answer_from_a_restored_prefix_is_the_cold_answer_token_for_token(engine):
    cold = {}
    for question in QUESTIONS:
        engine.forget_cache()
        cold[question], reused = answer(engine, question)
        assert reused == 0
    engine.forget_cache()
    for question in QUESTIONS:  # each after the others: the shared tools prefix is reused
        assert answer(engine, question)[0] == cold[question]
    answer(engine, "Thanks!", with_tools=False)  # another prefix in between
    for question in reversed(QUESTIONS):  # each prompt is now cached whole: restored, not re-evaluated
        text, reused = answer(engine, question)
        assert text == cold[question] and reused >= CHUNK


@pytest.mark.model
def test_a_new_prompt_reuses_the_longest_shared_prefix_in_whole_chunks(engine):
    engine.forget_cache()
    first = engine.tokenize(engine.render_prompt([{"role": "user", "content": QUESTIONS[0]}], TOOLS))
    second = engine.tokenize(engine.render_prompt([{"role": "user", "content": QUESTIONS[1]}], TOOLS))
    engine.cache.prepare(first)
    engine.cache.prepare(second)
    shared = shared_prefix(first, second)
    assert shared > 2 * CHUNK and engine.cache.reused == shared - shared % CHUNK
    assert engine.llm.n_tokens == len(second) - 1  # all but the last token, which generate() evaluates
    assert list(engine.cache.saved)[-1] == engine.cache.live == tuple(second[:len(engine.cache.live)])


@pytest.mark.model
def test_a_prompt_shorter_than_a_chunk_leaves_nothing_stale(engine):
    engine.forget_cache()
    cold = answer(engine, QUESTIONS[0])[0]
    answer(engine, "Hi!", with_tools=False)  # evaluated over the tools prompt's cached positions
    assert engine.cache.live == ()
    assert answer(engine, QUESTIONS[0]) == (cold, len(engine.cache.live))
