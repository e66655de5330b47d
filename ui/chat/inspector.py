"""The token inspector: what happened to one token and why, in the words of its mode.

Greedy rounds accept a draft when it is the target's top choice, so they show p, q and the target's choice;
sampling rounds show the test r < min(1, p/q). Copied drafts (prompt lookup) are named as such, with where they
were copied from (words.copies) and q = 1 explained. A token that is only some of a character's UTF-8 bytes is
named by them (‹e4 bd›) and, where the text after it tells, by its character. Hovering shows a token; a click
pins it until the next click.

The pane can be 190 px wide and MIN_LINES lines tall, so formulas and figures never wrap inside themselves,
paragraphs keep small margins, the top tokens of p and q flow as two short lists rather than a table, and the rest
scrolls.
"""
from __future__ import annotations

from html import escape as html_escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QScrollArea

from engine.events import DraftedToken, Fate, TokenProb
from ui.window.palette import NOTE_COLOUR, STYLES, paper
from words.copies import FROM_CONVERSATION
from words.tokens import PART_OF_A_CHARACTER, TokenSpan, byte_part, label_bytes

NBSP, WORD_JOINER = "\u00a0", "\u2060"  # Qt breaks lines at spaces and after a slash ("min(1, p/" | "q)")


def unbroken(text: str) -> str:
    """Text (a formula, a figure) that a line never breaks inside."""
    return text.replace(" ", NBSP).replace("/", "/" + WORD_JOINER)


def escape(text: str) -> str:
    """Text for an HTML text node: < > & escaped; quotes stay readable (no attribute takes dynamic text)."""
    return html_escape(text, quote=False)


MIN_LINES = 5  # the pane's least height, in lines of text: a token's header unscrolled in the smallest window
HINT = "Hover a token in the reply to inspect it; click to pin it."
PINNED_HINT = "Pinned: click another token to inspect it, or empty space to follow the mouse again."


SPACE_MARK = "␣"  # a space, where a token is nothing else


def show(text: str) -> str:
    """A token's text, HTML-escaped, with whitespace made visible: escapes for newlines and tabs, and a token of
    spaces alone as ␣ (shown as spaces it read as nothing, its id beside it as if it had no text)."""
    if text and not text.strip():
        return escape(repr(text)[1:-1].replace(" ", SPACE_MARK))
    return escape(repr(text)[1:-1]) if text.strip() != text or not text else escape(text)


def token_id_note(token_id: int) -> str:
    """A token's id in the vocabulary, in parentheses so that it does not read on from the token's text ("The
    (token id 504)"); it tells apart tokens that look alike ("\\n" and "\\n")."""
    return f"<span style='color:{NOTE_COLOUR}'>{unbroken(f'(token id {token_id})')}</span>"


def first_rejection_note(span: TokenSpan, continued: bool = False) -> str:
    """Why the inspector shows a token nobody pointed at: after a reply it opens on the reply's first rejection,
    after a Continue on the continued part's."""
    of = "the continued part's" if continued else "the last reply's"
    if span.fate is Fate.REJECTED:
        return f"{of.capitalize()} first rejected draft:"
    return f"In place of {of} first rejected draft:"


def ambiguous(tokens: list[TokenProb]) -> set[str]:
    """Texts that do not tell their token apart: whitespace only, or the text of more than one token id (two
    different tokens both shown as "\\n")."""
    ids: dict[str, set[int]] = {}
    for token in tokens:
        ids.setdefault(token.text, set()).add(token.token_id)
    return {text for text, token_ids in ids.items() if len(token_ids) > 1 or not text.strip()}


def drafts_phrase(n: int) -> str:
    return {1: "the round's only draft was", 2: "both of the round's drafts were"}.get(
        n, f"all {n} of the round's drafts were")


def explanation(span: TokenSpan) -> str:
    """One or two plain sentences (not yet HTML-escaped) on why the token has its fate (where a copy came from is
    in the header, span_html's)."""
    drafter = "copied" if span.copied else "drafted by the draft model"
    top = span.drafted.top_p[0].text if span.drafted is not None and span.drafted.top_p else None
    if span.fate is Fate.TARGET:
        return ("The target's own token, from one forward for it alone: plain AR, or a speculative round that "
                "drafted nothing (no draft was likely enough to be kept to pay for itself).")
    if span.fate is Fate.BONUS:
        how = "its top choice" if span.greedy else "a draw from p"
        return (f"Bonus token: {drafts_phrase(span.round_drafts)} accepted, so the target's verification pass, "
                f"which already scored the next position, gives one more token for free ({how}).")
    if span.greedy:
        if span.fate is Fate.ACCEPTED:
            return f"{drafter.capitalize()} and kept: it is the target's top choice here (greedy accepts exactly that)."
        if span.fate is Fate.REJECTED:
            choice = f" (“{top}”)" if top is not None else ""
            return (f"{drafter.capitalize()} and thrown away: the target's top choice here is another token"
                    f"{choice}. This draft and any later drafts of the round are discarded.")
        return "The target's top choice, put in place of the rejected draft."
    test = unbroken("min(1, p/q)")
    if span.fate is Fate.ACCEPTED:
        return f"{drafter.capitalize()} and kept: the draw r fell below {test}."
    if span.fate is Fate.REJECTED:
        return (f"{drafter.capitalize()} and thrown away: the draw r was at or above {test}. This draft and "
                "any later drafts of the round are discarded.")
    return (f"Sampled by the target from {unbroken('norm(max(0, p − q))')} in place of the rejected draft, so the "
            "reply stays distributed exactly as the target's.")


