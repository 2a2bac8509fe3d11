"""The model itself: one llama.cpp instance that turns a prompt into text, token by token.

This is the part of an Ollama-like server that is not HTTP. It loads a GGUF file once,
renders chat messages with the model's own template, and generates with the sampling
options a request asks for, measuring what it does (tokens and nanoseconds), as Ollama
reports it.

Two things about llama.cpp shape this code:

- One ``Llama`` instance is not thread-safe, so the server runs one generation at a time.
- The instance remembers the tokens of the last prompt (its KV cache). When the next
  prompt starts with the same tokens, as every turn of a tool-calling loop does, only
  the new tail is evaluated. That is why the server keeps a single instance alive.
  At temperature 0 that single cached prefix can still change the output slightly (the
  cached path adds numbers in a different order); ``reset_each_request=True`` trades the
  speed-up for exact repeatability. ``prompt_cache=N`` (the server's default, 8) keeps N
  prefixes instead, and makes the output independent of which one was cached
  (``prompt_cache.py``).

And one thing about tokens: a chat prompt (``Prompt``) is tokenized so that only the
template's own markers become special tokens. Text from messages and tools stays text,
even when it spells ``<|im_start|>``: a web page cannot open a system turn. A raw prompt
(a plain ``str``, ``/api/generate`` with ``raw``) is the caller's own template, so its
markers are read as markers.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import Llama, LlamaGrammar
from llama_cpp.llama_grammar import JSON_GBNF

from ..chat_template import Prompt, render, render_prompt, template_markers
from .generation import (  # noqa: F401 (re-exported: the model-free half of a generation)
    DEFAULT_NUM_CTX,
    DEFAULT_PROMPT_CACHE,
    DEFAULTS,
    BadFormat,
    ContextTooLarge,
    Ending,
    GenerationStats,
    PromptTooLong,
    ServedModel,
    StopScanner,
    TokenText,
    generated_text,
)
from .grammar_limits import MAX_GRAMMAR_CHARS, MAX_GRAMMAR_NESTING, grammar_nesting
from .prompt_cache import LlamaSequence, PromptCache
from .wire import Format, Options

_loading = threading.Lock()
STALL_SECONDS = 300.0  # one step of llama.cpp that takes longer is stuck (a 32k-token prompt takes about 2 minutes)


def load_llama(path: Path, repack: bool, **settings: Any) -> Llama:
    """``Llama(model_path=path, **settings)``, with llama.cpp's weight repacking on or off.

    On loading, llama.cpp rearranges ("repacks") the weights of some quantisation types for
    faster CPU kernels. The repacked matrix product treats a batch of 4 or more rows with
    another kernel than 1 to 3 rows, which adds the same numbers in another order; without
    repacking every row is computed alike, whatever the batch (``batching.py`` measures it).
    llama-cpp-python does not expose llama.cpp's switch (``use_extra_bufts``; llama-server's
    ``--no-repack``), so for ``repack=False`` the default model parameters that ``Llama``
    starts from are changed for the duration of the load.
    """
    defaults = llama_cpp.llama_model_default_params

    def without_repacking() -> llama_cpp.llama_model_params:
        params = defaults()
        params.use_extra_bufts = False
        return params

    with _loading:  # every load, so that no load with repacking runs while the defaults are changed
        if repack:
            return Llama(model_path=str(path), **settings)
        llama_cpp.llama_cpp.llama_model_default_params = without_repacking  # what Llama.__init__ calls
        try:
            return Llama(model_path=str(path), **settings)
        finally:
            llama_cpp.llama_cpp.llama_model_default_params = defaults


class Engine:
    """A loaded model. Call ``generate()`` from one thread at a time."""

    parallel = 1

    def __init__(self, name: str, path: Path, n_ctx: int = DEFAULT_NUM_CTX,
                 n_threads: int | None = None, reset_each_request: bool = False,
                 max_n_ctx: int | None = None, prompt_cache: int = 0, repack: bool = True) -> None:
        self.name = name
        self.path = Path(path)
        self.n_threads = n_threads or self.default_threads()
        self.repack = repack  # llama.cpp's repacked weights (its default); see load_llama
        self.reset_each_request = reset_each_request
        self.default_n_ctx = n_ctx  # what a request without options.num_ctx gets
        if prompt_cache and reset_each_request:
            raise ValueError("reset_each_request and prompt_cache exclude each other: choose one")
        self.prompt_cache_slots = prompt_cache  # 0: llama-cpp-python's own single prefix
        self.llm, self.load_duration = self._new_llama(n_ctx)
        self.sequence = self._new_sequence()
        self.cache = PromptCache(prompt_cache) if prompt_cache else None
        self.n_ctx = n_ctx
        self.metadata: dict[str, str] = dict(self.llm.metadata)
        self.template: str = self.metadata.get("tokenizer.chat_template", "")
        # Read once here: render() runs on the server's event loop and must not touch
        # self.llm while a generation thread uses (or reloads) it.
        self.bos_token = self._token_text(self.llm.token_bos())
        self.eos_token = self._token_text(self.llm.token_eos())
        self.context_length = int(self.metadata.get(f"{self.architecture}.context_length", n_ctx))
        self.max_n_ctx = min(max_n_ctx or self.context_length, self.context_length)
        self.markers = self._control_tokens()
        self.busy_since: float | None = None  # when the step llama.cpp is in began (None: idle)
        self.marker_pattern = re.compile("|".join(map(re.escape, sorted(self.markers, key=len, reverse=True))))

    @staticmethod
    def default_threads() -> int:
        """All cores (llama-cpp-python's own default is half of them: about half the speed here)."""
        return os.cpu_count() or 1

    def _new_llama(self, n_ctx: int) -> tuple[Llama, int]:
        """A fresh llama.cpp instance with an ``n_ctx``-token context, and ns it took."""
        started = time.perf_counter_ns()
        llm = load_llama(self.path, self.repack, n_ctx=n_ctx, n_batch=512, n_threads=self.n_threads, verbose=False)
        return llm, time.perf_counter_ns() - started

    def _new_sequence(self) -> LlamaSequence | None:
        """The prompt cache's view of the model's one sequence (None without a prompt cache)."""
        return LlamaSequence(self.llm) if self.prompt_cache_slots else None

    def _control_tokens(self) -> dict[str, int]:
        """The vocabulary's control tokens (``<|im_start|>``, ``<|im_end|>``, ...) by text."""
        vocab = self.llm._model.vocab
        return {self._token_text(token): token for token in range(llama_cpp.llama_vocab_n_tokens(vocab))
                if llama_cpp.llama_vocab_get_attr(vocab, token) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
                and self._token_text(token)}

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "unknown")

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for a chat, from the model's own template."""
        return render(self.template, messages, tools, add_generation_prompt=True,
                      bos_token=self.bos_token, eos_token=self.eos_token)

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Prompt:
        """``render``, plus where the messages' and tools' text sits (see ``tokenize``)."""
        return render_prompt(self.template, messages, tools, add_generation_prompt=True,
                             bos_token=self.bos_token, eos_token=self.eos_token)

    def tokenize(self, prompt: str | Prompt) -> list[int]:
        """Token ids of a prompt.

        A raw ``str`` is the caller's own template: markers such as ``<|im_start|>`` in it
        become one special token each. In a ``Prompt`` only the markers the template wrote
        do; the same characters inside a message stay plain text (several ordinary tokens).
        Between markers the text is tokenized in one piece, exactly as a raw prompt is.
        """
        if isinstance(prompt, str):
            return self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        tokens: list[int] = []
        cursor = 0
        for start, end in self._template_markers(prompt):
            tokens += self._plain_tokens(prompt.text[cursor:start]) + [self.markers[prompt.text[start:end]]]
            cursor = end
        return tokens + self._plain_tokens(prompt.text[cursor:])

    def _template_markers(self, prompt: Prompt) -> list[tuple[int, int]]:
        """Spans of control-token text that lie outside every message's text."""
        return template_markers(prompt, self.marker_pattern)

    def _plain_tokens(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False) if text else []

    def generate(self, prompt: str | Prompt, options: Options | None = None, format: Format = None,
                 cancel: threading.Event | None = None) -> Iterator[str | GenerationStats]:
        """Yield the new text piece by piece; the last item is the ``GenerationStats``.

        Stops at the model's end-of-turn token, a ``stop`` string (not included in the
        text), ``num_predict`` tokens, a full context window, or when ``cancel`` is set.
        The model's part is ``_sampled_bytes`` (tokens, as bytes); turning those into text
        is ``generated_text``, which needs no model and is tested without one.
        """
        settings = {**DEFAULTS, **(options.model_dump(exclude_none=True) if options else {})}
        n_ctx, load_duration = self._fit_context(settings.get("num_ctx"))
        started = time.perf_counter_ns()
        tokens = self.tokenize(prompt)
        if len(tokens) >= n_ctx:
            raise PromptTooLong(f"the prompt is {len(tokens)} tokens but num_ctx is {n_ctx}; "
                                "shorten the conversation or raise options.num_ctx")
        limit = settings["num_predict"] if settings["num_predict"] >= 0 else n_ctx
        budget = min(limit, n_ctx - len(tokens))  # num_predict, and the room left in the context
        ending = yield from generated_text(self._sampled_bytes(tokens, settings, format, n_ctx, budget, cancel),
                                           settings.get("stop") or [], budget, cancel)
        finished = time.perf_counter_ns()
        first_token_at = ending.first_token_at or finished
        yield GenerationStats(ending.done_reason, len(tokens), first_token_at - started, ending.eval_count,
                              finished - first_token_at, load_duration)

    def _sampled_bytes(self, tokens: list[int], settings: dict[str, Any], format: Format, n_ctx: int,
                       budget: int, cancel: threading.Event | None = None) -> Iterator[bytes]:
        """The bytes of each token the model samples after ``tokens``, until it ends its turn.

        llama.cpp samples lazily: each ``next`` evaluates one more token, so whoever stops
        asking (a stop string, a cancelled request, the ``budget`` of tokens) stops the model.
        (``n_ctx`` is the context this engine already has: ``_fit_context`` loaded it. The
        batched engine, ``batching.py``, uses all of these arguments.)
        """
        grammar = self.grammar_for(format)  # a bad schema is a 400 before any work
        if self.reset_each_request:
            self.forget_cache()
        if self.cache and self.sequence:
            self.cache.prepare(self.sequence, tokens)
        # No seed means a fresh random one (an earlier request's seed must not linger).
        self.llm.set_seed(settings.get("seed", llama_cpp.LLAMA_DEFAULT_SEED))
        self.llm.last_n_tokens_size = settings["repeat_last_n"]
        self.busy_since = time.monotonic()
        try:
            for token in self.llm.generate(
                tokens, top_k=settings["top_k"], top_p=settings["top_p"], min_p=settings["min_p"],
                temp=settings["temperature"], repeat_penalty=settings["repeat_penalty"],
                presence_penalty=settings["presence_penalty"], frequency_penalty=settings["frequency_penalty"],
                grammar=grammar,
            ):
                # The library's own completion code asks the vocabulary this way.
                if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token):
                    return
                self.busy_since = None  # the token is out; the caller decides whether to ask for another
                yield self.llm.detokenize([token])
                self.busy_since = time.monotonic()
        finally:
            self.busy_since = None

    def healthy(self) -> bool:
        """Whether llama.cpp is making progress: no step (a prompt, a token) has taken more than
        ``STALL_SECONDS``. A grammar can make every token cost minutes; the supervisor's liveness
        check asks this and restarts a stalled model."""
        started = self.busy_since
        return started is None or time.monotonic() - started < STALL_SECONDS

    def forget_cache(self) -> None:
        """Forget the cached prompt: the next request is evaluated from its first token.

        The server does this when a client asks Ollama to unload the model (an empty request
        with ``keep_alive: 0``), so a benchmark can start every case from the same state.
        """
        if self.cache:
            self.cache.clear()
        if self.sequence:
            self.sequence.forget()  # the model's one sequence: llm.reset(), and no live prefix
        else:
            self.llm.reset()

    def _wanted_context(self, num_ctx: int | None) -> int:
        """The context a request asks for (``options.num_ctx``, else the server's), if allowed."""
        wanted = num_ctx or self.default_n_ctx
        if wanted > self.max_n_ctx:
            raise ContextTooLarge(f"options.num_ctx must be at most {self.max_n_ctx} on this server; "
                                  f"{wanted} was asked for")
        return wanted

    def _fit_context(self, num_ctx: int | None) -> tuple[int, int]:
        """Reload with a new context size when a request asks for one (Ollama does the same);
        the request's context size and the ns the reload took.

        The new instance is loaded before the old one is let go: if the load fails (not
        enough memory, say), the server keeps serving with the context it had.
        """
        wanted = self._wanted_context(num_ctx)
        if wanted == self.n_ctx:
            return wanted, 0
        try:
            llm, duration = self._new_llama(wanted)
        except Exception as error:  # llama.cpp reports a failed allocation as ValueError or RuntimeError
            raise ContextTooLarge(f"could not load a context of {wanted} tokens ({error}); "
                                  f"the server keeps its context of {self.n_ctx}") from None
        self.llm, self.n_ctx = llm, wanted
        self.sequence = self._new_sequence()
        if self.cache:
            self.cache.clear()
        return wanted, duration

    def grammar_for(self, format: Format) -> LlamaGrammar | None:
        """A llama.cpp grammar that only allows JSON (``"json"``) or JSON of a given schema.

        The grammar is compiled once here to check it: a schema the converter gets wrong
        (this llama-cpp-python version mangles some regex ``pattern``s) must become a
        clear error, not a crash of the whole server when sampling starts.
        """
        if format is None:
            return None
        if format == "json":
            return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
        try:
            grammar = LlamaGrammar.from_json_schema(json.dumps(format), verbose=False)
        except Exception as error:  # the converter asserts, indexes and recurses on what it does not know
            raise BadFormat(f"the format schema could not be turned into a grammar: "
                            f"{type(error).__name__}: {error}"[:300]) from None
        if len(grammar._grammar) > MAX_GRAMMAR_CHARS:
            raise BadFormat(f"the format schema becomes a grammar of {len(grammar._grammar):,} characters; "
                            f"this server compiles at most {MAX_GRAMMAR_CHARS:,} (fewer enum values or properties)")
        if (nesting := grammar_nesting(grammar._grammar)) > MAX_GRAMMAR_NESTING:
            raise BadFormat(f"the format schema becomes a grammar nested {nesting:,} levels deep; this server "
                            f"compiles at most {MAX_GRAMMAR_NESTING:,} (smaller counts)")
        compiled = llama_cpp.llama_sampler_init_grammar(
            self.llm._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not compiled:
            raise BadFormat("the format schema could not be turned into a valid llama.cpp grammar "
                             "(regex patterns are the usual cause); drop the pattern and validate it afterwards")
        llama_cpp.llama_sampler_free(compiled)
        return grammar

    def _token_text(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace") if token >= 0 else ""
