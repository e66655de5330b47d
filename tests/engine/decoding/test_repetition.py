"""The repetition stop: which token sequences count as a loop, and that a greedy reply stops at the same token
in speculative and plain AR decoding."""
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import DraftModelDrafter
from engine.decoding.repetition import LONGEST_SPAN, REPEATS, SHORTEST_LOOP, is_pause, read_for_loops, repeating
from engine.events import DecodeSettings
from tests.tiny import tiny_model

LINE = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]  # a 12-token line


def test_a_line_said_four_times_is_a_loop_and_three_times_is_not():
    opening = [1, 2, 3, 4, 5]
    assert repeating(opening + LINE * REPEATS)
    assert not repeating(opening + LINE * (REPEATS - 1))


def test_a_paragraph_said_four_times_is_a_loop_up_to_the_longest_span():
    """Walk 29: a 70-token paragraph looped after Continue. The control: a span one token past LONGEST_SPAN is not
    taken for a loop however often it is said."""
    paragraph = list(range(100, 170))
    assert repeating([1, 2] + paragraph * REPEATS)
    assert not repeating([1, 2] + paragraph * (REPEATS - 1))
    longest = list(range(1000, 1000 + LONGEST_SPAN))
    assert repeating(longest * REPEATS)
    too_long = list(range(1000, 1001 + LONGEST_SPAN))
    assert not repeating(too_long * (REPEATS + 2))


def test_a_short_span_must_cover_the_shortest_loop():
    laugh = [7, 8]
    assert not repeating([1, 2, 3] + laugh * (SHORTEST_LOOP // 2 - 1))
    assert repeating([1, 2, 3] + laugh * (SHORTEST_LOOP // 2))


def test_varied_text_and_a_loop_broken_at_its_end_are_not_loops():
    assert not repeating(list(range(300)))
    broken = LINE * REPEATS
    broken[-1] = 99
    assert not repeating([1, 2] + broken)


def test_a_greedy_reply_that_loops_ends_at_the_same_token_in_both_modes():
    target = tiny_model(0)  # a tiny random model loops within a few dozen tokens
    draft = tiny_model(1, layers=1)
    decoder = Decoder(target, DraftModelDrafter(draft, target.vocab_size), draft)
    messages = [{"role": "user", "content": "hello"}]
    replies = {}
    for mode in ("ar", "spec"):
        settings = DecodeSettings(mode=mode, gamma=4, greedy=True, max_new_tokens=400, lookup=False,
                                  cost_aware=False, stop_repeating=True)
        events = list(decoder.generate(messages, settings))
        replies[mode] = ([t.token_id for e in events for t in e.emitted], events[-1].finish_reason)
    tokens, finish = replies["ar"]
    assert finish == "repeating" and len(tokens) < 400 and repeating(tokens) and not repeating(tokens[:-1])
    assert replies["spec"] == replies["ar"]
    # without the rule the same decoding goes on to the budget
    plain = DecodeSettings(mode="ar", greedy=True, max_new_tokens=400, stop_repeating=False)
    assert len([t for e in decoder.generate(messages, plain) for t in e.emitted]) == 400


def test_a_continued_reply_ends_where_the_loop_its_first_part_began_is_said_a_fourth_time():
    """Continue carries on a reply cut just before its loop's fourth time: the loop ends it within those few tokens.
    The control: read from the continuation's first token alone, the loop must be said four times over again."""
    target = tiny_model(0)
    decoder = Decoder(target)
    messages = [{"role": "user", "content": "hello"}]
    looping = DecodeSettings(mode="ar", greedy=True, max_new_tokens=400, stop_repeating=True)
    whole = [t for e in decoder.generate(messages, looping) for t in e.emitted]
    cut = len(whole) - 3
    first = "".join(t.text for t in whole[:cut])
    continuing = [*messages, {"role": "assistant", "content": first}]
    assert decoder.chat_ids(continuing) == decoder.chat_ids(messages) + [t.token_id for t in whole[:cut]]
    rest = [t for e in decoder.generate(continuing, looping) for t in e.emitted]
    assert [t.token_id for t in rest] == [t.token_id for t in whole[cut:]]
    decoder._continued_tokens = lambda _messages: 0  # the control: the first part left unread
    alone = [t for e in decoder.generate(continuing, looping) for t in e.emitted]
    assert len(alone) >= SHORTEST_LOOP


def test_a_clause_looped_with_its_sentence_marks_by_turns_is_a_loop():
    """Walk 27: a Chinese clause said five times, ended by "，" and "。" by turns, no span repeating exactly. Read
    with every sentence mark as one, it is a loop; the control: read as its ids, it is not."""
    clause, comma, stop = list(range(100, 112)), 200, 201
    text_of = {comma: "，", stop: "。\n"}.get
    tokens = [1, 2, 3] + [t for mark in (comma, stop, comma, comma, stop) for t in clause + [mark]]
    assert not repeating(tokens)
    assert repeating(read_for_loops(tokens, lambda token: text_of(token, f"w{token}")))
    assert is_pause(" ,") and is_pause("。\n") and not is_pause("a.") and not is_pause("\n")
