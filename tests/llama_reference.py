"""The reference the decoders are checked against: llama-cpp-python's own ``Llama.generate``.

The server never runs this: its decoders (``one_at_a_time.py``, ``batching.py``) drive
llama.cpp themselves. ``LlamaDecoder`` wraps a ``llama_cpp.Llama`` as a ``Decoder``, so an
``Engine`` built on it answers as llama-cpp-python's generation loop does; with a
``prompt_cache`` its prompts are evaluated through the same ``PromptCache`` (in aligned
chunks) as the batched decoder's. ``tests/server/test_engine.py`` and ``tests/server/test_batching.py``
compare token for token.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp
from llama_cpp import Llama, LlamaGrammar

from course_server.engine import CacheUse, Engine
from course_server.model import LoadedModel
from course_server.prompt_cache import PromptCache, SavedState, check_can_be_cut, saved_sequence


class LlamaSequence:
    """The one sequence of a ``llama_cpp.Llama``, as the prompt cache uses it.

    ``Llama.generate(tokens)`` then finds ``tokens[:-1]`` in place (its ``n_tokens`` and
    ``input_ids``) and evaluates only the last token before it samples.
    """

    def __init__(self, llm: Llama) -> None:
        self.llm = llm
        self.live: tuple[int, ...] = ()

    def evaluate(self, tokens: list[int]) -> None:
        self.llm.eval(tokens)  # callers pass at most a chunk, so Llama.eval (which splits at n_batch) does not

    def cut(self, keep: int) -> bool:
        if not self.llm._ctx.kv_cache_seq_rm(-1, keep, -1):
            return False
        self.llm.n_tokens = keep
        return True

    def save(self) -> ctypes.Array[ctypes.c_uint8] | None:
        return saved_sequence(self.llm._ctx.ctx, 0)

    def load(self, state: SavedState) -> int:
        self.llm.n_tokens = 0
        self.llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        read = llama_cpp.llama_state_seq_set_data(self.llm._ctx.ctx, state.data, state.nbytes, 0)
        if read == state.nbytes:
            self.llm.n_tokens = len(state.tokens)
            self.llm.input_ids[:len(state.tokens)] = state.tokens
        return read

    def forget(self) -> None:
        self.llm.reset()
        self.live = ()


class LlamaDecoder:
    """A ``Decoder`` that generates with ``Llama.generate`` (one request at a time, one context size)."""

    parallel = 1
    busy_since: float | None = None

    def __init__(self, model: LoadedModel, n_ctx: int, prompt_cache: int = 0) -> None:
        self.llm = Llama(model_path=str(model.path), n_ctx=n_ctx, n_batch=512, n_threads=model.n_threads,
                         verbose=False)
        self.sequence = LlamaSequence(self.llm)
        self.cache = PromptCache(prompt_cache) if prompt_cache else None
        if self.cache:
            check_can_be_cut(model)

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx()

    def fit_context(self, n_ctx: int) -> int:
        if n_ctx != self.n_ctx:
            raise ValueError(f"the reference has a context of {self.n_ctx} tokens only")
        return 0

    def sampled_bytes(self, tokens: list[int], settings: dict[str, Any], grammar: LlamaGrammar | None,
                      n_ctx: int, budget: int, cancel: threading.Event | None,
                      cache_use: CacheUse | None = None) -> Iterator[bytes]:
        if self.cache:  # (without one, llama-cpp-python's own reuse is not counted: outputs are compared, not usage)
            self.cache.prepare(self.sequence, tokens)
            if cache_use is not None:
                cache_use.read, cache_use.written = self.cache.reused, self.cache.written
        self.llm.set_seed(settings.get("seed", llama_cpp.LLAMA_DEFAULT_SEED))
        self.llm.last_n_tokens_size = settings["repeat_last_n"]
        for token in self.llm.generate(
            tokens, top_k=settings["top_k"], top_p=settings["top_p"], min_p=settings["min_p"],
            temp=settings["temperature"], repeat_penalty=settings["repeat_penalty"],
            presence_penalty=settings["presence_penalty"], frequency_penalty=settings["frequency_penalty"],
            grammar=grammar,
        ):
            if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token):
                return
            yield self.llm.detokenize([token])

    def forget_cache(self) -> None:
        if self.cache:
            self.cache.clear()
        self.sequence.forget()

    def healthy(self) -> bool:
        return True

    def facts(self) -> dict[str, Any]:
        return {}


def reference_engine(model: LoadedModel, n_ctx: int, prompt_cache: int = 0) -> Engine:
    """An ``Engine`` over ``model`` that generates as llama-cpp-python does."""
    return Engine(model, LlamaDecoder(model, n_ctx, prompt_cache), n_ctx)

