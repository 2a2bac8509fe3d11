"""A llama.cpp context: the KV cache of one or more sequences over a ``LoadedModel``'s weights.

Both decoders (``one_at_a_time.py``, ``batching.py``) generate in a ``Context``: one sequence
for the one-at-a-time decoder, one per slot for the batched one. A ``ContextSequence`` is what
the prompt cache (``prompt_cache.py``) works on: it can evaluate tokens, be cut at a position,
and save and load its state. ``Context.decode`` is the one call into ``llama_decode``.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
from llama_cpp._internals import LlamaBatch, LlamaContext

from course_server.model import N_BATCH, LoadedModel
from course_server.prompt_cache import SavedState, saved_sequence


class ContextSequence:
    """Sequence ``seq`` of a context: what ``PromptCache`` needs of it, and how many tokens it holds."""

    def __init__(self, context: Context, seq: int) -> None:
        self.context, self.seq = context, seq
        self.live: tuple[int, ...] = ()
        self.n_tokens = 0  # tokens it holds, prompt and generated

    def evaluate(self, tokens: list[int]) -> None:
        """Evaluate ``tokens`` in one batch after those the sequence holds (logits for the last only)."""
        self.context.decode([(token, self.n_tokens + i, self.seq) for i, token in enumerate(tokens)], every_row=False)
        self.n_tokens += len(tokens)

    def cut(self, keep: int) -> bool:
        if not llama_cpp.llama_memory_seq_rm(self.context.memory, self.seq, keep, -1):
            return False
        self.n_tokens = min(self.n_tokens, keep)
        return True

    def save(self) -> ctypes.Array[ctypes.c_uint8] | None:
        return saved_sequence(self.context.ctx.ctx, self.seq)

    def load(self, state: SavedState) -> int:
        self.forget()
        read = llama_cpp.llama_state_seq_set_data(self.context.ctx.ctx, state.data, state.nbytes, self.seq)
        if read == state.nbytes:
            self.n_tokens = len(state.tokens)
        return read

    def forget(self) -> None:
        llama_cpp.llama_memory_seq_rm(self.context.memory, self.seq, 0, -1)
        self.n_tokens, self.live = 0, ()


class Context:
    """A llama.cpp context with ``sequences`` KV cache streams of ``n_ctx`` tokens each."""

    def __init__(self, model: LoadedModel, sequences: int, n_ctx: int) -> None:
        self.n_ctx = n_ctx  # per sequence
        self.ctx = LlamaContext(model=model.weights, params=model.context_params(n_ctx, sequences), verbose=False)
        self.memory = llama_cpp.llama_get_memory(self.ctx.ctx)
        self.batch = LlamaBatch(n_tokens=N_BATCH, embd=0, n_seq_max=1, verbose=False)
        self.vocabulary = model.n_vocab
        self.sequences = [ContextSequence(self, seq) for seq in range(sequences)]

    def decode(self, entries: list[tuple[int, int, int]], every_row: bool = True) -> None:
        """One ``llama_decode`` of (token, position, sequence) entries, with logits for every row
        or (a prompt's piece, as ``llama_cpp.Llama.eval`` does it) for the last one only."""
        batch = self.batch.batch
        batch.n_tokens = len(entries)
        for i, (token, position, seq) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, position, 1, seq
            batch.logits[i] = every_row or i == len(entries) - 1
        self.ctx.decode(self.batch)

    def logits(self, row: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.ctx.get_logits_ith(row), shape=(self.vocabulary,)).copy()

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()
