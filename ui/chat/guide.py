"""What an empty chat pane shows: a short guide to what the colours mean and where to look, with example prompts
to try. Plain HTML, readable without Qt; ui/chat/view.py draws it."""
from __future__ import annotations

from ui.window.palette import LEGEND_FATES, NOTE_COLOUR, STYLES
from words.links import EXAMPLE_SCHEME

# The guide's examples: one the draft can copy from the prompt (the target writes the list out again whole), one
# code answer, one where the small draft guesses badly (free invention): rejected drafts, in rounds that draft.
EXAMPLES = (
    ("copying", "Write this list again in the same order: apple, banana, cherry, date, elderberry, fig, grape, "
                "kiwi."),
    ("a code answer", "Write a Python function that checks whether a word is a palindrome."),
    ("hard for the draft to guess", "Invent a strange name for a dragon and describe its cave in three sentences."),
)


def guide_html() -> str:
    chips = " ".join(f"<span style='background:{STYLES[f].background};color:{STYLES[f].foreground}'>"
                     f"&nbsp;{STYLES[f].label}&nbsp;</span>" for f in LEGEND_FATES)
    examples = "".join(f"<li><a href='{EXAMPLE_SCHEME}:{i}'>{text}</a> <span style='color:{NOTE_COLOUR}'>"
                       f"({what})</span></li>" for i, (what, text) in enumerate(EXAMPLES))
    return ("<h3>Watch speculative decoding work</h3>"
            "<p>A small draft model guesses the next few tokens; the large target model checks all of them in one "
            "pass and keeps the longest prefix it agrees with. Each reply is coloured by what happened to its "
            f"tokens:</p><p>{chips}</p>"
            "<p>Uncoloured tokens are the target's alone: by default (draft length: cost-aware) a round drafts "
            "only where this machine's measured costs say a draft pays, which beside a fast target is rare; "
            "draft length: confidence drafts in every round.</p>"
            "<p>Replies read as a clean answer by default; <b>View → Speculative trace</b> (Ctrl+T) shows every "
            "draft, rejected ones struck through. Hover a token to inspect p, q and the acceptance test; click to "
            "pin it.</p>"
            "<p>The charts on the right follow the last reply: α (the share of drafts kept), tokens per round against "
            "the seed's E, and the estimated speedup over plain autoregressive decoding.</p>"
            f"<p>Try one:</p><ul>{examples}</ul>")
