"""The engine without the model: bytes to characters, stop strings, the loop, and what
``Engine.generate`` asks of its model and decoder.

``Engine.generate`` has a decoder sample tokens with llama.cpp and hands their bytes to
``generated_text``; everything around the sampling is tested here, in milliseconds, with a
scripted model and decoder in place of llama.cpp.
"""

import codecs
import dataclasses
import random
import threading
from pathlib import Path

import pytest

from course_lib.chat_template import Prompt
from course_server.engine import ContextTooLarge, Engine, GenerationStats, PromptTooLong
from course_server.generation import StopScanner, TokenText, _first_stop, _partial_stop_length, generated_text
from course_server.wire import Options


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


# --- Engine: a model and a decoder composed ------------------------------------------------

class WordModel:
    """A ``Model`` whose tokens are words: enough for what ``Engine.generate`` asks of a model."""

    name, template, bos_token, eos_token, markers, repack = "words", "", "", "", {}, True
    path = Path("words.gguf")
    metadata: dict[str, str] = {}
    context_length = 64
    load_duration = 7
    architecture = "words"

    def tokenize(self, prompt):
        return list(range(len(str(prompt).split())))

    def grammar_for(self, format):
        return None if format is None else ("grammar", format)

    def call_opening_tokens(self):
        return [99]


class ScriptedDecoder:
    """A ``Decoder`` that yields scripted tokens and records what it was asked."""

    parallel, busy_since, n_ctx = 1, None, 16

    def __init__(self, tokens: list[bytes], cache_read: int = 0, cache_written: int = 0) -> None:
        self.tokens, self.calls, self.fitted, self.forgotten = tokens, [], [], 0
        self.settings: list[dict] = []
        self.cache_read, self.cache_written = cache_read, cache_written  # what it says its cache did

    def fit_context(self, n_ctx):
        self.fitted.append(n_ctx)
        made, self.n_ctx = n_ctx != self.n_ctx, n_ctx
        return 1000 if made else 0

    def sampled_bytes(self, tokens, settings, grammar, n_ctx, budget, cancel, cache_use):
        self.calls.append((tokens, grammar, n_ctx, budget))
        self.settings.append(settings)
        cache_use.read, cache_use.written = self.cache_read, self.cache_written
        yield from self.tokens

    def forget_cache(self):
        self.forgotten += 1

    def healthy(self):
        return True

    def facts(self):
        return {"rows": 1}


def test_the_engine_gives_the_decoder_the_prompt_the_grammar_and_the_room_left():
    decoder = ScriptedDecoder([b"one ", b"two ", b"three"])
    engine = Engine(WordModel(), decoder, n_ctx=16)
    pieces, stats = drain(engine.generate("a b c d", Options(num_predict=100, stop=["three"]), "json"))
    assert pieces[:-1] == ["one ", "two "] and stats is None and isinstance(pieces[-1], GenerationStats)
    assert decoder.calls == [([0, 1, 2, 3], ("grammar", "json"), 16, 12)]  # 16 - 4 prompt tokens
    assert pieces[-1].prompt_eval_count == 4 and pieces[-1].eval_count == 3 and pieces[-1].load_duration == 0


def test_the_stats_carry_what_the_decoder_says_its_cache_did():
    """The cached share of the prompt comes from the decoder, the one part that knows it; with
    nothing cached it is 0."""
    cached = drain(Engine(WordModel(), ScriptedDecoder([b"x"], 3, 1), n_ctx=16).generate("a b c d e"))[0][-1]
    assert (cached.prompt_eval_count, cached.cache_read_tokens, cached.cache_write_tokens) == (5, 3, 1)
    cold = drain(Engine(WordModel(), ScriptedDecoder([b"x"]), n_ctx=16).generate("a b c d e"))[0][-1]
    assert (cold.cache_read_tokens, cold.cache_write_tokens) == (0, 0)


def test_a_request_for_another_context_size_asks_the_decoder_for_it_and_counts_the_time():
    decoder = ScriptedDecoder([b"x"])
    engine = Engine(WordModel(), decoder, n_ctx=16, max_n_ctx=32)
    pieces, _ = drain(engine.generate("a", Options(num_ctx=32, num_predict=5)))
    assert decoder.fitted == [32] and decoder.calls[0][2:] == (32, 5) and pieces[-1].load_duration == 1000
    with pytest.raises(ContextTooLarge, match="at most 32"):
        next(engine.generate("a", Options(num_ctx=64)))
    assert engine.max_n_ctx == 32 and Engine(WordModel(), decoder, n_ctx=16).max_n_ctx == 64  # the model's length


def test_a_prompt_that_fills_the_context_is_refused_before_the_decoder_runs():
    decoder = ScriptedDecoder([b"x"])
    with pytest.raises(PromptTooLong, match="16 tokens but num_ctx is 16"):
        next(Engine(WordModel(), decoder, n_ctx=16).generate(" ".join("w" * 16)))
    assert decoder.calls == []


def test_the_engine_forwards_forgetting_health_and_facts_to_its_parts():
    decoder = ScriptedDecoder([])
    engine = Engine(WordModel(), decoder)
    engine.forget_cache()
    assert decoder.forgotten == 1 and engine.healthy() and engine.parallel == 1
    assert engine.facts() == {"load_duration": 7, "repack": True, "rows": 1}


def test_a_prompt_that_allows_no_call_has_the_models_call_token_banned():
    """``tool_choice: "none"`` reaches the engine as a ``Prompt`` with ``calls_allowed`` False:
    the decoder's sampler is then given the model's call-opening token to ban, and only then."""
    decoder = ScriptedDecoder([b"x"])
    engine = Engine(WordModel(), decoder, n_ctx=16)
    shown = Prompt("tools: now ; user: hi", ())
    drain(engine.generate(shown))
    drain(engine.generate(dataclasses.replace(shown, calls_allowed=False)))
    drain(engine.generate("a raw prompt"))
    assert [settings.get("banned_tokens") for settings in decoder.settings] == [None, [99], None]