def copy_note(greedy: bool) -> str:
    """Why a draft copied from the conversation has q = 1, and what that means for its test in this mode."""
    test = ("greedy keeps it only if it is also the target's top choice" if greedy
            else f"it is kept with probability {unbroken('min(1, p/1) = p')}")
    return (f"Why {unbroken('q = 1')}: the last few tokens occurred earlier in the conversation, and prompt lookup "
            f"proposes what followed them there with certainty; {test}.")


def piece_note(span: TokenSpan) -> str:
    """For a token that is some of a character's UTF-8 bytes: which bytes of which character, where the text after
    it tells (for a rejected draft, its replacement), and where the character's text is; "" for a whole token."""
    piece = label_bytes(span.label)
    if piece is None:
        return "" if span.text or span.special else ("A piece of a character (some of its UTF-8 bytes): its text is "
                                                     "written with the token that completes the character.")
    part = byte_part(span.label, span.after)
    are = "is" if len(piece) == 1 else "are"
    if span.fate is Fate.REJECTED:
        if part:
            return f"Part of a character: {span.label} {are} {part}, the character the target wrote here."
        return (f"{span.label} ({PART_OF_A_CHARACTER}): a token can hold only some of a character's bytes. This draft "
                "was thrown away before a token completed it, so which character is not known.")
    if part:
        return f"Part of a character: {span.label} {are} {part}, written with the token that completes it."
    return (f"{span.label} ({PART_OF_A_CHARACTER}): its text is written with the token that completes the "
            "character.")


def paragraph(html: str, style: str = "") -> str:
    return f"<p style='margin:0 0 5px 0;{style}'>{html}</p>"  # Qt's default 12 px margins fill a short pane


def span_html(span: TokenSpan, pinned: bool = False, note: str = "", origin: str = "") -> str:
    """The inspector's page on `span`; `note` (plain text) says above it why this token is shown, `origin` where a
    copied token came from (Transcript.copy_origin; "": the conversation)."""
    style = STYLES[span.fate]
    swatch = f"background:{style.background or '#eeeeee'};color:{style.foreground or '#000'};"
    if style.strike:
        swatch += "text-decoration:line-through;"
    token = span.emitted or span.drafted  # a rejected draft never joined the reply: it has only its draft
    # "pinned" stays with the id, after the token (under it, together, in a narrow pane)
    tag = token_id_note(token.token_id) + (f"{NBSP}·{NBSP}<b>pinned</b>" if pinned else "")
    parts = [f"<b>{escape(style.label)}</b>"] + ([escape(origin or FROM_CONVERSATION)] if span.copied else [])
    parts.append(unbroken(f"round {span.round_index + 1}"))
    if span.fate is not Fate.TARGET:
        parts.append("greedy" if span.greedy else "sampling")
    rows = [paragraph(escape(note), f"color:{NOTE_COLOUR}")] if note else []
    rows += [paragraph(f"<span style='{swatch}font-size:15px'>&nbsp;{show(span.label)}&nbsp;</span> {tag}<br>"
                       + " · ".join(parts)),
             paragraph(escape(explanation(span)), "color:#444")]
    if span.copied:
        rows.append(paragraph(escape(copy_note(span.greedy)), "color:#444"))
    if piece := piece_note(span):
        rows.append(paragraph(escape(piece), "color:#444"))
    fields = _fields(span)
    if fields:
        rows.append(paragraph("<br>".join(fields)))
    if span.fate is Fate.REJECTED:
        rows.append(_top_lists(span.drafted))
    elif span.replaces is not None:
        rows.append(_top_lists(span.replaces, replaced_by=span))
    return "".join(rows)


