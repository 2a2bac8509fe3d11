"""The model served: a ``LoadedModel`` and a ``Decoder``, composed into one ``Engine``.

This is the part of an Ollama-like server that is not HTTP. Three pieces, one idea each:

- the model (``model.py``): weights, tokenizer, metadata, chat template; it renders chat
  messages with the model's own template, tokenizes the prompt (the template's markers as
  special tokens, message text as plain text), and makes grammars and samplers;
- a decoder (``Decoder`` below): it takes a prompt's tokens and yields the bytes of each token
  the model samples after them, and says how much of the prompt it took from its cache
  (``CacheUse``). ``one_at_a_time.py`` serves one request at a time and reuses the previous
  prompt's prefix, as llama-cpp-python does; ``batching.py`` serves several at once, decoding
  their tokens together, with a prompt cache of several prefixes;
- the ``Engine``, which holds what every generation shares whatever the decoder: the request's
  options and their defaults, the context size it may have, the token budget, stop strings
  and the statistics Ollama reports (tokens and nanoseconds), with the cache's share of the
  prompt that OpenAI's and Anthropic's usage fields report.

This module imports no llama.cpp (the two above do), so ``Engine.generate`` is tested with a
scripted decoder in ``tests/server/test_engine_parts.py``. The server never calls a decoder itself:
how many requests run and wait is the scheduler's decision (``scheduler.py``), and the decoders
take what it hands them. ``one_at_a_time_engine`` and ``batched_engine`` build the two kinds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from course_lib.chat_template import Prompt
from course_server.generation import (  # noqa: F401 (re-exported: the model-free half of a generation)
    DEFAULT_NUM_CTX,
    DEFAULT_PROMPT_CACHE,
    DEFAULT_TIME_BUDGET,
    DEFAULTS,
    BadFormat,
    CacheUse,
    ContextTooLarge,
    Ending,
    GenerationStats,
    PromptTooLong,
    ServedModel,
    StopScanner,
    TimeBudget,
    TimeBudgetExceeded,
    TokenText,
    check_sampling_time,
    generated_text,
    past_deadline,
)
from course_server.wire import Format, Options


class Model(Protocol):
    """What an ``Engine`` uses of its model (``model.LoadedModel``)."""

    name: str
    path: Path
    metadata: dict[str, str]
    template: str
    bos_token: str
    eos_token: str
    markers: dict[str, int]  # control tokens by text
    context_length: int | None  # the length the model was trained for, if its metadata says
    load_duration: int  # ns the weights took to load
    repack: bool

    @property
    def architecture(self) -> str: ...

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str: ...

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
                      ) -> Prompt: ...

    def tokenize(self, prompt: str | Prompt) -> list[int]: ...

    def grammar_for(self, format: Format) -> Any: ...

    def call_opening_tokens(self) -> list[int]: ...


class Decoder(Protocol):
    """Tokens in, sampled tokens' bytes out: the part of a generation that runs llama.cpp.

    ``sampled_bytes`` may be called from ``parallel`` threads at once. llama.cpp samples lazily:
    each token is decoded when the caller asks for the next one, so whoever stops asking (a stop
    string, the budget, a cancelled request) stops the model.
    """

    parallel: int  # requests it serves at once
    busy_since: float | None  # when the step llama.cpp is in began (None: idle)

    @property
    def n_ctx(self) -> int:
        """The context size (tokens per sequence) it has now."""

    def fit_context(self, n_ctx: int) -> int:
        """Make sure a request of ``n_ctx`` tokens can run; the ns spent making a new context now
        (``ContextTooLarge`` if it could not be made: the decoder keeps the one it has)."""

    def sampled_bytes(self, tokens: list[int], settings: dict[str, Any], grammar: Any, n_ctx: int,
                      budget: int, cancel: threading.Event | None, cache_use: CacheUse) -> Iterator[bytes]:
        """The bytes of each token the model samples after ``tokens`` (with the request's
        ``settings`` and ``grammar``, in a context of ``n_ctx`` tokens), until it ends its turn,
        ``budget`` tokens are out, or ``cancel`` is set. Before the first token it fills in
        ``cache_use``: how many of ``tokens`` it restored from its cache, and how many it kept."""

    def forget_cache(self) -> None:
        """Forget every cached prompt: the next request is evaluated from its first token."""

    def healthy(self) -> bool:
        """Whether llama.cpp is making progress (see ``stalled``)."""

    def facts(self) -> dict[str, Any]:
        """What the server's start-up line says about it (slots, rows per batch)."""


