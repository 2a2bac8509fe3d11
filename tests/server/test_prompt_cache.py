"""The prompt cache (``--prompt-cache N``): several prefixes kept, and the output at temperature 0
the same token for token whether a prefix was restored or evaluated cold. The bookkeeping is
tested on a list of tokens; the outputs on the batched decoder with one slot (what the server
runs with ``--parallel 1``)."""

import ctypes

import numpy as np
import pytest

from course_server import prompt_cache
from course_server.engine import Engine, GenerationStats, batched_engine
from course_server.models import resolve_model
from course_server.prompt_cache import CHUNK, PromptCache, shared_prefix
from course_server.wire import Options

SKU = {"type": "string", "description": "Product code, e.g. SKU-01234."}
TOOLS = [{"type": "function", "function": {
    "name": name, "description": description,
    "parameters": {"type": "object", "properties": {"sku": SKU}, "required": ["sku"]}}}
    for name, description in [("get_product_stock", "Units in stock of a product, by warehouse."),
                              ("get_product_price", "The price of a product in yen."),
                              ("get_lead_time", "Days until a product that is out of stock can be delivered.")]]
QUESTIONS = ["Is SKU-12345 in stock?", "Write a haiku about rain."]
GREEDY = Options(temperature=0, num_predict=16)


def test_shared_prefix_counts_from_the_start():
    assert shared_prefix((1, 2, 3, 4), [1, 2, 9, 4]) == 2
    assert shared_prefix((), [1]) == 0 and shared_prefix((1, 2), [1, 2, 3]) == 2


class FakeSequence:
    """A ``Sequence`` for the cache's bookkeeping, without a model: its "KV cache" is the list of
    tokens it holds, and a saved state is those tokens as bytes."""

    def __init__(self) -> None:
        self.live: tuple[int, ...] = ()
        self.kv: list[int] = []
        self.batches: list[list[int]] = []
        self.cut_works = self.restore_works = True

    def evaluate(self, tokens: list[int]) -> None:
        self.batches.append(list(tokens))
        self.kv += tokens

    def cut(self, keep: int) -> bool:
        if self.cut_works:
            del self.kv[keep:]
        return self.cut_works

    def save(self):
        raw = np.array(self.kv, dtype=np.int32).tobytes()
        return (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw)

    def load(self, state) -> int:
        self.kv = np.frombuffer(bytes(state.data), dtype=np.int32).tolist() if self.restore_works else []
        return state.nbytes if self.restore_works else 0

    def forget(self) -> None:
        self.kv, self.live = [], ()


@pytest.fixture
def fake():
    return FakeSequence()


def test_a_prompt_is_evaluated_in_aligned_chunks_and_only_whole_chunks_are_reused(fake):
    cache = PromptCache(slots=2)
    first, second = list(range(150)), list(range(140)) + [999] * 30
    cache.prepare(fake, first)
    assert [len(b) for b in fake.batches] == [64, 64, 21] and fake.kv == first[:-1]
    fake.batches.clear()
    cache.prepare(fake, second)  # shares 140 tokens: two whole chunks (128) are reused
    assert cache.reused == 128 and [len(b) for b in fake.batches] == [41]
    assert fake.kv == second[:-1]
    fake.batches.clear()
    cache.prepare(fake, first)  # its own saved state (128 tokens) is restored, not re-evaluated
    assert cache.reused == 128 and fake.batches == [first[128:149]] and fake.kv == first[:-1]


def test_the_cache_counts_what_it_restored_and_what_it_newly_saved(fake):
    """``reused`` and ``written`` are what a request's usage reports: the tokens restored instead of
    evaluated, and the tokens evaluated and saved as a new state (a state already saved is not
    written again; the tail after the last whole chunk is never saved)."""
    cache = PromptCache(slots=2)
    first, longer = list(range(150)), list(range(150)) + [999] * 60
    cache.prepare(fake, first)
    assert (cache.reused, cache.written) == (0, 128)
    cache.prepare(fake, longer)  # 209 tokens before the last: three whole chunks, two of them cached
    assert (cache.reused, cache.written) == (128, 64)
    cache.prepare(fake, first)
    assert (cache.reused, cache.written) == (128, 0)
    cache.prepare(fake, [5] * 40)  # shorter than a chunk: nothing restored, nothing saved
    assert (cache.reused, cache.written) == (0, 0)


def test_a_prefix_saved_from_one_sequence_is_restored_into_another(fake):
    cache, other = PromptCache(slots=2), FakeSequence()
    prompt = list(range(200))
    cache.prepare(fake, prompt)
    cache.prepare(other, prompt)
    assert cache.reused == 192 and other.batches == [prompt[192:199]] and other.kv == prompt[:-1]


