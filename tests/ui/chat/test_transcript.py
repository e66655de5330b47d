"""The chat pane's model without Qt: turns own ranges of spans, the clean text and its Markdown blocks, the
spans the trace draws in monospace, and which reply a token belongs to."""
from __future__ import annotations

import dataclasses

from engine.events import DecodeSettings, Fate
from tests.ui.synthetic import accepted_round, markdown_reply, rejected_round
from words.records import Reply, ReplyRequest
from words.transcript import OPENING_CHARS, Transcript, UserItem


def transcript_of(*replies) -> Transcript:
    transcript = Transcript()
    for turn, events in enumerate(replies):
        transcript.add_user(f"question {turn}")
        item = transcript.begin_reply("Assistant")
        for event in events:
            transcript.add_round(event)
        item.turn = turn
    return transcript


def test_each_reply_owns_the_spans_of_its_rounds():
    first, second = [accepted_round(0, ["a", "b"], "c")], [rejected_round(0, ["d"], "x", "e")]
    transcript = transcript_of(first, second)
    assert isinstance(transcript.items[0], UserItem)
    one, two = transcript.replies()
    assert (one.first, one.end, two.first, two.end) == (0, 3, 3, 6)  # d, the rejected x, then e
    assert transcript.reply_of_span(4) is two and transcript.spans[4].fate is Fate.REJECTED


def test_the_clean_text_leaves_rejected_drafts_and_template_tokens_out():
    transcript = transcript_of(markdown_reply())
    item = transcript.last_reply()
    text = transcript.clean_text(item)
    assert "<|im_end|>" not in text and " pass" not in text
    assert text.startswith("Here is **fast** code:") and "    return 1" in text


def test_the_clean_text_reads_as_markdown_blocks():
    transcript = transcript_of(markdown_reply())
    kinds = [block.kind for block in transcript.blocks(transcript.last_reply())]
    assert kinds == ["text", "code", "text"]


def test_the_trace_draws_code_and_the_draft_rejected_inside_it_in_monospace():
    transcript = transcript_of(markdown_reply())
    code = transcript.code_spans(transcript.last_reply())
    rejected = next(i for i, s in enumerate(transcript.spans) if s.fate is Fate.REJECTED)
    assert rejected in code and transcript.spans[rejected].text == " pass"
    assert not any(transcript.spans[i].text == "Here" for i in code)


def test_a_folded_message_opens_on_whole_words_and_cjk_is_cut_where_it_is():
    words = UserItem(" ".join(f"word{i}" for i in range(2000)))
    opening = words.opening.removesuffix(" …")
    assert len(opening) <= OPENING_CHARS and words.text.startswith(opening + " ")  # ends on a whole word
    cjk = UserItem("请用中文介绍一下你自己。" * 200)
    assert cjk.opening == cjk.text[:OPENING_CHARS] + " …"


def test_a_reply_that_went_on_with_fewer_threads_says_from_which_round():
    """Two rounds on 2 threads, then one: the note names round 3. The controls: all on 2, and not recorded."""
    from words.transcript import fewer_threads_note

    def on(threads, others_cores=None):
        events = tuple(dataclasses.replace(accepted_round(i, ["a"], "b"), threads=t) for i, t in enumerate(threads))
        return Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False,
                     others_cores=others_cores)

    note = fewer_threads_note(on([2, 2, 1, 1])).details
    assert note.startswith("Decoded on one thread from round 3:") and "its steps on 2 threads ran" in note
    assert "(other programs, or on few cores this window's own drawing)" in note  # not measured: either
    assert note.endswith("it ended before one thread was judged faster or not.")  # two rounds on one thread
    back = fewer_threads_note(on([2, 2, 1, 1, 2])).details  # one thread was no faster: the decode went back
    assert back.startswith("Decoded on one thread in rounds 3–4:") and back.endswith("back to 2 from round 5.")
    assert fewer_threads_note(on([2, 2, 2])) is None and fewer_threads_note(on([0, 0])) is None


def thread_switch(threads, others_cores=None, host_cores=None, start=0) -> Reply:
    """A reply whose rounds ran on `threads`, while other programs used `others_cores` (None: not measured)."""
    events = tuple(dataclasses.replace(accepted_round(start + i, ["a"], "b"), threads=t) for i, t in enumerate(threads))
    return Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False,
                 others_cores=others_cores, host_cores=host_cores)


