"""Several requests at once: one llama.cpp context, a sequence per request, decoded together.

On a CPU most of the time of a generation step goes to reading the model's weights from
memory. ``llama_decode`` can take the next token of several sequences in one batch, and
then reads the weights once for all of them: 3 sequences decoded together cost little more
than one (``course_tools/benchmarks/batched_decoding.py``). This is what Ollama's ``OLLAMA_NUM_PARALLEL``
and llama.cpp's server ``--parallel`` do, and what ``BatchedDecoder`` does with ``parallel``
slots, one sequence each, in one context (``context.py``) with a KV cache stream per sequence.

The price of batching is usually repeatability: llama.cpp picks its matrix kernels by the
number of rows in a batch, and a kernel for 4 rows adds the same numbers in another order
than the one for a single row. At temperature 0 a nearly tied token then goes the other
way, and a request's answer depends on what else was running. So at start-up the decoder
measures it: it decodes one token alone and in batches of 2, 3, ... rows and keeps the
largest batch whose every row gets the same logits, bit for bit, as the row alone
(``rows``: 3 on the course's 2-core machine). It never decodes more rows than that in one
call, and unless told otherwise it has that many slots. On x86 the kernel that changes at 4
rows is the one for llama.cpp's repacked weights (``model.py``); with ``repack=False``
(``--no-repack``) every row is computed alike and 6 of 6 rows measure bit-identical there,
for about 3% more time per token. A request's answer is then the same token for token whether
it ran alone or next to others, and the same as llama-cpp-python's own ``Llama.generate``
gives with the same prompt cache (``tests/server/test_batching.py`` checks both). With more slots
than ``rows`` (``--parallel 4``) a step takes two calls: 4 sequences are decoded as two batches
of 2, which on 2 cores took 80 ms a step where 3 sequences in one batch took 45.

Prompts are evaluated alone (a sequence's chunks never share a batch with another's), through
a ``PromptCache`` (``prompt_cache.py``): its saved prefixes are shared by all sequences, so a
prefix cached by one request is restored into whichever slot the next one gets. What the
cache did for a request's prompt (the tokens restored, the tokens newly saved) goes back to its
thread in the request's ``CacheUse``.

One thread, the decoder, owns the llama.cpp context: it takes the requests handed over into
free slots, evaluates their prompts, and then, step after step, decodes one token for every
busy slot and hands it to the request's queue. Which slots share a step, and how many
requests start, is pure policy (``batch_policy.py``). ``sampled_bytes`` runs on the request's
own thread and reads that queue, so ``Engine.generate`` (``engine.py``) handles stop strings,
budgets and cancellation as for any decoder. How many requests may run or wait is not decided
here: the scheduler (``scheduler.py``) lets at most ``parallel`` in.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from llama_cpp import LlamaGrammar
from llama_cpp._internals import LlamaSampler

from course_lib import config
from course_server.batch_policy import admissible, neighbour_batches, sequences_for
from course_server.context import Context, ContextSequence
from course_server.generation import (
    DEFAULT_PROMPT_CACHE,
    DEFAULT_TIME_BUDGET,
    MAX_AUTO_PARALLEL,
    STALL_SECONDS,
    TOKEN_STALL_SECONDS,
    CacheUse,
    ContextTooLarge,
    TimeBudget,
    TimeBudgetExceeded,
    check_sampling_time,
    past_deadline,
    stalled,
)
from course_server.model import LoadedModel
from course_server.prompt_cache import CHUNK, PromptCache, check_can_be_cut

KEPT_ROWS = "exact-rows.json"  # in the course's cache folder: the rows measured, by what they depend on


def same_arithmetic_rows(context: Context, token: int) -> int:
    """The largest number of rows one ``llama_decode`` may hold while every row gets the logits,
    bit for bit, that it gets in a batch of its own (at most the context's sequences).

    Each sequence holds ``token``; then the same next token is decoded for sequence 0 alone
    and for sequences 0..n-1 together, for n = 2, 3, ...
    """
    sequences = context.sequences
    for sequence in sequences:
        sequence.forget()
        sequence.evaluate([token])
    context.decode([(token, 1, 0)])
    alone = context.logits(0)
    rows = 1
    for n in range(2, len(sequences) + 1):
        for sequence in sequences[:n]:
            sequence.cut(1)
        context.decode([(token, 1, seq) for seq in range(n)])
        if not all(np.array_equal(context.logits(row), alone) for row in range(n)):
            break
        rows = n
    for sequence in sequences:
        sequence.forget()
    return rows


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """This CPU's model name and feature flags (Linux), else what ``platform`` says of it."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    return "\n".join(dict.fromkeys(line for line in lines if line.split(":")[0].strip() in wanted))


def rows_key(model: LoadedModel, sequences: int) -> str:
    """What ``same_arithmetic_rows`` depends on, as one hash: the model file, the compiled
    llama.cpp, this CPU, the threads, the weights' layout (``repack``) and the probe's size.
    Another file, build, CPU or setting is another key, so it is measured again."""
    import llama_cpp

    library = Path(llama_cpp.__file__).parent / "lib"
    built = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in library.glob("*") if p.is_file())
    weights = model.path.stat()
    facts = [model.path.name, weights.st_size, weights.st_mtime_ns, llama_cpp.__version__, built,
             cpu_description(), model.n_threads, model.repack, sequences, CHUNK]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def kept_rows(model: LoadedModel, sequences: int, measure: Callable[[], int]) -> tuple[int, bool]:
    """``same_arithmetic_rows`` for this model, build and machine: measured once (about 2 s at
    every start before, 4 s on a busy machine) and kept in the course's cache folder, then read
    back at the next start. Returns the rows and whether they were measured now."""
    path = config.cache_dir() / KEPT_ROWS
    key = rows_key(model, sequences)
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), int) and known[key] >= 1:
        return known[key], False
    rows = measure()
    known = {**(known if isinstance(known, dict) else {}), key: rows}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f"{path.name}.{os.getpid()}")
        scratch.write_text(json.dumps(known, indent=1))
        scratch.replace(path)  # two servers starting at once each write a whole file
    except OSError:
        pass  # a read-only cache: measured again next time
    return rows, True


