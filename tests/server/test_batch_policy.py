"""The batched decoder's slot and batch policy, without the model (``server/batch_policy.py``)."""

import pytest

from course_server.batch_policy import admissible, neighbour_batches, sequences_for


@pytest.mark.parametrize("sequences, rows, batches", [
    ([], 3, []),
    ([0], 3, [[0]]),
    ([0, 1, 2], 3, [[0, 1, 2]]),
    ([0, 1, 2, 3], 3, [[0, 1], [2, 3]]),  # equal parts: never 3 and 1
    ([0, 2], 3, [[0], [2]]),  # not neighbours: llama.cpp would split the batch anyway
    ([0, 1, 3, 4, 5], 2, [[0, 1], [3], [4, 5]]),
    ([0, 1, 2, 3, 4, 5, 6], 3, [[0, 1], [2, 3], [4, 5, 6]]),
    ([1, 2, 3], 1, [[1], [2], [3]]),
])
def test_busy_sequences_are_decoded_in_runs_of_neighbours_of_at_most_rows(sequences, rows, batches):
    found = neighbour_batches(sequences, rows)
    assert found == batches
    assert sorted(seq for batch in found for seq in batch) == sequences  # every sequence once
    assert all(len(batch) <= rows for batch in found)


@pytest.mark.parametrize("n_ctx, expected", [(2048, 3), (4096, 3), (8192, 3), (16384, 2), (32768, 1), (65536, 1)])
def test_a_larger_context_gets_fewer_sequences_so_memory_stays_bounded(n_ctx, expected):
    assert sequences_for(n_ctx, parallel=3, max_n_ctx=32768, default_n_ctx=4096) == expected
    assert sequences_for(n_ctx, 3, 32768, 4096) * n_ctx <= max(32768, 3 * 4096) or expected == 1


@pytest.mark.parametrize("free, waiting, expected", [
    (3, [], 0),
    (3, [4096], 1),
    (2, [4096, 4096, 4096], 2),  # no more than the free slots
    (3, [4096, 8192, 4096], 1),  # first come first served: the 8192 blocks the line
    (3, [8192, 4096], 0),  # the head wants another size: the decoder resizes once idle
    (0, [4096], 0),
])
def test_requests_start_in_order_and_only_at_the_decoders_context_size(free, waiting, expected):
    assert admissible(free, waiting, 4096) == expected
