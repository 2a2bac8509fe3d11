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
everything after them. tests/server/test_prompt_cache.py checks it token for token against this
cache's own cold run (the same engine, build and thread count). The answers need not equal
those of a decoder without this cache, which evaluates in other batches.

The cache works on a ``Sequence``: one of the sequences of a context shared by several
requests (``context.ContextSequence``, used by ``batching.py``). The saved states are shared:
a prefix saved from one sequence can be restored into another.

The saved states are bounded twice: at most ``slots`` of them, and at most ``max_bytes`` in
all (about 12 KiB per token for the course's 0.5B model), the least recently used dropped
first. Models whose cache cannot be cut at a position (recurrent and hybrid models, sliding-
window attention) are refused.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # imported where it is called: the bookkeeping is tested without the compiled library
    import llama_cpp

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


class Sequence(Protocol):
    """One sequence in a model's KV cache, as the prompt cache uses it.

    The batched decoder has one per slot of a shared context (``context.ContextSequence``);
    the tests use a list of tokens (``tests/server/test_prompt_cache.py``).
    """

    live: tuple[int, ...]  # the whole chunks of the last prompt prepared on it, still in the cache

    def evaluate(self, tokens: list[int]) -> None:
        """Evaluate ``tokens`` in one batch, after the tokens the sequence holds."""

    def cut(self, keep: int) -> bool:
        """Forget every token from position ``keep`` on; False if the model cannot."""

    def save(self) -> ctypes.Array[ctypes.c_uint8] | None:
        """The sequence's state (keys and values) as bytes, or None if there is nothing to save."""

    def load(self, state: SavedState) -> int:
        """Replace the sequence's tokens with a saved state; the number of bytes read."""

    def forget(self) -> None:
        """Hold no tokens, and so no ``live`` prefix (this cannot fail)."""


def shared_prefix(a: tuple[int, ...] | list[int], b: list[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class CutModel(Protocol):
    def can_be_cut(self) -> bool:
        """Whether a sequence's cache can drop every token after a position (``model.LoadedModel``)."""


def check_can_be_cut(model: CutModel) -> None:
    """Refuse a model whose cache cannot be cut at a position: reusing a prefix needs that."""
    if not model.can_be_cut():
        raise ValueError("this model's cache cannot be cut at a position (a recurrent, hybrid or "
                         "sliding-window model): run it without --prompt-cache")


class PromptCache:
    """Saved states of the last ``slots`` prompts, least recently used dropped first."""

    def __init__(self, slots: int, chunk: int = CHUNK, max_bytes: int = MAX_BYTES) -> None:
        if slots < 1 or not 1 <= chunk <= 512:
            raise ValueError("slots must be at least 1 and chunk between 1 and 512 (the engines' n_batch)")
        self.slots, self.chunk, self.max_bytes = slots, chunk, max_bytes
        self.saved: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.reused = 0  # tokens the last prepare() restored instead of evaluating
        self.written = 0  # tokens the last prepare() evaluated and saved, for later prompts to restore

    def clear(self) -> None:
        """Forget every saved state (the engine also makes its sequences forget theirs)."""
        self.saved.clear()

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for state in self.saved.values())

    def prepare(self, sequence: Sequence, tokens: list[int]) -> None:
        """Evaluate all of ``tokens`` but the last one on ``sequence``, reusing what is cached.

        The engine then evaluates the last token and samples, the same way whatever was
        reused. If anything fails on the way, the sequence and the saved states are forgotten:
        nothing half-done is reused.
        """
        if not tokens:
            raise ValueError("an empty prompt")
        try:
            self._prepare(sequence, tokens)
        except BaseException:
            self.clear()
            sequence.forget()
            raise

    def _prepare(self, sequence: Sequence, tokens: list[int]) -> None:
        end = len(tokens) - 1
        self.reused = self.written = 0
        start = self._restore_longest(sequence, tokens, end)
        self.reused = start
        whole = end - end % self.chunk
        for position in range(start, whole, self.chunk):
            sequence.evaluate(tokens[position:position + self.chunk])
        sequence.live = tuple(tokens[:whole])  # (a failure above forgets everything: see prepare)
        if whole > 0 and self._save(sequence):
            self.written = whole - start
        if whole < end:
            sequence.evaluate(tokens[whole:end])  # the tail: never reused, so its batch may vary

    def _restore_longest(self, sequence: Sequence, tokens: list[int], end: int) -> int:
        """Put ``sequence`` in the state with the longest usable prefix of ``tokens``; its length."""
        def usable(prefix: tuple[int, ...]) -> int:
            n = min(shared_prefix(prefix, tokens), end)
            return n - n % self.chunk

        best = max(self.saved.values(), key=lambda state: usable(state.tokens), default=None)
        keep = usable(sequence.live)
        if best is not None and usable(best.tokens) > keep:
            keep = usable(best.tokens)
            self._load(sequence, best)
            self.saved.move_to_end(best.tokens)
        if not sequence.cut(keep):
            raise RuntimeError(f"llama.cpp could not cut its cache at token {keep}")
        sequence.live = tuple(tokens[:keep])
        return keep

    def _save(self, sequence: Sequence) -> bool:
        """Keep the state of the sequence's live tokens; whether it is a new saved state."""
        tokens = sequence.live
        if tokens in self.saved:
            self.saved.move_to_end(tokens)
            return False
        data = sequence.save()
        if data is None:
            return False  # nothing to keep: the next prompt is evaluated from the start
        self.saved[tokens] = SavedState(tokens, data)
        while len(self.saved) > self.slots or (len(self.saved) > 1 and self.nbytes > self.max_bytes):
            self.saved.popitem(last=False)
        return True

    @staticmethod
    def _load(sequence: Sequence, state: SavedState) -> None:
        sequence.live = ()  # until the restore has worked
        read = sequence.load(state)
        if read != state.nbytes:
            raise RuntimeError(f"llama.cpp restored {read} of {state.nbytes} bytes of a saved prompt state")
        sequence.live = state.tokens


def saved_sequence(ctx: llama_cpp.llama_context_p, seq: int) -> ctypes.Array[ctypes.c_uint8] | None:
    """The state of sequence ``seq`` of a llama.cpp context, as bytes (None if llama.cpp wrote none)."""
    import llama_cpp

    size = llama_cpp.llama_state_seq_get_size(ctx, seq)
    data = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, data, size, seq)
    return (ctypes.c_uint8 * written).from_buffer(data) if 0 < written <= size else None