def test_a_thread_switch_is_one_plain_line_with_its_figures_as_details():
    """Went on with one thread, tried it and went back, or to the end of a continued reply's part: the line says
    which rounds in plain words, and the judgement's figures (steps, paces, cores) are left to its details."""
    from words.transcript import fewer_threads_note

    stayed = fewer_threads_note(thread_switch([2, 2, 1, 1]))
    assert stayed.text == "Slowed by the machine's load: went on with one thread from round 3."
    assert stayed.details.startswith("Decoded on one thread from round 3: its steps on 2 threads ran")
    back = fewer_threads_note(thread_switch([2, 2, 1, 1, 2]))
    assert back.text == ("Slowed by the machine's load: tried one thread in rounds 3–4, then went back to 2 threads "
                         "as it was no faster.")
    part_end = fewer_threads_note(thread_switch([2, 2, 1, 1]).extended_by(thread_switch([2, 2], start=4)))
    assert part_end.text == "Slowed by the machine's load: went on with one thread from round 3 to the end of part 1."
    for note in (stayed, back, part_end):
        assert note.text.count(".") == 1 and not any(word in note.text for word in ("steps", "ms", "cores", "("))


def test_the_thread_switchs_line_names_what_slowed_it_as_the_cpu_use_measured():
    """Other programs' 1.3 cores or the host's 0.46: other work; idle others (0.04 cores): the window's own
    drawing, all that is left; not measured: the machine's load, which may be either."""
    from words.transcript import fewer_threads_note

    def slowed_by(others_cores, host_cores=0.02):
        return fewer_threads_note(thread_switch([2, 1], others_cores, host_cores)).text.partition(":")[0]

    assert slowed_by(1.3) == slowed_by(0.01, host_cores=0.46) == "Slowed by other work on this machine"
    assert slowed_by(0.04) == "Slowed by this window's own drawing"
    assert slowed_by(None) == "Slowed by the machine's load"


def test_a_busy_machines_note_is_one_plain_line_with_why_as_its_details():
    """Busy, and too few plain steps to price plain AR by: a warning line, the load's figures its details. The
    control: a quiet machine's reply has no such line."""
    from words.transcript import MACHINE_BUSY, reply_notes
    from words.wording import busy_note

    busy = dataclasses.replace(thread_switch([2, 2], others_cores=1.3), machine_busy=True)
    note = next(note for note in reply_notes(busy) if note.text == MACHINE_BUSY)
    assert note.warning and note.details == busy_note(busy) and "1.3 cores" in note.details
    assert "1.3" not in note.text and "target" not in note.text
    assert MACHINE_BUSY not in [note.text for note in reply_notes(thread_switch([2, 2], others_cores=1.3))]


def test_a_thread_switch_is_said_with_the_paces_it_was_judged_by():
    """Eight rounds on 2 threads at 30 ms a token, then eight on one at 12 ms: one thread made its tokens faster,
    by the figures the note gives. The control: at 29 ms on one (under ONE_THREAD_GAIN), the worker's judgement
    is no faster, which is what such a decode's note reads once it went back."""
    from engine.stats import LOADED_ROUNDS, ONE_THREAD_GAIN, went_faster
    from words.transcript import fewer_threads_note

    def rounds(threads: int, token_s: float, n: int = LOADED_ROUNDS, start: int = 0):
        return [dataclasses.replace(accepted_round(start + i, ["a"], "b"), threads=threads, round_s=2 * token_s)
                for i in range(n)]

    on_two, fast, slow = rounds(2, 0.030), rounds(1, 0.012, start=8), rounds(1, 0.029, start=8)
    assert went_faster(on_two, fast) and not went_faster(on_two, slow) and 0.030 / 0.029 < ONE_THREAD_GAIN
    stayed = Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), tuple(on_two + fast), "",
                   False)
    assert fewer_threads_note(stayed).details.endswith(
        "one thread made its tokens faster (a token every 12.0 ms against 30.0 ms on 2).")
    went_back = dataclasses.replace(stayed, events=tuple(on_two + slow + rounds(2, 0.03, 2, start=16)))
    assert "no faster (a token every 29.0 ms against 30.0 ms on 2), so it went back to 2 from round 17" in (
        fewer_threads_note(went_back).details)