def largest_context(model: Model, n_ctx: int, max_n_ctx: int | None) -> int:
    """The largest ``num_ctx`` a request may ask for: ``max_n_ctx``, at most the model's own length
    (``n_ctx``, the server's default, when the model's metadata does not say)."""
    context_length = model.context_length or n_ctx
    return min(max_n_ctx or context_length, context_length)


class Engine:
    """A ``model`` generating through a ``decoder``: what the server serves (a ``ServedModel``).

    ``n_ctx`` is the context a request without ``options.num_ctx`` gets; a request may ask for
    up to ``max_n_ctx`` (default: the model's own length). ``time_budget`` bounds what one
    request may take of the decoder (``TimeBudget``).
    """

    def __init__(self, model: Model, decoder: Decoder, n_ctx: int = DEFAULT_NUM_CTX,
                 max_n_ctx: int | None = None, time_budget: TimeBudget = DEFAULT_TIME_BUDGET) -> None:
        self.model, self.decoder = model, decoder
        self.time_budget = time_budget
        self.name, self.path, self.metadata, self.template = model.name, model.path, model.metadata, model.template
        self.parallel = decoder.parallel  # generations served at once
        self.default_n_ctx = n_ctx
        self.max_n_ctx = largest_context(model, n_ctx, max_n_ctx)

    # --- the model's description and prompts (ServedModel) ---------------------------------

    @property
    def architecture(self) -> str:
        return self.model.architecture

    @property
    def bos_token(self) -> str:
        return self.model.bos_token

    @property
    def eos_token(self) -> str:
        return self.model.eos_token

    @property
    def markers(self) -> dict[str, int]:
        return self.model.markers

    @property
    def n_ctx(self) -> int:
        return self.decoder.n_ctx

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return self.model.render(messages, tools)

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Prompt:
        return self.model.render_prompt(messages, tools)

    def tokenize(self, prompt: str | Prompt) -> list[int]:
        """Token ids of a prompt (``LoadedModel.tokenize``: only the template's markers are special)."""
        return self.model.tokenize(prompt)

    def grammar_for(self, format: Format) -> Any:
        return self.model.grammar_for(format)

    # --- generating ---------------------------------------------------------------------

    def generate(self, prompt: str | Prompt, options: Options | None = None, format: Format = None,
                 cancel: threading.Event | None = None) -> Iterator[str | GenerationStats]:
        """Yield the new text piece by piece; the last item is the ``GenerationStats``.

        Stops at the model's end-of-turn token, a ``stop`` string (not included in the
        text), ``num_predict`` tokens, a full context window, or when ``cancel`` is set; raises
        ``TimeBudgetExceeded`` past the request's time budget (the decoder checks the time each
        token's sampling takes, and the deadline, between tokens).
        The decoder's part is ``sampled_bytes`` (tokens, as bytes); turning those into text
        is ``generated_text``, which needs no model and is tested without one.
        """
        settings = {**DEFAULTS, **(options.model_dump(exclude_none=True) if options else {})}
        deadline = time.monotonic() + self.time_budget.request
        settings["deadline"], settings["time_budget"] = deadline, self.time_budget  # read by the decoder
        if isinstance(prompt, Prompt) and not prompt.calls_allowed:  # tool_choice "none": tools shown, no call
            settings["banned_tokens"] = self.model.call_opening_tokens()
        n_ctx = self.wanted_context(settings.get("num_ctx"))
        # A smaller window fits in the context the server has: it limits this request's tokens
        # (below), it does not make the decoder drain every slot to build a smaller context.
        context = max(n_ctx, self.default_n_ctx)
        load_duration = self.decoder.fit_context(context)
        started = time.perf_counter_ns()
        tokens = self.model.tokenize(prompt)
        if len(tokens) >= n_ctx:
            raise PromptTooLong(f"the prompt is {len(tokens)} tokens but num_ctx is {n_ctx}; "
                                "shorten the conversation or raise options.num_ctx")
        limit = settings["num_predict"] if settings["num_predict"] >= 0 else n_ctx
        budget = min(limit, n_ctx - len(tokens))  # num_predict, and the room left in the context
        grammar = self.model.grammar_for(format)  # a bad schema is a 400 before any work
        cache_use = CacheUse()  # the decoder fills it in
        sampled = self.decoder.sampled_bytes(tokens, settings, grammar, context, budget, cancel, cache_use)
        ending = yield from generated_text(sampled, settings.get("stop") or [], budget, cancel, deadline,
                                           self.time_budget)
        finished = time.perf_counter_ns()
        first_token_at = ending.first_token_at or finished
        yield GenerationStats(ending.done_reason, len(tokens), first_token_at - started, ending.eval_count,
                              finished - first_token_at, load_duration, cache_use.read, cache_use.written)

    def wanted_context(self, num_ctx: int | None) -> int:
        """The context a request asks for (``options.num_ctx``, else the server's), if allowed."""
        wanted = num_ctx or self.default_n_ctx
        if wanted > self.max_n_ctx:
            raise ContextTooLarge(f"options.num_ctx must be at most {self.max_n_ctx} on this server; "
                                  f"{wanted} was asked for")
        return wanted

    def forget_cache(self) -> None:
        """Forget the cached prompts: the next request is evaluated from its first token.

        The server does this when a client asks Ollama to unload the model (an empty request
        with ``keep_alive: 0``), so a benchmark can start every case from the same state. The
        scheduler calls it once no request runs (it takes every slot first).
        """
        self.decoder.forget_cache()

    def healthy(self) -> bool:
        """Whether llama.cpp is making progress (the supervisor's liveness check asks)."""
        return self.decoder.healthy()

    def facts(self) -> dict[str, Any]:
        """What the server's start-up line says (``supervisor.describe``)."""
        return {"load_duration": self.model.load_duration, "repack": self.model.repack, **self.decoder.facts()}


