"""One request at a time: a context with one sequence that remembers the last prompt.

The simplest decoder, what the server runs with ``--prompt-cache 0`` or ``--reset-cache``.
It generates on the request's own thread (the scheduler lets one in at a time: a llama.cpp
context may only be used by one thread at a time), as ``llama_cpp.Llama.generate`` does:

- the sequence keeps the tokens of the last prompt and of the reply generated after it (its
  KV cache). When the next prompt starts with the same tokens, as every turn of a tool-calling
  loop does, only the new tail is evaluated, in pieces of up to ``N_BATCH`` tokens;
- each sampled token is then evaluated alone, and the next one sampled after it.

What it reports (``CacheUse``): the tokens it kept are ``read`` from the cache; every prompt
token it evaluates stays in the sequence for the next request, so all of them are ``written``
(none with ``reset_each_request``, which forgets them before the next request could read them).

At temperature 0 that one cached prefix can change the output slightly (a prompt evaluated
as 300 cached tokens plus 400 new ones adds numbers in another order than the same prompt
evaluated at once); ``reset_each_request=True`` trades the speed-up for exact repeatability.
The batched decoder (``batching.py``) keeps several prefixes and makes the output
independent of which one was cached.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from llama_cpp import LlamaGrammar

from course_server.context import Context
from course_server.generation import (
    DEFAULT_TIME_BUDGET,
    STALL_SECONDS,
    TOKEN_STALL_SECONDS,
    CacheUse,
    ContextTooLarge,
    check_sampling_time,
    stalled,
)
from course_server.model import N_BATCH, LoadedModel
from course_server.prompt_cache import shared_prefix


class OneAtATimeDecoder:
    """A ``Decoder`` with one sequence, for one request at a time (``parallel`` is 1)."""

    parallel = 1

    def __init__(self, model: LoadedModel, n_ctx: int, reset_each_request: bool = False) -> None:
        self.model = model
        self.reset_each_request = reset_each_request
        self.context = Context(model, 1, n_ctx)
        self.held: list[int] = []  # the tokens in the sequence's cache, in order
        self.logits_fresh = False  # whether the context's last logits are those after ``held``
        self.busy_since: float | None = None
        self.step_allowance = STALL_SECONDS  # how long the current step may take (a prompt, or a token)

    @property
    def n_ctx(self) -> int:
        return self.context.n_ctx

    def fit_context(self, n_ctx: int) -> int:
        """Make a context of ``n_ctx`` tokens when a request asks for another size (Ollama reloads
        the model for it); the ns it took. The new context is made before the old one is let go:
        if that fails (not enough memory, say), the server keeps serving with the one it had."""
        if n_ctx == self.n_ctx:
            return 0
        started = time.perf_counter_ns()
        try:
            context = Context(self.model, 1, n_ctx)
        except Exception as error:  # llama.cpp reports a failed allocation as ValueError or RuntimeError
            raise ContextTooLarge(f"could not make a context of {n_ctx} tokens ({error}); "
                                  f"the server keeps its context of {self.n_ctx}") from None
        self.context.close()
        self.context, self.held, self.logits_fresh = context, [], False
        return time.perf_counter_ns() - started

    def sampled_bytes(self, tokens: list[int], settings: dict[str, Any], grammar: LlamaGrammar | None,
                      n_ctx: int, budget: int, cancel: threading.Event | None = None,
                      cache_use: CacheUse | None = None) -> Iterator[bytes]:
        """The bytes of each token sampled after ``tokens``, until the model ends its turn.

        (``n_ctx`` is the context ``fit_context`` made; the budget and ``cancel`` are the
        caller's to check: it stops asking for tokens. ``cache_use`` gets what the cache gave.)
        """
        if self.reset_each_request:
            self.forget_cache()
        sampler = self.model.sampler(settings, grammar)
        time_budget = settings.get("time_budget") or DEFAULT_TIME_BUDGET
        sampling = 0.0  # seconds the tokens' sampling has taken: the grammar's cost (engine.TimeBudget)
        self.busy_since, self.step_allowance = time.monotonic(), STALL_SECONDS
        try:
            pending = self._reuse_prefix(tokens)
            if cache_use is not None:
                cache_use.read = len(tokens) - len(pending)
                cache_use.written = 0 if self.reset_each_request else len(pending)
            while True:
                self._evaluate(pending)
                began = time.monotonic()
                token = sampler.sample(self.context.ctx, -1)  # after the last evaluated token
                spent = time.monotonic() - began
                sampling += spent
                check_sampling_time(spent, sampling, time_budget)  # the deadline: Engine.generate's loop
                if self.model.ends_turn(token):
                    return
                self.busy_since = None  # the token is out; the caller decides whether to ask for another
                yield self.model.token_bytes(token)
                self.busy_since, self.step_allowance = time.monotonic(), TOKEN_STALL_SECONDS
                pending = [token]
        finally:
            self.busy_since = None
            sampler.close()

    def _reuse_prefix(self, tokens: list[int]) -> list[int]:
        """Keep the cached tokens that ``tokens`` starts with; return those still to evaluate.

        A prompt that is all cached gets its last token evaluated again (for fresh logits),
        unless the context's logits are already the ones after it.
        """
        if self.logits_fresh and self.held == tokens:
            return []
        keep = min(shared_prefix(self.held, tokens), len(tokens) - 1)
        if not self.context.sequences[0].cut(keep):
            raise RuntimeError(f"llama.cpp could not cut its cache at token {keep}")
        del self.held[keep:]
        self.logits_fresh = False
        return tokens[keep:]

    def _evaluate(self, tokens: list[int]) -> None:
        """Evaluate ``tokens`` after the held ones, in pieces of at most ``N_BATCH`` (and ``n_ctx``)."""
        step = min(self.n_ctx, N_BATCH)
        try:
            for start in range(0, len(tokens), step):
                piece = tokens[start:start + step]
                self.context.sequences[0].evaluate(piece)
                self.held += piece
                self.logits_fresh = True
        except BaseException:
            self.forget_cache()  # nothing half-evaluated is reused
            raise

    def forget_cache(self) -> None:
        """Forget the cached tokens: the next prompt is evaluated from its first token."""
        self.context.sequences[0].forget()
        self.held, self.logits_fresh = [], False

    def healthy(self) -> bool:
        """Whether no step has taken more than its allowance (``STALL_SECONDS`` with a prompt to
        evaluate, ``TOKEN_STALL_SECONDS`` for one token)."""
        return not stalled(self.busy_since, self.step_allowance)

    def facts(self) -> dict[str, Any]:
        return {}