def _fields(span: TokenSpan) -> list[str]:
    token = span.drafted
    if token is None:
        return [_row("p(x) target", f"{span.emitted.p:.4f}")] if span.emitted is not None else []
    rows = [_row("p(x) target", f"{token.p:.4f}"),
            _row("q(x) draft", unbroken("1 (copied)") if span.copied else f"{token.q:.4f}")]
    if span.greedy:
        if not token.accepted and token.top_p:
            choice = token.top_p[0]
            rows.append(_row("target's choice", f"{_prob(choice, ambiguous([choice]), 4)}"))
        return rows
    rows.append(_row("min(1, p/q)", f"{token.accept_prob:.4f}"))
    if token.r is not None:
        verdict = "&lt;" if token.accepted else "≥"
        rows.append(_row("draw r", NBSP.join([f"{token.r:.4f}", verdict, f"{token.accept_prob:.4f}"])))
    return rows


def _row(name: str, value: str) -> str:
    """One field on one line; in a narrow pane its value moves under its name (a table's columns could not)."""
    return f"<span style='color:#555'>{escape(unbroken(name))}</span> <b>{value}</b>"


def _top_lists(rejected: DraftedToken, replaced_by: TokenSpan | None = None) -> str:
    """The top tokens of p and q where `rejected` was proposed. Under `replaced_by`, the token written in its place
    (a rejected draft's own header names it already), a line names the draft, and a copied one's why q = 1."""
    after = replaced_by.text + replaced_by.after if replaced_by is not None else ""
    top_p, top_q = _nonzero(rejected.top_p), _nonzero(rejected.top_q)
    unclear = ambiguous([*top_p, *top_q, TokenProb(rejected.token_id, rejected.text, rejected.q)])
    proposed = show(rejected.text) + (NBSP + token_id_note(rejected.token_id) if rejected.text in unclear else "")
    named = f"<b>{proposed}</b>"
    if label_bytes(rejected.text) is not None:
        named += f" ({escape(byte_part(rejected.text, after) or PART_OF_A_CHARACTER)})"
    pieces = any(label_bytes(t.text) is not None for t in (*top_p, *top_q))
    title = ""
    if replaced_by is not None and replaced_by.replaced_a_copy:
        title = (paragraph(f"Where a draft copied from the conversation proposed {named}:")
                 + paragraph(escape(copy_note(replaced_by.greedy)), "color:#444"))
    elif replaced_by is not None:
        title = paragraph(f"Where the draft proposed {named}:")
    return (title
            + paragraph(f"<b>{unbroken('top of p')}</b> (target): " + " · ".join(_prob(t, unclear) for t in top_p))
            + paragraph(f"<b>{unbroken('top of q')}</b> (draft): " + " · ".join(_prob(t, unclear) for t in top_q))
            + (paragraph(f"‹…› spells a token's bytes in hex: {PART_OF_A_CHARACTER}, which the tokens after it "
                         "would complete.", "color:#444") if pieces else ""))


def _nonzero(tokens: tuple[TokenProb, ...]) -> tuple[TokenProb, ...]:
    """A one-hot q (a copied draft) still yields a top-5: the rest are zero-probability padding, left out."""
    return tuple(t for t in tokens if t.prob > 0)


def _prob(token: TokenProb, unclear: set[str], digits: int = 3) -> str:
    """A token and its probability, never split; with its id where its text alone is unclear."""
    token_id = NBSP + token_id_note(token.token_id) if token.text in unclear else ""
    return f"<code>{show(token.text)}</code>{token_id}{NBSP}{token.prob:.{digits}f}"


class TokenInspector(QScrollArea):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPalette(paper(self.palette()))
        self.label = QLabel(HINT)
        self.label.setAutoFillBackground(True)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.label.setMargin(4)
        self.setWidget(self.label)
        self.setWidgetResizable(True)
        self.setMinimumHeight(MIN_LINES * self.fontMetrics().lineSpacing() + 2 * (self.frameWidth() + 4))
        self.span: TokenSpan | None = None
        self.origin = ""  # where the token shown was copied from, for its page once unpinned
        self.pinned = False

    def show_span(self, span: TokenSpan, note: str = "", origin: str = "") -> None:
        """Show a hovered token, unless one is pinned; `note` says why it is shown when no one pointed at it,
        `origin` where a copied one came from."""
        if not self.pinned:
            self._display(span, span_html(span, note=note, origin=origin), origin)

    def pin(self, span: TokenSpan, origin: str = "") -> None:
        self._display(span, span_html(span, pinned=True, origin=origin), origin)
        self.pinned = True
        self.label.setToolTip(PINNED_HINT)  # the header says "pinned"; how to release it costs no lines here

    def unpin(self) -> None:
        self.pinned = False
        self.label.setToolTip("")
        if self.span is not None:
            self.label.setText(span_html(self.span, origin=self.origin))

    def _display(self, span: TokenSpan, html: str, origin: str) -> None:
        if span is not self.span:  # another token is read from its header, not from where the last one was scrolled
            self.verticalScrollBar().setValue(0)
        self.span, self.origin = span, origin
        self.label.setText(html)

    def reset(self) -> None:
        self.span, self.origin, self.pinned = None, "", False
        self.label.setToolTip("")
        self.label.setText(HINT)
