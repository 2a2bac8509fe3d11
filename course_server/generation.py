"""What a generation is, without the model: its options' defaults, its errors, its statistics,
and the loop that turns sampled tokens into text (stop strings, token budgets, UTF-8).

This module imports no llama.cpp, so the server's process (``app.py``), the scheduler and
the tests with a scripted model need no compiled library: only the model's own process
(``model.py`` and the decoders, run by ``supervisor.py``) loads it.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from course_lib.chat_template import Prompt
from course_server.wire import Format, Options

# Ollama's defaults for the options a request leaves out.
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
            "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0, "num_predict": -1}
DEFAULT_NUM_CTX = 4096
DEFAULT_PROMPT_CACHE = 8  # prefixes the batched decoder keeps (``--prompt-cache``); 0: the one-at-a-time decoder
MAX_AUTO_PARALLEL = 4  # slots when none are asked for: at most Ollama's usual OLLAMA_NUM_PARALLEL


@dataclass(frozen=True)
class TimeBudget:
    """How much time one request may take of the decoder every request shares.

    ``request``: seconds from the start of its generation to its last token (a deadline the
    engine checks between tokens). ``token``: seconds the sampling of one token may take (a
    grammar is what makes it slow; without one it takes milliseconds). ``sampling``: seconds its
    tokens' sampling may take in all. A request past any of them ends with ``TimeBudgetExceeded``:
    a 400 in its API's format, or a last error line when its stream had begun. The other
    requests are then delayed by at most one token's budget per step, and one request's budget
    in all.
    """

    request: float = 120.0
    token: float = 2.0
    sampling: float = 20.0


DEFAULT_TIME_BUDGET = TimeBudget()


class TimeBudgetExceeded(ValueError):
    """A request used up its ``TimeBudget``: it was ended so that the others can go on."""


def check_sampling_time(spent: float, total: float, budget: TimeBudget) -> None:
    """Raise ``TimeBudgetExceeded`` if one token's sampling took ``spent`` seconds and more than the
    budget allows, or the request's sampling has taken ``total`` seconds in all and more than that."""
    if spent > budget.token:
        raise TimeBudgetExceeded(f"choosing one token took {spent:.1f} s, more than this server's {budget.token:g} s "
                                 "per token: the format's grammar is too costly; use a simpler schema or pattern "
                                 "and validate the reply afterwards")
    if total > budget.sampling:
        raise TimeBudgetExceeded(f"choosing this request's tokens took {total:.1f} s, more than this server's "
                                 f"{budget.sampling:g} s per request: the format's grammar is too costly; use a "
                                 "simpler schema or pattern and validate the reply afterwards")


def past_deadline(deadline: float | None, budget: TimeBudget) -> TimeBudgetExceeded | None:
    """The error for a request whose ``deadline`` (``time.monotonic()``) has passed, else None."""
    if deadline is None or time.monotonic() <= deadline:
        return None
    return TimeBudgetExceeded(f"this request ran for more than this server's {budget.request:g} s per request "
                              "and was stopped; ask for fewer tokens (num_predict, max_tokens) or split the work")


class PromptTooLong(ValueError):
    """The prompt does not fit the context window (``num_ctx``)."""


class BadFormat(ValueError):
    """A ``format`` schema that cannot be turned into a grammar."""


class ContextTooLarge(ValueError):
    """A ``num_ctx`` above what this server allows, or one that could not be loaded."""


@dataclass
class CacheUse:
    """What a decoder did with its prompt cache for one prompt, filled in by the decoder before
    it samples the first token (``Engine.generate`` hands it one and reads it afterwards).

    ``read + written`` is at most the prompt's length: every other token of the prompt was
    evaluated and not kept for later requests.
    """

    read: int = 0  # the prompt's first tokens, restored from the cache instead of evaluated
    written: int = 0  # tokens of this prompt evaluated now and kept, for a later prompt to read


@dataclass
class GenerationStats:
    """What one generation cost, in the units of Ollama's response fields, and what its prompt
    owed to the cache (each API's usage fields report it: ``app.py`` and ``streams.py``)."""

    done_reason: str  # "stop": the model ended its turn or hit a stop string; "length": a token cap
    prompt_eval_count: int  # tokens in the prompt, the cached ones included
    prompt_eval_duration: int  # ns until the first new token was chosen (prefix reuse makes it short)
    eval_count: int  # tokens generated
    eval_duration: int  # ns spent generating them
    load_duration: int = 0  # ns spent (re)loading the model for this request
    cache_read_tokens: int = 0  # of prompt_eval_count: restored from the cache, not evaluated (CacheUse.read)
    cache_write_tokens: int = 0  # of prompt_eval_count: kept in the cache for later prompts (CacheUse.written)


class ServedModel(Protocol):
    """What the server (``app.py``, ``scheduler.py``) uses of a model.

    ``Engine`` is the real one. Anything else with these members can be served too: the
    tests serve a scripted fake, so the routes, streams and queue are tested in seconds
    without loading the model.
    """

    name: str
    path: Path  # the model file: /api/tags shows its size, date and hash
    parallel: int  # generations it serves at once (``generate`` may be called from that many threads)
    metadata: dict[str, str]  # the GGUF metadata: /api/show lists it
    template: str  # the Jinja chat template

    @property
    def architecture(self) -> str: ...

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
                      ) -> Prompt: ...

    def generate(self, prompt: str | Prompt, options: Options | None = None, format: Format = None,
                 cancel: threading.Event | None = None) -> Iterator[str | GenerationStats]: ...

    def forget_cache(self) -> None: ...


