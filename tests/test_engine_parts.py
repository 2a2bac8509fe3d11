"""The engine's text handling without the model: bytes to characters, stop strings, the loop.

``Engine.generate`` samples tokens with llama.cpp and hands their bytes to
``generated_text``; everything after the sampling is tested here, in milliseconds.
"""

import codecs
import random
import threading

import pytest

from course_lib.server.generation import StopScanner, TokenText, _first_stop, _partial_stop_length, generated_text


def drain(generator):
    """All pieces a generator yields, and the value it returns."""
    pieces = []
    while True:
        try:
            pieces.append(next(generator))
        except StopIteration as done:
            return pieces, done.value


# --- StopScanner: text in, text that cannot be part of a stop string out ------------------

def test_without_stop_strings_everything_is_released_at_once():
    scanner = StopScanner([])
    assert [scanner.feed(piece) for piece in ["a", "b c", ""]] == ["a", "b c", ""]
    assert scanner.finish() == "" and not scanner.stopped


def test_a_stop_string_spanning_pieces_is_held_then_dropped():
    scanner = StopScanner(["\n\nUser:"])
    assert scanner.feed("Answer: 4.\n") == "Answer: 4."
    assert scanner.feed("\nUs") == ""
    assert scanner.feed("er: and more") == "" and scanner.stopped
    assert scanner.feed("even more") == "" and scanner.finish() == ""


def test_a_stop_string_at_the_very_start_leaves_nothing():
    scanner = StopScanner(["END"])
    assert scanner.feed("END of story") == "" and scanner.stopped


def test_text_before_a_stop_in_the_same_piece_is_released():
    scanner = StopScanner(["5"])
    assert scanner.feed("1, 2, 3, 4, 5, 6") == "1, 2, 3, 4, " and scanner.stopped


def test_a_false_alarm_is_released_when_the_next_piece_decides():
    scanner = StopScanner(["END"])
    assert scanner.feed("The E") == "The "
    assert scanner.feed("xit") == "Exit" and not scanner.stopped


def test_held_text_is_released_at_the_end():
    scanner = StopScanner(["END"])
    assert scanner.feed("Almost EN") == "Almost "
    assert scanner.finish() == "EN" and not scanner.stopped


def test_of_several_stop_strings_the_earliest_wins():
    scanner = StopScanner(["c", "ab"])
    assert scanner.feed("xabc") == "x" and scanner.stopped


def test_the_longest_possible_beginning_of_any_stop_string_is_held():
    scanner = StopScanner(["STOP", "\n\n"])
    assert scanner.feed("a\n") == "a"  # "\n" may begin "\n\n"
    assert scanner.feed("ST") == "\n"  # "\nST" is no beginning of "\n\n", but "ST" may begin "STOP"
    assert scanner.feed("OP") == "" and scanner.stopped


def test_a_stop_string_that_repeats_its_own_start():
    scanner = StopScanner(["aab"])
    assert [scanner.feed(piece) for piece in "aaab"] == ["", "", "a", ""] and scanner.stopped


# --- TokenText: token bytes in, whole characters out ---------------------------------------

@pytest.mark.parametrize("character", ["é", "€", "🍵"])  # two, three and four bytes in UTF-8
def test_a_character_split_over_tokens_arrives_whole(character):
    text = TokenText([])
    data = character.encode()
    assert [text.feed(data[i:i + 1]) for i in range(len(data))] == [""] * (len(data) - 1) + [character]


def test_bytes_left_over_at_the_end_become_a_replacement_character():
    text = TokenText([])
    assert text.feed(b"tea \xf0\x9f") == "tea "
    assert text.finish() == "\ufffd"


def test_an_invalid_byte_is_replaced_not_an_error():
    assert TokenText([]).feed(b"a\xffb") == "a\ufffdb"


def test_a_stop_string_with_a_split_character():
    text = TokenText(["é"])
    assert text.feed(b"caf\xc3") == "caf"
    assert text.feed(b"\xa9 au lait") == "" and text.stopped


def test_after_a_stop_nothing_is_flushed():
    text = TokenText(["END"])
    assert text.feed(b"ok END \xc3") == "ok "
    assert text.finish() == "", "no replacement character for the bytes after the stop"


# --- generated_text: the loop, and the four ways it ends -----------------------------------

def test_the_tokens_run_out_when_the_model_ends_its_turn():
    pieces, ending = drain(generated_text([b"Hi", b" there"], [], budget=10))
    assert pieces == ["Hi", " there"]
    assert (ending.done_reason, ending.eval_count) == ("stop", 2) and ending.first_token_at is not None


def test_the_budget_ends_it_with_length():
    pieces, ending = drain(generated_text([b"a", b"b", b"c", b"d"], [], budget=2))
    assert pieces == ["a", "b"] and (ending.done_reason, ending.eval_count) == ("length", 2)


def test_a_stop_string_ends_it_even_on_the_last_token_of_the_budget():
    pieces, ending = drain(generated_text([b"4", b",", b" 5"], ["5"], budget=3))
    assert pieces == ["4", ",", " "] and (ending.done_reason, ending.eval_count) == ("stop", 3)


def test_a_held_beginning_of_a_stop_string_is_sent_when_the_tokens_run_out():
    pieces, _ = drain(generated_text([b"1, ", b"2\n"], ["\n\n"], budget=10))
    assert pieces == ["1, ", "2", "\n"]


def test_a_cancelled_generation_uses_no_more_tokens():
    cancel = threading.Event()
    cancel.set()
    pieces, ending = drain(generated_text([b"a", b"b"], [], budget=10, cancel=cancel))
    assert pieces == [] and (ending.done_reason, ending.eval_count) == ("stop", 0)


def test_cancelling_midway_stops_at_the_next_token():
    cancel = threading.Event()
    stream = generated_text([b"a", b"b", b"c"], [], budget=10, cancel=cancel)
    assert next(stream) == "a"
    cancel.set()
    pieces, ending = drain(stream)
    assert pieces == [] and ending.eval_count == 1


def test_no_tokens_at_all():
    pieces, ending = drain(generated_text([], ["x"], budget=10))
    assert pieces == [] and ending.eval_count == 0 and ending.first_token_at is None


def the_loop_before_the_split(token_bytes, stops, budget):
    """``Engine.generate``'s text handling as it was in one loop, to compare with."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, sent, count, done_reason, pieces = "", 0, 0, "stop", []
    for data in token_bytes:
        count += 1
        text += decoder.decode(data)
        cut = _first_stop(text, stops)
        if cut is not None:
            text, decoder = text[:cut], None
            break
        safe = len(text) - _partial_stop_length(text, stops)
        if safe > sent:
            pieces.append(text[sent:safe])
            sent = safe
        if count >= budget:
            done_reason = "length"
            break
    if decoder is not None:
        text += decoder.decode(b"", final=True)
    if len(text) > sent:
        pieces.append(text[sent:])
    return pieces, done_reason, count


def test_the_parts_do_what_the_single_loop_did():
    rng = random.Random(16)
    for _ in range(3000):
        data = "".join(rng.choice("ab é€🍵\n") for _ in range(rng.randint(0, 12))).encode()
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 6)))) if data else []
        tokens = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])] if data else []
        stops = ["".join(rng.choice("ab é\n") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 3))]
        budget = rng.randint(1, 8)
        pieces, ending = drain(generated_text(tokens, stops, budget))
        assert (pieces, ending.done_reason, ending.eval_count) == the_loop_before_the_split(tokens, stops, budget), (
            tokens, stops, budget)
