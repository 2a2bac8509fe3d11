"""The engine's prompt cache (``--prompt-cache N``): several prefixes kept, and the output at
temperature 0 the same token for token whether a prefix was restored or evaluated cold."""

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from course_lib.models import resolve_model
from course_lib.server import prompt_cache
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
QUESTIONS = ["Is SKU-12345 in stock?", "Write a haiku about rain."]
GREEDY = Options(temperature=0, num_predict=16)


def test_shared_prefix_counts_from_the_start():
    assert shared_prefix((1, 2, 3, 4), [1, 2, 9, 4]) == 2
    assert shared_prefix((), [1]) == 0 and shared_prefix((1, 2), [1, 2, 3]) == 2


class FakeLlama:
    """Just enough of ``llama_cpp.Llama`` for the cache's bookkeeping: its "KV cache" is the list
    of tokens it holds, and a saved state is those tokens as bytes."""

    n_batch = 512

    def __init__(self) -> None:
        self.kv: list[int] = []
        self.batches: list[list[int]] = []
        self.n_tokens = 0
        self.input_ids = np.zeros(4096, dtype=np.intc)
        self.cut_works = self.restore_works = True
        self._ctx = SimpleNamespace(ctx=self, kv_cache_seq_rm=self.seq_rm)

    def seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        if self.cut_works:
            del self.kv[p0:]
        return self.cut_works

    def eval(self, batch: list[int]) -> None:
        assert len(self.kv) == self.n_tokens, "evaluating on top of tokens the cache does not account for"
        self.batches.append(list(batch))
        self.kv += batch
        self.input_ids[self.n_tokens:self.n_tokens + len(batch)] = batch
        self.n_tokens += len(batch)

    def reset(self) -> None:
        self.n_tokens = 0


@pytest.fixture
def fake(monkeypatch):
    import llama_cpp

    llm = FakeLlama()
    monkeypatch.setattr(prompt_cache, "can_be_cut", lambda llm: True)
    monkeypatch.setattr(llama_cpp, "llama_state_seq_get_size", lambda ctx, seq: 4 * len(ctx.kv) + 4)
    monkeypatch.setattr(llama_cpp, "llama_state_seq_get_data", lambda ctx, data, size, seq: _write(ctx.kv, data))
    monkeypatch.setattr(llama_cpp, "llama_state_seq_set_data", lambda ctx, data, size, seq: _read(ctx, data))
    return llm


def _write(tokens: list[int], data) -> int:
    raw = np.array(tokens, dtype=np.int32).tobytes()
    ctypes.memmove(data, raw, len(raw))
    return len(raw)


def _read(llm: FakeLlama, data) -> int:
    if not llm.restore_works:
        llm.kv = []
        return 0
    llm.kv = np.frombuffer(bytes(data), dtype=np.int32).tolist()
    return len(data)


def test_a_prompt_is_evaluated_in_aligned_chunks_and_only_whole_chunks_are_reused(fake):
    cache = PromptCache(fake, slots=2)  # type: ignore[arg-type]
    first, second = list(range(150)), list(range(140)) + [999] * 30
    cache.prepare(first)
    assert [len(b) for b in fake.batches] == [64, 64, 21] and fake.kv == first[:-1]
    fake.batches.clear()
    cache.prepare(second)  # shares 140 tokens: two whole chunks (128) are reused
    assert cache.reused == 128 and [len(b) for b in fake.batches] == [41]
    assert fake.kv == second[:-1] and fake.n_tokens == len(second) - 1
    fake.batches.clear()
    cache.prepare(first)  # its own saved state (128 tokens) is restored, not re-evaluated
    assert cache.reused == 128 and fake.batches == [first[128:149]] and fake.kv == first[:-1]


def test_a_failure_on_the_way_forgets_everything(fake):
    cache = PromptCache(fake, slots=2)  # type: ignore[arg-type]
    prompt = list(range(200))
    cache.prepare(prompt)
    fake.cut_works = False
    with pytest.raises(RuntimeError, match="could not cut"):
        cache.prepare(prompt[:100] + [7] * 50)
    assert cache.live == () and not cache.saved and fake.n_tokens == 0
    fake.cut_works = True
    cache.prepare(prompt)
    cache.prepare([5] * 80)  # another prefix is live; the first prompt's state must be restored
    fake.restore_works = False
    with pytest.raises(RuntimeError, match="restored 0"):
        cache.prepare(prompt)
    assert cache.live == () and not cache.saved
    fake.restore_works, fake.batches = True, []
    cache.prepare(prompt)  # from the start, nothing half-restored reused
    assert cache.reused == 0 and fake.kv == prompt[:-1]


def test_saved_states_are_bounded_by_slots_and_bytes(fake):
    by_slots, by_bytes = PromptCache(fake, slots=3), PromptCache(fake, slots=3, max_bytes=1200)  # type: ignore[arg-type]
    for start in range(4):
        for cache in (by_slots, by_bytes):
            cache.prepare([start] * 129)  # two whole chunks each: 128 tokens, 512 bytes
    assert list(by_slots.saved) == [(1,) * 128, (2,) * 128, (3,) * 128]  # the least recently used went first
    assert list(by_bytes.saved) == [(2,) * 128, (3,) * 128] and by_bytes.nbytes == 1024


def test_a_cache_needs_a_prompt_a_slot_and_a_chunk_that_fits_a_batch(fake):
    with pytest.raises(ValueError, match="empty"):
        PromptCache(fake, slots=1).prepare([])  # type: ignore[arg-type]
    for slots, chunk in [(0, 64), (2, 0), (2, 1024)]:
        with pytest.raises(ValueError):
            PromptCache(fake, slots, chunk)  # type: ignore[arg-type]


def test_a_model_whose_cache_cannot_be_cut_is_refused(fake, monkeypatch):
    monkeypatch.setattr(prompt_cache, "can_be_cut", lambda llm: False)
    with pytest.raises(ValueError, match="without --prompt-cache"):
        PromptCache(fake, slots=1)  # type: ignore[arg-type]


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
    second = engine.tokenize(engine.render_prompt([{"role": "user", "content": "How much is SKU-00042?"}], TOOLS))
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