def test_a_continued_replys_parts_say_their_own_threads_and_load():
    """Part 1 stopped on one thread with other programs idle; part 2, continued, began on 2 threads again while they
    used 1.0 cores: part 1's rounds keep part 1's cause, and part 2's start is no "went back". The control: the
    same rounds and the larger load as one reply sent once read as a return to 2 threads, and part 2 dropping to
    one thread too is said after part 1's note, with its own load."""
    from words.transcript import fewer_threads_note

    def part(threads, others_cores, start=0):
        events = tuple(dataclasses.replace(accepted_round(start + i, ["a"], "b"), threads=t)
                       for i, t in enumerate(threads))
        return Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False,
                     others_cores=others_cores)

    first, second = part([2, 2, 1, 1], 0.03), part([2, 2], 1.0, start=4)
    note = fewer_threads_note(first.extended_by(second)).details
    assert note.startswith("Decoded on one thread in rounds 3–4, to the end of part 1:")
    assert "other programs were idle, 0.03 cores" in note and "1.0 cores" not in note and "went back" not in note
    sent_once = fewer_threads_note(part([2, 2, 1, 1, 2, 2], 1.0)).details
    assert "went back to 2 from round 5" in sent_once and "1.0 cores" in sent_once
    both = fewer_threads_note(first.extended_by(part([2, 1], 1.0, start=4))).details
    assert both.startswith(note) and "Decoded on one thread from round 6:" in both
    assert both.index("0.03 cores") < both.index("1.0 cores")


def test_what_slowed_a_reply_is_what_the_measured_cpu_use_says():
    """Other programs used 1.3 cores while the reply decoded, or the virtual machine's host withheld 0.46: its notes
    say so; the control, 0.04 cores and an idle host: the slowness was this window's own."""
    from words.transcript import fewer_threads_note
    from words.wording import busy_note

    def reply(others_cores, host_cores=0.02):
        events = tuple(dataclasses.replace(accepted_round(i, ["a"], "b"), threads=t) for i, t in enumerate([2, 1]))
        return Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False,
                     machine_busy=True, others_cores=others_cores, host_cores=host_cores)

    busy = reply(1.3)
    assert not busy.speedup.fair  # two rounds: too few plain rounds to measure plain AR by, so it is warned of
    assert "(other programs used 1.3 cores on average meanwhile)" in fewer_threads_note(busy).details
    assert "quiet speed: other programs used 1.3 cores on average meanwhile)" in busy_note(busy)
    host = fewer_threads_note(reply(0.01, host_cores=0.46)).details
    assert "(this virtual machine's host withheld 0.46 cores on average (steal time))" in host
    assert "drawing" not in host and "other programs" not in host
    idle = fewer_threads_note(reply(0.04)).details
    assert "other programs were idle, 0.04 cores on average: on few cores this window's own drawing" in idle
    assert "used" not in idle and "host" not in idle
    assert "host" not in fewer_threads_note(reply(0.04, host_cores=None)).details  # not reported: not named


def test_the_thread_note_warns_only_of_load_from_outside_the_window():
    """Other programs' 1.3 cores, the host's 0.46 or a load not measured: a warning. The control: on a quiet
    machine the window's own drawing stalled the threads, which says why, in the notes' own colour."""
    from words.transcript import reply_notes

    def thread_note(others_cores, host_cores=0.02):
        events = tuple(dataclasses.replace(accepted_round(i, ["a"], "b"), threads=t) for i, t in enumerate([2, 1]))
        reply = Reply(ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings()), events, "", False,
                      others_cores=others_cores, host_cores=host_cores)
        return next(note for note in reply_notes(reply) if note.details.startswith("Decoded on"))

    assert thread_note(1.3).warning and thread_note(0.01, host_cores=0.46).warning and thread_note(None).warning
    assert not thread_note(0.04).warning


def test_a_stopped_reply_says_its_compare_with_ar_was_skipped_and_a_finished_one_does_not():
    from words.transcript import COMPARE_SKIPPED, reply_notes

    request = ReplyRequest(({"role": "user", "content": "hi"},), DecodeSettings(), compare_ar=True)
    stopped = Reply(request, (accepted_round(0, ["a"], "b"),), "ab", stopped=True, reference_s=0.01)
    assert COMPARE_SKIPPED in [note.text for note in reply_notes(stopped)]
    finished = dataclasses.replace(stopped, stopped=False)
    assert COMPARE_SKIPPED not in [note.text for note in reply_notes(finished)]
    unasked = dataclasses.replace(stopped, request=dataclasses.replace(request, compare_ar=False))
    assert COMPARE_SKIPPED not in [note.text for note in reply_notes(unasked)]
