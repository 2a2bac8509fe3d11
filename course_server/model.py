"""The model, loaded once: its weights, tokenizer, metadata and chat template, and what is
made from them for each request (the tokens of a prompt, a grammar, a sampler).

A ``LoadedModel`` holds no KV cache and generates nothing: the decoders do that
(``one_at_a_time.py``, ``batching.py``), each with a llama.cpp context of its own over these
weights. So one model serves every decoder and every context size; a request for a larger
``num_ctx`` makes a new context, not a new copy of the weights.

Two things about tokens shape this code. A chat prompt (``Prompt``) is tokenized so that
only the template's own markers become special tokens: text from messages and tools stays
text, even when it spells ``<|im_start|>``, so a web page cannot open a system turn. A raw
prompt (a plain ``str``, ``/api/generate`` with ``raw``) is the caller's own template, so
its markers are read as markers.

And one about the weights. On loading, llama.cpp rearranges ("repacks") the weights of some
quantisation types for faster CPU kernels. The repacked matrix product treats a batch of 4
or more rows with another kernel than 1 to 3 rows, which adds the same numbers in another
order; without repacking every row is computed alike, whatever the batch (``batching.py``
measures it). ``repack=False`` is llama-server's ``--no-repack``: the model parameters that
say so (``use_extra_bufts``) are built here, for this load only.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import LlamaGrammar
from llama_cpp._internals import LlamaModel, LlamaSampler
from llama_cpp._logger import set_verbose
from llama_cpp.llama_grammar import JSON_GBNF

from course_lib.chat_template import Prompt, render, render_prompt, token_pieces
from course_lib.config import model_threads
from course_lib.tool_parser import CALL_TAG
from course_server.generation import BadFormat
from course_server.grammar_limits import MAX_GRAMMAR_CHARS, MAX_GRAMMAR_NESTING, grammar_nesting
from course_server.wire import Format

N_BATCH = 512  # tokens per llama_decode at most: a prompt is evaluated in pieces of this size
_backend = threading.Lock()
_backend_ready = False


def start_backend() -> None:
    """``llama_backend_init``, once per process (llama.cpp's set-up before any model is loaded),
    with llama.cpp's log quiet but for errors (as ``llama_cpp.Llama(verbose=False)`` has it)."""
    global _backend_ready
    with _backend:
        if not _backend_ready:
            set_verbose(False)
            llama_cpp.llama_backend_init()
            _backend_ready = True


def model_params(repack: bool) -> llama_cpp.llama_model_params:
    """llama.cpp's parameters for loading weights on the CPU, memory-mapped, repacked or not
    (the values ``llama_cpp.Llama`` uses, so the weights are the ones it would load)."""
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers, params.vocab_only = 0, False
    params.split_mode, params.main_gpu = llama_cpp.LLAMA_SPLIT_MODE_LAYER, 0
    params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
    params.use_extra_bufts = repack
    return params


def one_of(texts: dict[str, int]) -> re.Pattern[str]:
    """One pattern that matches any of ``texts``, the longest first."""
    return re.compile("|".join(map(re.escape, sorted(texts, key=len, reverse=True))))


def default_threads() -> int:
    """``COURSE_THREADS``, else all cores (llama-cpp-python's own default is half of them:
    about half the speed here). Two model processes on the same cores must split them: two
    of 2 threads each on 2 cores took 15 s for 200 tokens each, against 6 s with 1 thread each."""
    return model_threads() or os.cpu_count() or 1


class LoadedModel:
    """A GGUF model's weights and vocabulary, with what a request needs from them."""

    def __init__(self, name: str, path: Path, n_threads: int | None = None, repack: bool = True) -> None:
        self.name, self.path = name, Path(path)
        self.n_threads = n_threads or default_threads()
        self.repack = repack
        if not self.path.exists():
            raise ValueError(f"the model file {self.path} does not exist")
        start_backend()
        started = time.perf_counter_ns()
        self.weights = LlamaModel(path_model=str(self.path), params=model_params(repack), verbose=False)
        self.load_duration = time.perf_counter_ns() - started
        self.vocab = self.weights.vocab
        self.n_vocab = self.weights.n_vocab()
        self.metadata: dict[str, str] = dict(self.weights.metadata())
        self.template: str = self.metadata.get("tokenizer.chat_template", "")
        self.bos_token = self.token_text(self.weights.token_bos())
        self.eos_token = self.token_text(self.weights.token_eos())
        self.context_length = int(self.metadata.get(f"{self.architecture}.context_length", 0)) or None
        self.markers = self._control_tokens()
        self.marker_pattern = one_of(self.markers)
        self.user_defined = self._user_defined_tokens()
        self.structure_pattern = one_of(self.user_defined) if self.user_defined else None

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "unknown")

    def _control_tokens(self) -> dict[str, int]:
        """The vocabulary's control tokens (``<|im_start|>``, ``<|im_end|>``, ...) by text."""
        return self._tokens_with(llama_cpp.LLAMA_TOKEN_ATTR_CONTROL)

    def _user_defined_tokens(self) -> dict[str, int]:
        """The vocabulary's user-defined tokens by text (Qwen2.5: ``<tool_call>``, ``</tool_call>``,
        the fill-in-the-middle markers): llama.cpp matches them in any text it tokenizes, special
        tokens on or off, so a client's copy of one must be cut apart (``tokenize``)."""
        return self._tokens_with(llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED)

    def _tokens_with(self, attribute: int) -> dict[str, int]:
        """The vocabulary's tokens that have ``attribute`` and a text, by text."""
        return {self.token_text(token): token for token in range(llama_cpp.llama_vocab_n_tokens(self.vocab))
                if llama_cpp.llama_vocab_get_attr(self.vocab, token) & attribute and self.token_text(token)}

    # --- prompts and tokens ---------------------------------------------------------------

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
        Between markers the text is tokenized in one piece, exactly as a raw prompt is, but for a
        client's copy of a user-defined token such as ``<tool_call>`` (``token_pieces``), which is
        tokenized as text: every token the template or the tool parser gives a meaning to stays
        text when a client writes it.
        """
        if isinstance(prompt, str):
            return self.weights.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        tokens: list[int] = []
        for kind, text in token_pieces(prompt, self.marker_pattern, self.structure_pattern):
            if kind == "marker":
                tokens.append(self.markers[text])
            elif kind == "escaped":
                tokens += self._escaped_tokens(text)
            else:
                tokens += self._plain_tokens(text)
        return tokens

    def _plain_tokens(self, text: str) -> list[int]:
        return self.weights.tokenize(text.encode("utf-8"), add_bos=False, special=False) if text else []

    def _escaped_tokens(self, text: str) -> list[int]:
        """A user-defined token's text as plain tokens: its first character, then the rest (which,
        shorter, is cut again wherever it holds another such token's text)."""
        if len(text) <= 1 or self.structure_pattern is None:
            return self._plain_tokens(text)
        tokens, rest, cursor = self._plain_tokens(text[0]), text[1:], 0
        for match in self.structure_pattern.finditer(rest):
            tokens += self._plain_tokens(rest[cursor:match.start()]) + self._escaped_tokens(match.group())
            cursor = match.end()
        return tokens + self._plain_tokens(rest[cursor:])

    def token_bytes(self, token: int) -> bytes:
        """The bytes a generated token stands for (a control token stands for none)."""
        return self.weights.detokenize([token])

    def token_text(self, token: int) -> str:
        """A token's text, control tokens spelled out (``<|im_end|>``); "" for no token (-1)."""
        return self.weights.detokenize([token], special=True).decode("utf-8", errors="replace") if token >= 0 else ""

    def call_opening_tokens(self) -> list[int]:
        """The token that opens a tool call in this model's replies (``<tool_call>``), if the
        vocabulary has it as one token, as Qwen's does; else none (nothing to forbid)."""
        tokens = self.weights.tokenize(CALL_TAG.encode("utf-8"), add_bos=False, special=True)
        return tokens if len(tokens) == 1 else []

    def ends_turn(self, token: int) -> bool:
        """Whether ``token`` ends the model's turn (``<|im_end|>``, ``<|endoftext|>``, ...)."""
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def can_be_cut(self) -> bool:
        """Whether a sequence's cache can drop every token after a position and keep the rest, as
        reusing a prefix needs (not so for recurrent or hybrid models, or sliding-window attention)."""
        model = self.weights.model
        return not (llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model)
                    or llama_cpp.llama_model_n_swa(model) > 0)

    # --- what a request makes of the model ------------------------------------------------

    def context_params(self, n_ctx: int, sequences: int = 1) -> llama_cpp.llama_context_params:
        """Parameters of a llama.cpp context over these weights: ``sequences`` KV cache streams of
        ``n_ctx`` tokens each (the values ``llama_cpp.Llama`` uses for the rest, so a sequence
        computes what a ``Llama`` of that size computes)."""
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = sequences * n_ctx, N_BATCH, N_BATCH
        params.n_threads = params.n_threads_batch = self.n_threads
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.yarn_attn_factor, params.yarn_beta_fast, params.yarn_beta_slow = 1.0, 32.0, 1.0
        params.no_perf = False
        params.n_seq_max, params.kv_unified = sequences, False  # a stream per sequence: no sharing of cells
        return params

    def sampler(self, settings: dict[str, Any], grammar: LlamaGrammar | None) -> LlamaSampler:
        """The sampling chain for a request's options, as ``llama_cpp.Llama`` builds it: repetition
        penalties over the last ``repeat_last_n`` tokens, the grammar, then the greedy choice
        (temperature 0) or top-k, typical, top-p, min-p, temperature and a draw with the seed.
        ``settings["banned_tokens"]`` (set by the engine for ``tool_choice: "none"``) get a
        logit of minus infinity first: they are never chosen."""
        seed = settings.get("seed", llama_cpp.LLAMA_DEFAULT_SEED)  # none: a fresh random one
        sampler = LlamaSampler()
        sampler.add_penalties(n_vocab=self.n_vocab, penalty_last_n=settings["repeat_last_n"],
                              penalty_repeat=settings["repeat_penalty"],
                              penalty_freq=settings["frequency_penalty"],
                              penalty_present=settings["presence_penalty"])
        if banned := settings.get("banned_tokens"):
            sampler.add_logit_bias(self.n_vocab, {token: float("-inf") for token in banned})
        if grammar is not None:
            sampler.add_grammar(self.weights, grammar)
        temperature = settings["temperature"]
        if temperature < 0:
            sampler.add_dist(seed)
        elif temperature == 0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(settings["top_k"])
            sampler.add_typical(1.0, 1)
            sampler.add_top_p(settings["top_p"], 1)
            sampler.add_min_p(settings["min_p"], 1)
            sampler.add_temp(temperature)
            sampler.add_dist(seed)
        return sampler

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
            self.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not compiled:
            raise BadFormat("the format schema could not be turned into a valid llama.cpp grammar "
                            "(regex patterns are the usual cause); drop the pattern and validate it afterwards")
        llama_cpp.llama_sampler_free(compiled)
        return grammar