@dataclass
class Job:
    """One request's generation, between its thread and the decoder."""

    tokens: list[int]
    settings: dict[str, Any]
    grammar: LlamaGrammar | None
    n_ctx: int
    budget: int  # tokens to generate at most
    cancel: threading.Event | None  # set when the client has gone
    cache_use: CacheUse = field(default_factory=CacheUse)  # filled in once the prompt is prepared
    out: queue.SimpleQueue[bytes | BaseException | None] = field(default_factory=queue.SimpleQueue)
    done: threading.Event = field(default_factory=threading.Event)  # the request wants no more
    sampling: float = 0.0  # seconds its tokens' sampling has taken so far

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    @property
    def deadline(self) -> float | None:
        return self.settings.get("deadline")

    @property
    def time_budget(self) -> TimeBudget:
        return self.settings.get("time_budget") or DEFAULT_TIME_BUDGET

    def over_budget(self, spent: float) -> TimeBudgetExceeded | None:
        """The error that ends this job after a token whose sampling took ``spent`` seconds, if any:
        one token too slow, all its tokens too slow, or its deadline passed."""
        self.sampling += spent
        try:
            check_sampling_time(spent, self.sampling, self.time_budget)
        except TimeBudgetExceeded as error:
            return error
        return past_deadline(self.deadline, self.time_budget)


@dataclass
class Slot:
    """A sequence of the context and the job it serves."""

    sequence: ContextSequence
    job: Job | None = None
    sampler: LlamaSampler | None = None
    next_token: int = -1  # the token to evaluate next: the prompt's last, then each sampled one
    produced: int = 0


