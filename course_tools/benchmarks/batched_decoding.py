"""Several sequences decoded in one batch vs the same sequences one after another, in llama.cpp.

    python -m course_tools benchmark batched_decoding [--sequences 4] [--tokens 128] [--rounds 2]

llama.cpp can decode several sequences in one ``llama_decode`` call: each step reads the
model's weights once for all of them, and on a CPU the weights' trip through memory is most
of a step. This measures what that buys and what it changes, below the server's own
batching (``course_server/batching.py``): the same prompts, each prefilled alone, then
decoded greedily ``--tokens`` steps, once one sequence at a time and once all together
(prefill not timed).

It prints, for each round, the two decoding times, their ratio, and how far each sequence's
batched tokens equal the ones decoded alone: a batch changes the order of llama.cpp's
arithmetic, so a greedy output can change where two tokens are nearly tied, and everything
after that point differs.

Machines are noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama

from course_lib.chat_template import render
from course_server.model import default_threads
from course_server.models import resolve_model
from course_server.prompt_cache import shared_prefix

TOPICS = ["a robot who learns to cook", "a lighthouse keeper", "a cat on a train", "the first snow in Tokyo",
          "a lost umbrella", "a night market", "an old map", "a quiet library"]


class Batch:
    """One llama.cpp context with room for ``sequences`` sequences, and a reusable batch."""

    def __init__(self, llm: Llama, sequences: int, threads: int) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = 4096, 512, 512
        params.n_seq_max, params.n_threads, params.n_threads_batch = sequences, threads, threads
        params.kv_unified = True
        self.ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, sequences)
        self.vocabulary = llama_cpp.llama_vocab_n_tokens(llm._model.vocab)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One ``llama_decode`` of (token, position, sequence, wants logits) entries."""
        self.batch.n_tokens = len(entries)
        for i, (token, position, sequence, logits) in enumerate(entries):
            self.batch.token[i], self.batch.pos[i], self.batch.logits[i] = token, position, logits
            self.batch.n_seq_id[i], self.batch.seq_id[i][0] = 1, sequence
        if llama_cpp.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")

    def greedy(self, index: int) -> int:
        """The most likely next token at entry ``index`` of the last batch."""
        logits = llama_cpp.llama_get_logits_ith(self.ctx, index)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self.vocabulary,))))

    def run(self, prompts: dict[int, list[int]], steps: int) -> tuple[float, dict[int, list[int]]]:
        """Prefill each prompt alone, then decode all of them together; (seconds decoding, tokens)."""
        llama_cpp.llama_memory_clear(self.memory, True)
        following, position = {}, {}
        for sequence, tokens in prompts.items():
            self.decode([(token, i, sequence, i == len(tokens) - 1) for i, token in enumerate(tokens)])
            following[sequence], position[sequence] = self.greedy(len(tokens) - 1), len(tokens)
        generated: dict[int, list[int]] = {sequence: [] for sequence in prompts}
        order = list(prompts)
        started = time.perf_counter()
        for _ in range(steps):
            for sequence in order:
                generated[sequence].append(following[sequence])
            self.decode([(following[s], position[s], s, True) for s in order])
            for i, sequence in enumerate(order):
                following[sequence] = self.greedy(i)
                position[sequence] += 1
        return time.perf_counter() - started, generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=4, help=f"at most {len(TOPICS)}")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    path = resolve_model()[1]
    threads = default_threads()
    llm = Llama(model_path=str(path), n_ctx=512, n_threads=threads, verbose=False)  # the weights and tokenizer
    template = llm.metadata["tokenizer.chat_template"]
    prompts = {n: llm.tokenize(render(template, [{"role": "user", "content": f"Write a short story about {topic}, "
                                                  "about 150 words."}]).encode(), special=True)
               for n, topic in enumerate(TOPICS[:args.sequences])}
    batch = Batch(llm, args.sequences, threads)
    try:
        for _ in range(args.rounds):
            alone_seconds, alone = 0.0, {}
            for sequence, tokens in prompts.items():
                seconds, generated = batch.run({sequence: tokens}, args.tokens)
                alone_seconds += seconds
                alone.update(generated)
            together_seconds, together = batch.run(prompts, args.tokens)
            agree = [shared_prefix(alone[s], together[s]) for s in prompts]
            print(f"{args.sequences} x {args.tokens} tokens ({threads} threads): one after another "
                  f"{alone_seconds:.1f} s, in one batch {together_seconds:.1f} s, ratio "
                  f"{together_seconds / alone_seconds:.2f}; the same tokens in {agree.count(args.tokens)} of "
                  f"{args.sequences} (tokens equal before the first difference: {agree})", flush=True)
    finally:
        batch.close()