@dataclass
class Ending:
    """How a generation ended, as ``generated_text`` returns it."""

    done_reason: str  # "stop" (end of turn, stop string, cancelled) or "length" (the token budget)
    eval_count: int  # tokens turned into text (a token that ends the turn is not counted)
    first_token_at: int | None  # perf_counter_ns() when the first token arrived; None if none did


def generated_text(token_bytes: Iterable[bytes], stops: Sequence[str], budget: int,
                   cancel: threading.Event | None = None, deadline: float | None = None,
                   time_budget: TimeBudget = DEFAULT_TIME_BUDGET) -> Generator[str, None, Ending]:
    """Turn a model's tokens (their bytes) into the pieces of text to send; return the ``Ending``.

    The loop of a generation, without the model: ``token_bytes`` ends when the model ends
    its turn, and each token is checked for the other ways out, in this order: the request
    was cancelled, a stop string is complete, ``budget`` tokens are spent (``"length"``); and
    past its ``deadline`` (``time.monotonic()``) it raises ``TimeBudgetExceeded``.
    Use it with ``ending = yield from generated_text(...)``: the pieces go on to your caller,
    the ``Ending`` comes back to you.
    """
    text = TokenText(stops)
    count, first_token_at, done_reason = 0, None, "stop"
    for data in token_bytes:
        first_token_at = first_token_at or time.perf_counter_ns()
        if cancel is not None and cancel.is_set():
            break
        if late := past_deadline(deadline, time_budget):
            raise late
        count += 1
        if piece := text.feed(data):
            yield piece
        if text.stopped:
            break
        if count >= budget:
            done_reason = "length"
            break
    if rest := text.finish():
        yield rest
    return Ending(done_reason, count, first_token_at)


class TokenText:
    r"""The text of generated tokens, released as it becomes safe to send.

    A token is a few bytes, not a character: an emoji or an accented letter may be split
    over two tokens, and the first token's bytes alone are not valid UTF-8. An incremental
    decoder keeps such bytes until their character is complete (bytes still left over at
    the very end become U+FFFD, "�"). The characters then pass a ``StopScanner``.

    >>> text = TokenText(stops=[])
    >>> text.feed(b"caf\xc3"), text.feed(b"\xa9!")  # "é" is two bytes in UTF-8: c3 a9
    ('caf', 'é!')
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._scanner = StopScanner(stops)

    @property
    def stopped(self) -> bool:
        """Whether a stop string has been completed (nothing more will be released)."""
        return self._scanner.stopped

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to send (maybe ``""``)."""
        return self._scanner.feed(self._decoder.decode(data))

    def finish(self) -> str:
        """The rest, once no more tokens come: held-back text and any incomplete character."""
        if self.stopped:
            return ""
        return self._scanner.finish() + self._decoder.decode(b"", final=True)


class StopScanner:
    """Holds back generated text that may be the beginning of a stop string.

    A stop string can arrive split over tokens (``"END"`` as ``"E"`` then ``"ND"``), so text
    cannot always be sent the moment it is generated: its end might begin a stop string.
    ``feed`` returns only what is certainly not part of one and keeps the rest until later
    text decides. Once a stop string is complete, the text before it is released, and the
    stop string and everything after it are dropped.

    >>> scanner = StopScanner(["END"])
    >>> scanner.feed("It is 9 E"), scanner.feed("xit")  # the "E" waits: it could begin "END"
    ('It is 9 ', 'Exit')
    >>> scanner.feed(" at E"), scanner.feed("ND of day"), scanner.stopped
    (' at ', '', True)
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.held = ""  # text received but not yet released
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add ``piece``; return the text that is now safe to release (maybe ``""``)."""
        if self.stopped:
            return ""
        text = self.held + piece
        cut = _first_stop(text, self.stops)
        if cut is not None:
            self.held, self.stopped = "", True
            return text[:cut]
        safe = len(text) - _partial_stop_length(text, self.stops)
        self.held = text[safe:]
        return text[:safe]

    def finish(self) -> str:
        """The held-back text, released because no more text is coming."""
        rest, self.held = self.held, ""
        return rest


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the earliest stop string in ``text`` begins, or None."""
    positions = [text.find(stop) for stop in stops if stop and stop in text]
    return min(positions) if positions else None


def _partial_stop_length(text: str, stops: Sequence[str]) -> int:
    """How many characters at the end of ``text`` could be the start of a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


STALL_SECONDS = 300.0  # one step of llama.cpp that takes longer is stuck (a 32k-token prompt takes about 2 minutes)
TOKEN_STALL_SECONDS = 30.0  # one token step (every busy slot's next token) that takes longer is stuck


def stalled(busy_since: float | None, allowance: float = STALL_SECONDS) -> bool:
    """Whether a step of llama.cpp that began at ``busy_since`` (``time.monotonic()``; None: no
    step runs) has taken more than ``allowance`` seconds: ``STALL_SECONDS`` for a prompt,
    ``TOKEN_STALL_SECONDS`` for a step that only chooses tokens. A grammar can make a token cost
    minutes; a request's own time budget (``TimeBudget``) stops it first, and this is the last
    line: the supervisor's liveness check asks ``healthy()`` and restarts a stalled model."""
    return busy_since is not None and time.monotonic() - busy_since >= allowance