def test_a_failure_on_the_way_forgets_everything(fake):
    cache = PromptCache(slots=2)
    prompt = list(range(200))
    cache.prepare(fake, prompt)
    fake.cut_works = False
    with pytest.raises(RuntimeError, match="could not cut"):
        cache.prepare(fake, prompt[:100] + [7] * 50)
    assert fake.live == () and not cache.saved and fake.kv == []
    fake.cut_works = True
    cache.prepare(fake, prompt)
    cache.prepare(fake, [5] * 80)  # another prefix is live; the first prompt's state must be restored
    fake.restore_works = False
    with pytest.raises(RuntimeError, match="restored 0"):
        cache.prepare(fake, prompt)
    assert fake.live == () and not cache.saved
    fake.restore_works, fake.batches = True, []
    cache.prepare(fake, prompt)  # from the start, nothing half-restored reused
    assert cache.reused == 0 and fake.kv == prompt[:-1]


def test_saved_states_are_bounded_by_slots_and_bytes():
    by_slots, by_bytes = PromptCache(slots=3), PromptCache(slots=3, max_bytes=1200)
    sequences = {by_slots: FakeSequence(), by_bytes: FakeSequence()}
    for start in range(4):
        for cache, sequence in sequences.items():
            cache.prepare(sequence, [start] * 129)  # two whole chunks each: 128 tokens, 512 bytes
    assert list(by_slots.saved) == [(1,) * 128, (2,) * 128, (3,) * 128]  # the least recently used went first
    assert list(by_bytes.saved) == [(2,) * 128, (3,) * 128] and by_bytes.nbytes == 1024


def test_a_cache_needs_a_prompt_a_slot_and_a_chunk_that_fits_a_batch(fake):
    with pytest.raises(ValueError, match="empty"):
        PromptCache(slots=1).prepare(fake, [])
    for slots, chunk in [(0, 64), (2, 0), (2, 1024)]:
        with pytest.raises(ValueError):
            PromptCache(slots, chunk)


class RecurrentModel:
    def can_be_cut(self) -> bool:
        return False


def test_a_model_whose_cache_cannot_be_cut_is_refused():
    with pytest.raises(ValueError, match="without --prompt-cache"):
        prompt_cache.check_can_be_cut(RecurrentModel())


@pytest.fixture(scope="module")
def engine():
    name, path = resolve_model()
    return batched_engine(name, path, n_ctx=2048, prompt_cache=4, parallel=1)


def answer(engine: Engine, question: str, with_tools: bool = True) -> tuple[str, int]:
    """The greedy reply to ``question`` and how many prompt tokens the cache let the engine skip."""
    prompt = engine.render_prompt([{"role": "system", "content": "You are the kiosk assistant of a parts shop."},
                                   {"role": "user", "content": question}], TOOLS if with_tools else None)
    pieces = list(engine.generate(prompt, GREEDY))
    assert isinstance(pieces[-1], GenerationStats)
    return "".join(p for p in pieces if isinstance(p, str)), engine.decoder.cache.reused


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
    second = engine.tokenize(engine.render_prompt([{"role": "user", "content": "How much is SKU-00042?"}], TOOLS))
    cache, sequence = engine.decoder.cache, engine.decoder.slots[0].sequence  # the decoder thread is idle
    cache.prepare(sequence, first)
    cache.prepare(sequence, second)
    shared = shared_prefix(first, second)
    assert shared > 2 * CHUNK and cache.reused == shared - shared % CHUNK
    assert sequence.n_tokens == len(second) - 1  # all but the last token, which the first step evaluates
    live = sequence.live
    assert list(cache.saved)[-1] == live == tuple(second[:len(live)])


@pytest.mark.model
def test_a_prompt_shorter_than_a_chunk_leaves_nothing_stale(engine):
    engine.forget_cache()
    cold = answer(engine, QUESTIONS[0])[0]
    answer(engine, "Hi!", with_tools=False)  # evaluated over the tools prompt's cached positions
    sequence = engine.decoder.slots[0].sequence
    assert sequence.live == ()
    assert answer(engine, QUESTIONS[0]) == (cold, len(sequence.live))


@pytest.mark.model
def test_the_stats_report_what_the_cache_restored_and_saved(engine):
    """What the server's OpenAI and Anthropic usage fields report: nothing cached on a cold
    prompt; on a prompt that shares the system prompt and tools with it, the shared whole chunks."""
    def stats(question: str) -> tuple[list[int], GenerationStats]:
        prompt = engine.render_prompt([{"role": "system", "content": "You are the kiosk assistant of a parts shop."},
                                       {"role": "user", "content": question}], TOOLS)
        *_, last = engine.generate(prompt, GREEDY)
        assert isinstance(last, GenerationStats)
        return engine.tokenize(prompt), last

    engine.forget_cache()
    first, cold = stats(QUESTIONS[0])
    whole = (len(first) - 1) // CHUNK * CHUNK
    assert (cold.cache_read_tokens, cold.cache_write_tokens) == (0, whole)
    second, warm = stats(QUESTIONS[1])
    shared = shared_prefix(first, second)
    assert warm.cache_read_tokens == shared - shared % CHUNK == engine.decoder.cache.reused >= 2 * CHUNK
    assert warm.cache_write_tokens == (len(second) - 1) // CHUNK * CHUNK - warm.cache_read_tokens
