"""Which requests' tokens are decoded together: the batched decoder's policy, as pure code.

``BatchedDecoder`` (``batching.py``) owns a llama.cpp context; the decisions it makes about
its slots need no model and are tested without one (``tests/server/test_batch_policy.py``):

- which busy sequences share a ``llama_decode`` (``neighbour_batches``): llama.cpp splits a
  batch whose sequences are not neighbours, and more rows than ``rows`` would change the
  arithmetic of each row;
- how many waiting requests start now (``admissible``): first come first served, only those of
  the context size the decoder has;
- how many sequences a context gets when a request asks for a larger ``num_ctx``
  (``sequences_for``), so that memory stays bounded.
"""

from __future__ import annotations


def neighbour_batches(sequences: list[int], rows: int) -> list[list[int]]:
    """The busy ``sequences`` (ascending) cut into runs of neighbours (3, 4, 5), then each run into
    equal parts of at most ``rows``: the batches of one decoding step (``BatchedDecoder._batches``).

    >>> neighbour_batches([0, 1, 2, 3, 6], rows=3)  # 4 neighbours are two batches of 2, not 3 and 1
    [[0, 1], [2, 3], [6]]
    """
    runs: list[list[int]] = []
    for seq in sequences:
        if runs and runs[-1][-1] == seq - 1:
            runs[-1].append(seq)
        else:
            runs.append([seq])
    batches = []
    for run in runs:
        parts = -(-len(run) // rows)
        batches += [run[len(run) * i // parts:len(run) * (i + 1) // parts] for i in range(parts)]
    return batches


def sequences_for(n_ctx: int, parallel: int, max_n_ctx: int, default_n_ctx: int) -> int:
    """How many sequences a context of ``n_ctx`` tokens each gets: every slot (``parallel``), unless
    that would hold more tokens than the larger of ``max_n_ctx`` and the slots at the default size.
    A request for the model's whole length then gets one sequence, not one per slot: the memory
    stays that of one such context, as in the one-at-a-time engine.

    >>> sequences_for(4096, parallel=3, max_n_ctx=32768, default_n_ctx=4096), sequences_for(32768, 3, 32768, 4096)
    (3, 1)
    """
    budget = max(max_n_ctx, parallel * default_n_ctx)
    return max(1, min(parallel, budget // n_ctx))


def admissible(free: int, waiting: list[int], n_ctx: int) -> int:
    """How many of the ``waiting`` requests (their ``num_ctx``, first come first) start now in
    ``free`` slots of a context of ``n_ctx`` tokens: those at the head of the line that want this
    context size (the others wait until the running ones end and a context of theirs is made).

    >>> admissible(3, [4096, 4096, 8192, 4096], n_ctx=4096)  # the 8192 waits, so does the last
    2
    """
    count = 0
    while count < min(free, len(waiting)) and waiting[count] == n_ctx:
        count += 1
    return count