class BatchedDecoder:
    """A ``Decoder`` that serves up to ``parallel`` requests at once, decoding them together.

    ``n_ctx`` is each sequence's context at start; a request may ask for up to ``max_n_ctx``
    (then, once nothing runs, the context is made anew: ``batch_policy.sequences_for``).
    """

    def __init__(self, model: LoadedModel, n_ctx: int, max_n_ctx: int, prompt_cache: int = DEFAULT_PROMPT_CACHE,
                 parallel: int | None = None, batch_rows: int | None = None) -> None:
        if any(value is not None and value < 1 for value in (parallel, batch_rows)) or prompt_cache < 1:
            raise ValueError("a batched decoder needs at least one slot, one row and one prompt-cache slot")
        check_can_be_cut(model)
        self.model, self.default_n_ctx, self.max_n_ctx = model, n_ctx, max_n_ctx
        self.n_ctx = n_ctx
        self.cache = PromptCache(prompt_cache)
        self.busy_since: float | None = None  # when the step llama.cpp is in began (None: idle)
        self.step_allowance = STALL_SECONDS  # how long the current step may take (a prompt, or tokens)
        self.load_duration = 0  # ns the last new context took
        # Requests handed over by sampled_bytes, not yet in a slot. This is no line: the scheduler
        # lets at most ``parallel`` requests in at once; they wait here only for a slot to free up
        # between two steps, or for the running ones to end before another context size is made.
        self.incoming: deque[Job] = deque()
        self.wake = threading.Condition()
        self.forget_requested: threading.Event | None = None
        started: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._decoder, args=(parallel, batch_rows, started), name="decoder",
                                       daemon=True)
        self.thread.start()
        if error := started.get():
            raise error

    def fit_context(self, n_ctx: int) -> int:
        return 0  # the decoder thread makes the context between requests (_resize_if_needed)

    def healthy(self) -> bool:
        """Whether the decoder thread still runs and its current step has not taken more than its
        allowance: ``STALL_SECONDS`` for a prompt, ``TOKEN_STALL_SECONDS`` for one token of every
        busy slot (the supervisor asks). A slow token ends its own request long before
        (``TimeBudget``); this catches a step that no budget ends."""
        return self.thread.is_alive() and not stalled(self.busy_since, self.step_allowance)

    def facts(self) -> dict[str, Any]:
        return {"exact_rows": self.exact_rows, "rows": self.rows, "parallel": self.parallel,
                "rows_measured": self.rows_measured}

    def sampled_bytes(self, tokens: list[int], settings: dict[str, Any], grammar: LlamaGrammar | None,
                      n_ctx: int, budget: int, cancel: threading.Event | None = None,
                      cache_use: CacheUse | None = None) -> Iterator[bytes]:
        """Hand the request to the decoder thread and pass on its tokens as they come (the decoder
        thread fills in ``cache_use`` before it hands over the first)."""
        job = Job(tokens, settings, grammar, n_ctx, budget, cancel, CacheUse() if cache_use is None else cache_use)
        with self.wake:
            self.incoming.append(job)
            self.wake.notify()
        try:
            while (item := job.out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.done.set()
            with self.wake:
                self.wake.notify()

    def forget_cache(self) -> None:
        """Forget the saved prompts and the tokens of every sequence no request is using, between
        two steps of the decoder thread (the scheduler calls it once no request runs)."""
        with self.wake:
            done = self.forget_requested = self.forget_requested or threading.Event()  # callers share one
            self.wake.notify()
        done.wait()

    # The decoder thread: everything below runs on it and only there. Every llama_decode of
    # this decoder is made from this one thread: llama.cpp's CPU threads (OpenMP) spin between
    # two steps only while no more of them exist than cores, and each calling thread gets its
    # own; decoding from a second thread made every step about 60% slower on 2 cores.

    def _decoder(self, parallel: int | None, batch_rows: int | None,
                 started: queue.SimpleQueue[BaseException | None]) -> None:
        try:
            self._measure_and_allocate(parallel, batch_rows)
        except BaseException as error:
            started.put(error)
            return
        started.put(None)
        while True:
            try:
                with self.wake:
                    self.wake.wait_for(self._has_work)
                    self._free_finished()
                    self._forget_if_asked()
                    self._resize_if_needed()
                    admitted = self._admit()
                for slot in admitted:
                    self.busy_since, self.step_allowance = time.monotonic(), STALL_SECONDS
                    self._start(slot)
                self.busy_since, self.step_allowance = time.monotonic(), TOKEN_STALL_SECONDS
                self._step()
            except Exception as error:  # a bug here must not leave requests waiting forever
                self._fail_all(error)
            finally:
                self.busy_since = None

    def _fail_all(self, error: Exception) -> None:
        """Hand ``error`` to every running and waiting request and start again from empty sequences."""
        with self.wake:
            waiting = list(self.incoming)
            self.incoming.clear()
        for job in waiting:
            job.out.put(error)
        for slot in self.slots:
            self._fail(slot, error)

    def _fail(self, slot: Slot, error: Exception) -> None:
        """Hand ``error`` to the slot's request (if any), forget the sequence's tokens, free the slot."""
        if slot.job:
            slot.job.out.put(error)
        slot.sequence.forget()
        self._end(slot)

    def _measure_and_allocate(self, parallel: int | None, batch_rows: int | None) -> None:
        """Measure ``exact_rows`` on a small context (or read what was measured at an earlier start
        on this machine, ``kept_rows``); then make the real one, with ``parallel`` slots.

        ``rows``, the most rows per ``llama_decode``, is ``exact_rows`` unless ``batch_rows`` asks
        for more (faster, but then an answer depends on what else was decoded with it). Without
        a number, the slots are ``rows`` (at most ``MAX_AUTO_PARALLEL``): every step is then one
        ``llama_decode``. On 2 cores 3 sequences took 45 ms a step in one batch, and 4 sequences
        80 ms in two batches of 2, so a fourth slot would slow the other three down.
        """
        sequences = max(parallel or 0, MAX_AUTO_PARALLEL)

        def measure() -> int:
            probe = Context(self.model, sequences, CHUNK)
            try:
                return same_arithmetic_rows(probe, self.model.tokenize("Hello")[0])
            finally:
                probe.close()

        self.exact_rows, self.rows_measured = kept_rows(self.model, sequences, measure)
        self.rows = batch_rows or self.exact_rows
        self.parallel = parallel or min(self.rows, MAX_AUTO_PARALLEL)
        self.context = Context(self.model, self.parallel, self.n_ctx)
        self.slots = [Slot(sequence) for sequence in self.context.sequences]

    def _busy(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.job is not None]

    def _has_work(self) -> bool:
        return bool(self.incoming or self._busy() or self.forget_requested)

    def _free_finished(self) -> None:
        """Free the slots of requests that want no more, and drop waiting ones whose client left."""
        for slot in self._busy():
            if slot.job and (slot.job.done.is_set() or slot.job.cancelled):
                self._end(slot)
        for job in [job for job in self.incoming if job.cancelled]:
            self.incoming.remove(job)
            job.out.put(None)
        for job in list(self.incoming):
            if late := past_deadline(job.deadline, job.time_budget):
                self.incoming.remove(job)
                job.out.put(late)

    def _forget_if_asked(self) -> None:
        """Forget the saved prompts and every free sequence's tokens (a sequence still serving a
        request keeps them: the scheduler asks only once none does)."""
        if self.forget_requested:
            self.cache.clear()
            for slot in self.slots:
                if slot.job is None:
                    slot.sequence.forget()
            self.forget_requested.set()
            self.forget_requested = None

    def _resize_if_needed(self) -> None:
        """When the next request wants another context size and nothing runs, make that context.

        The new context is made before the old one is let go: if that fails, the request gets
        the error and the server keeps serving with the context it had.
        """
        if not self.incoming or self.incoming[0].n_ctx == self.n_ctx or self._busy():
            return
        job = self.incoming[0]
        started = time.perf_counter_ns()
        try:
            context = Context(self.model, self._sequences_for(job.n_ctx), job.n_ctx)
        except Exception as error:  # llama.cpp reports a failed allocation as ValueError or RuntimeError
            self.incoming.popleft()
            job.out.put(ContextTooLarge(f"could not make a context of {job.n_ctx} tokens ({error}); "
                                        f"the server keeps its context of {self.n_ctx}"))
            return
        self.context.close()
        self.context, self.n_ctx = context, job.n_ctx
        self.slots = [Slot(sequence) for sequence in context.sequences]
        self.cache.clear()
        self.load_duration = time.perf_counter_ns() - started

    def _sequences_for(self, n_ctx: int) -> int:
        return sequences_for(n_ctx, self.parallel, self.max_n_ctx, self.default_n_ctx)

    def _admit(self) -> list[Slot]:
        """Move waiting requests of the current context size into free slots, first come first served."""
        free = [slot for slot in self.slots if slot.job is None]
        count = admissible(len(free), [job.n_ctx for job in self.incoming], self.n_ctx)
        admitted = free[:count]  # the lowest free sequences, so busy ones are mostly neighbours (see _batches)
        for slot in admitted:
            slot.job, slot.produced = self.incoming.popleft(), 0
        return admitted

    def _start(self, slot: Slot) -> None:
        """Evaluate the prompt but its last token (alone, through the prompt cache); make the sampler."""
        job = slot.job
        assert job is not None
        try:
            self.cache.prepare(slot.sequence, job.tokens)
            job.cache_use.read, job.cache_use.written = self.cache.reused, self.cache.written
            slot.sampler = self.model.sampler(job.settings, job.grammar)
            slot.next_token = job.tokens[-1]
        except Exception as error:
            job.out.put(error)
            self._end(slot)

    def _step(self) -> None:
        """Decode one token for every busy slot, at most ``rows`` slots per ``llama_decode``.

        The tokens are handed to their requests after the last batch of the step: a request's
        thread that wakes up while llama.cpp computes takes a core from it (2 cores here).
        """
        sampled: list[tuple[Slot, int, float]] = []
        for group in self._batches():
            try:
                self.context.decode([(slot.next_token, slot.sequence.n_tokens, slot.sequence.seq)
                                     for slot in group])
            except Exception as error:
                for slot in group:
                    self._fail(slot, error)
                continue
            for row, slot in enumerate(group):
                assert slot.sampler is not None
                slot.sequence.n_tokens += 1
                began = time.monotonic()  # a grammar makes this slow: each request pays for its own
                token = slot.sampler.sample(self.context.ctx, row)
                sampled.append((slot, token, time.monotonic() - began))
        for slot, token, spent in sampled:
            self._hand_out(slot, token, spent)

    def _batches(self) -> list[list[Slot]]:
        """The busy slots in batches of at most ``rows`` neighbouring sequences.

        A batch of sequences 0 and 2 took 68 ms a step on 2 cores where 0 and 1 took 39 ms:
        llama.cpp splits a batch whose sequences are not neighbours into smaller ones.
        """
        ready = [slot for slot in self.slots if slot.job is not None and slot.next_token >= 0]
        by_seq = {slot.sequence.seq: slot for slot in ready}
        return [[by_seq[seq] for seq in batch] for batch in neighbour_batches(sorted(by_seq), self.rows)]

    def _hand_out(self, slot: Slot, token: int, spent: float = 0.0) -> None:
        """Give the slot's request its next token, or end it (end of turn, budget, request gone,
        its time budget spent: then with ``TimeBudgetExceeded``)."""
        job = slot.job
        assert job is not None
        if over := job.over_budget(spent):
            self._fail(slot, over)
            return
        if self.model.ends_turn(token):
            self._end(slot)
            return
        job.out.put(self.model.token_bytes(token))
        slot.produced += 1
        slot.next_token = token
        if slot.produced >= job.budget or job.done.is_set() or job.cancelled:
            self._end(slot)

    def _end(self, slot: Slot) -> None:
        """Free the slot and tell its request there is no more."""
        if slot.job is not None:
            slot.job.out.put(None)
        if slot.sampler is not None:
            slot.sampler.close()
        slot.job, slot.sampler, slot.next_token = None, None, -1
