"""Where a copied token came from, in words: the line of the user's message it is found on, earlier in the reply, or
the conversation at large; the latest occurrence where it is found twice; and the transcript looking in the message
that the reply answers."""
from __future__ import annotations

from tests.ui.synthetic import accepted_round
from words.copies import FROM_CONVERSATION, FROM_THIS_REPLY, copy_origin
from words.transcript import Transcript

FUNCTION = "Please rename f to g:\ndef f(x):\n    y = x * 2\n    return y + 1\n"


def test_a_run_found_in_the_message_names_its_line():
    assert copy_origin("    y = x * 2\n    return y", FUNCTION, "def g(x):\n") == "copied from your message, line 4"


def test_a_run_found_earlier_in_the_reply_is_copied_from_this_reply():
    before = "First: total = price * count\nThen again: "
    assert copy_origin("total = price * count", "What is the total?", before) == FROM_THIS_REPLY


def test_a_run_found_nowhere_is_copied_from_the_conversation():
    assert copy_origin("    return y - 1", FUNCTION, "def g(x):\n") == FROM_CONVERSATION


def test_a_run_found_twice_in_the_message_names_the_later_line():
    message = "a = load()\nprint(a)\nb = load()\nprint(a)\n"
    assert copy_origin("print(a)", message, "") == "copied from your message, line 4"


def test_a_run_in_the_message_and_earlier_in_the_reply_is_copied_from_this_reply():
    """The reply came after the message: its own earlier text is the latest occurrence."""
    assert copy_origin("    return y + 1", FUNCTION, "def f(x):\n    return y + 1\n\ndef g(x):\n") == FROM_THIS_REPLY


def test_a_short_run_is_placed_by_the_reply_text_before_it():
    """" y" alone is last on line 3; after "return" only on line 2."""
    message = "a = y\nreturn y\nb = y"
    assert copy_origin(" y", message, "x = 1\nreturn") == "copied from your message, line 2"
    assert copy_origin(" y", message, "") == "copied from your message, line 3"  # the control: no text before it


def test_spaces_alone_name_no_place():
    assert copy_origin("    ", FUNCTION, "") == FROM_CONVERSATION


def test_the_transcript_looks_for_a_copy_in_the_message_its_reply_answers():
    transcript = Transcript()
    transcript.add_user(FUNCTION)
    transcript.begin_reply("Assistant", lookup=True)
    transcript.add_round(accepted_round(0, ["Done", "."], "\n"))
    transcript.add_user("And this one:\nprint(total)\n")
    transcript.begin_reply("Assistant", lookup=True)
    transcript.add_round(accepted_round(0, ["def", " g", "(x", "):\n"], "    y"))  # the model's own drafts
    transcript.add_round(accepted_round(1, [" =", " x", " *", " 2"], "\n", q=1.0))  # copies of the first message
    transcript.add_round(accepted_round(2, ["print", "(total", ")"], "\n", q=1.0))  # copies of the second
    spans = transcript.spans
    model, first, second = (next(i for i, s in enumerate(spans) if s.text == text) for text in (" g", " *", "(total"))
    assert transcript.copy_origin(model) == ""
    assert transcript.copy_origin(first) == FROM_CONVERSATION  # the first message is not the one this reply answers
    assert transcript.copy_origin(second) == "copied from your message, line 2"
