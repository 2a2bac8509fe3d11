"""Several cached prompt prefixes, and outputs that do not depend on which one was cached.

llama.cpp keeps the keys and values of every prompt token it has evaluated (the KV cache),
so a request that starts like the previous one only pays for the tokens after the shared
part. llama-cpp-python keeps one such prefix: runs that alternate between two prompts (an
agent turn with tools, an answer turn without them; a defense's own model call) evaluate
each again from the first token where they differ from the other.

``PromptCache`` keeps the model's state after up to ``slots`` prompts and, for a new prompt,
starts from the saved state that shares the longest prefix with it. It also makes the
result independent of that choice. The arithmetic of a batch of tokens depends on the
batch (how many tokens, where it starts), so a prompt evaluated as 300 cached tokens plus a
batch of 400 can give other logits, and at temperature 0 another answer, than the same
prompt evaluated from scratch. Here every prompt is evaluated in chunks of ``chunk`` tokens
that start at multiples of ``chunk``, and only whole chunks are reused: a chunk's keys and
values are then the same numbers whether they were computed now or restored, and so is
everything after them. tests/test_prompt_cache.py checks it token for token against this
cache's own cold run (the same engine, build and thread count). The answers need not equal
those of an engine without this cache, which evaluates in other batches.

The saved states are bounded twice: at most ``slots`` of them, and at most ``max_bytes`` in
all (about 12 KiB per token for the course's 0.5B model), the least recently used dropped
first. Models whose cache cannot be cut at a position (recurrent and hybrid models, sliding-
window attention) are refused.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass

import llama_cpp
from llama_cpp import Llama

CHUNK = 64  # tokens per evaluated chunk: a reused prefix is a multiple of it
MAX_BYTES = 1 << 30  # all saved states together


@dataclass(frozen=True)
class SavedState:
    """The sequence state (keys and values) after ``tokens``, a whole number of chunks."""

    tokens: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]

    @property
    def nbytes(self) -> int:
        return len(self.data)


def shared_prefix(a: tuple[int, ...] | list[int], b: list[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def can_be_cut(llm: Llama) -> bool:
    """Whether the model's cache can drop every token after a position and keep the rest, as
    reusing a prefix needs (not so for recurrent or hybrid models, or sliding-window attention)."""
    return not (llm._is_recurrent or llm._is_hybrid or llama_cpp.llama_model_n_swa(llm._model.model) > 0)


class PromptCache:
    """Saved states of the last ``slots`` prompts, least recently used dropped first."""

    def __init__(self, llm: Llama, slots: int, chunk: int = CHUNK, max_bytes: int = MAX_BYTES) -> None:
        if slots < 1 or not 1 <= chunk <= llm.n_batch:
            raise ValueError(f"slots must be at least 1 and chunk between 1 and n_batch ({llm.n_batch})")
        if not can_be_cut(llm):
            raise ValueError("this model's cache cannot be cut at a position (a recurrent, hybrid or "
                             "sliding-window model): run it without --prompt-cache")
        self.llm, self.slots, self.chunk, self.max_bytes = llm, slots, chunk, max_bytes
        self.saved: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.live: tuple[int, ...] = ()  # the whole chunks now in the model's KV cache
        self.reused = 0  # tokens the last prepare() did not evaluate

    def clear(self) -> None:
        """Forget every saved state and what the model holds."""
        self.saved.clear()
        self.live = ()
        self.llm.reset()

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for state in self.saved.values())

    def prepare(self, tokens: list[int]) -> None:
        """Evaluate all of ``tokens`` but the last one, reusing what the cache holds.

        ``Llama.generate(tokens)`` then finds ``tokens[:-1]`` in place and evaluates only the
        last token before it samples, the same way whatever was reused. If anything fails on
        the way, everything is forgotten: nothing half-done is reused.
        """
        if not tokens:
            raise ValueError("an empty prompt")
        try:
            self._prepare(tokens)
        except BaseException:
            self.clear()
            raise

    def _prepare(self, tokens: list[int]) -> None:
        end = len(tokens) - 1
        start = self._restore_longest(tokens, end)
        self.reused = start
        whole = end - end % self.chunk
        for position in range(start, whole, self.chunk):
            self._evaluate(tokens[position:position + self.chunk])
        self.live = tuple(tokens[:whole])  # (a failure above clears everything: see prepare)
        if whole > 0:
            self._save(self.live)
        if whole < end:
            self._evaluate(tokens[whole:end])  # the tail: never reused, so its batch may vary

    def _restore_longest(self, tokens: list[int], end: int) -> int:
        """Put the model in the state with the longest usable prefix of ``tokens``; its length."""
        def usable(prefix: tuple[int, ...]) -> int:
            n = min(shared_prefix(prefix, tokens), end)
            return n - n % self.chunk

        best = max(self.saved.values(), key=lambda state: usable(state.tokens), default=None)
        keep = usable(self.live)
        if best is not None and usable(best.tokens) > keep:
            keep = usable(best.tokens)
            self._load(best)
            self.saved.move_to_end(best.tokens)
        if not self.llm._ctx.kv_cache_seq_rm(-1, keep, -1):
            raise RuntimeError(f"llama.cpp could not cut its cache at token {keep}")
        self.llm.n_tokens = keep
        self.live = tuple(tokens[:keep])
        return keep

    def _evaluate(self, batch: list[int]) -> None:
        """One batch: callers pass at most ``chunk`` tokens, so ``Llama.eval`` (which splits at
        ``n_batch``) does not split it."""
        self.llm.eval(batch)

    def _save(self, tokens: tuple[int, ...]) -> None:
        if tokens in self.saved:
            self.saved.move_to_end(tokens)
            return
        ctx = self.llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, data, size, 0)
        if not 0 < written <= size:
            return  # nothing to keep: the next prompt is evaluated from the start
        self.saved[tokens] = SavedState(tokens, (ctypes.c_uint8 * written).from_buffer(data))
        while len(self.saved) > self.slots or (len(self.saved) > 1 and self.nbytes > self.max_bytes):
            self.saved.popitem(last=False)

    def _load(self, state: SavedState) -> None:
        self.live, self.llm.n_tokens = (), 0  # until the restore has worked
        self.llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        read = llama_cpp.llama_state_seq_set_data(self.llm._ctx.ctx, state.data, state.nbytes, 0)
        if read != state.nbytes:
            raise RuntimeError(f"llama.cpp restored {read} of {state.nbytes} bytes of a saved prompt state")
        self.llm.n_tokens = len(state.tokens)
        self.llm.input_ids[:len(state.tokens)] = state.tokens
        self.live = state.tokens