def one_at_a_time_engine(name: str, path: Path, n_ctx: int = DEFAULT_NUM_CTX, n_threads: int | None = None,
                         reset_each_request: bool = False, max_n_ctx: int | None = None,
                         repack: bool = True, time_budget: TimeBudget = DEFAULT_TIME_BUDGET) -> Engine:
    """The model served one request at a time, reusing the previous prompt's prefix
    (``reset_each_request``: none; ``--reset-cache``). Loads llama.cpp."""
    from course_server.model import LoadedModel
    from course_server.one_at_a_time import OneAtATimeDecoder

    model = LoadedModel(name, path, n_threads=n_threads, repack=repack)
    return Engine(model, OneAtATimeDecoder(model, n_ctx, reset_each_request), n_ctx, max_n_ctx, time_budget)


def batched_engine(name: str, path: Path, n_ctx: int = DEFAULT_NUM_CTX, n_threads: int | None = None,
                   max_n_ctx: int | None = None, prompt_cache: int = DEFAULT_PROMPT_CACHE,
                   parallel: int | None = None, batch_rows: int | None = None, repack: bool = True,
                   time_budget: TimeBudget = DEFAULT_TIME_BUDGET) -> Engine:
    """The model served to up to ``parallel`` requests at once, their tokens decoded together, with
    a prompt cache of ``prompt_cache`` prefixes (``batching.py``; what the server runs by default).
    Loads llama.cpp."""
    from course_server.batching import BatchedDecoder
    from course_server.model import LoadedModel

    model = LoadedModel(name, path, n_threads=n_threads, repack=repack)
    decoder = BatchedDecoder(model, n_ctx, largest_context(model, n_ctx, max_n_ctx), prompt_cache=prompt_cache,
                             parallel=parallel, batch_rows=batch_rows)
    return Engine(model, decoder, n_ctx, max_n_ctx, time_budget)
