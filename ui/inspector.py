"""The token inspector: what happened to one token and why, in the words of its mode.

Greedy rounds accept a draft when it is the target's top choice, so they show p, q and the target's choice;
sampling rounds show the test r < min(1, p/q). Copied drafts (prompt lookup) are named as such, with q = 1
explained. Hovering shows a token; a click pins it until the next click.
"""
from __future__ import annotations

from html import escape as html_escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QScrollArea

from engine.events import DraftedToken, Fate, TokenProb
from ui.palette import NOTE_COLOUR, STYLES
from ui.tokens import TokenSpan

def escape(text: str) -> str:
    """Text for an HTML text node: < > & escaped; quotes stay readable (no attribute takes dynamic text)."""
    return html_escape(text, quote=False)


HINT = "Hover a token in the reply to inspect it; click to pin it."


def show(text: str) -> str:
    """A token's text, HTML-escaped, with whitespace made visible."""
    return escape(repr(text)[1:-1]) if text.strip() != text or not text else escape(text)


def drafts_phrase(n: int) -> str:
    return "the round's only draft was" if n == 1 else f"all {n} of the round's drafts were"


def explanation(span: TokenSpan) -> str:
    """One or two plain sentences (not yet HTML-escaped) on why the token has its fate."""
    drafter = "copied from the conversation" if span.copied else "drafted by the draft model"
    top = span.drafted.top_p[0].text if span.drafted is not None and span.drafted.top_p else None
    if span.fate is Fate.TARGET:
        return "Plain autoregressive decoding: one target forward per token."
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
    if span.fate is Fate.ACCEPTED:
        return f"{drafter.capitalize()} and kept: the draw r fell below min(1, p/q)."
    if span.fate is Fate.REJECTED:
        return (f"{drafter.capitalize()} and thrown away: the draw r was at or above min(1, p/q). This draft and "
                "any later drafts of the round are discarded.")
    return "Sampled by the target from norm(max(0, p − q)) in place of the rejected draft, so the reply stays " \
           "distributed exactly as the target's."


def copy_note(span: TokenSpan) -> str:
    if not span.copied:
        return ""
    test = ("greedy keeps it only if it is also the target's top choice" if span.greedy
            else "it is kept with probability min(1, p/1) = p")
    return ("Why q = 1: the last few tokens occurred earlier in the conversation, and prompt lookup proposes "
            f"what followed them there with certainty; {test}.")


def span_html(span: TokenSpan, pinned: bool = False) -> str:
    style = STYLES[span.fate]
    swatch = f"background:{style.background or '#eeeeee'};color:{style.foreground or '#000'};"
    if style.strike:
        swatch += "text-decoration:line-through;"
    label = style.label + (" · copied from the conversation" if span.copied else "")
    mode = "" if span.fate is Fate.TARGET else (" · greedy" if span.greedy else " · sampling")
    rows = [f"<p><span style='{swatch}font-size:15px;padding:2px'>&nbsp;{show(span.text)}&nbsp;</span>"
            f" &nbsp;<b>{escape(label)}</b> · round {span.round_index + 1}{mode}"
            + (" · <i>pinned</i>" if pinned else "") + "</p>",
            f"<p style='color:#444'>{escape(explanation(span))}</p>"]
    if span.copied:
        rows.append(f"<p style='color:#444'>{escape(copy_note(span))}</p>")
    rows += ["<table cellspacing='0' cellpadding='2'>", *_fields(span), "</table>"]
    rejected = span.drafted if span.fate is Fate.REJECTED else span.replaces
    if rejected is not None:
        rows.append(_top_tables(rejected))
    if pinned:
        rows.append(f"<p style='color:{NOTE_COLOUR}'>Pinned: click another token to inspect it, or empty space "
                    "to follow the mouse again.</p>")
    return "".join(rows)


def _fields(span: TokenSpan) -> list[str]:
    token = span.drafted
    if token is None:
        return [_row("p(x) target", f"{span.emitted.p:.4f}")] if span.emitted is not None else []
    rows = [_row("p(x) target", f"{token.p:.4f}"),
            _row("q(x) draft", "1 (copied)" if span.copied else f"{token.q:.4f}")]
    if span.greedy:
        if not token.accepted and token.top_p:
            rows.append(_row("target's choice", f"{show(token.top_p[0].text)} (p {token.top_p[0].prob:.4f})"))
        return rows
    rows.append(_row("min(1, p/q)", f"{token.accept_prob:.4f}"))
    if token.r is not None:
        verdict = "&lt;" if token.accepted else "≥"
        rows.append(_row("draw r", f"{token.r:.4f} {verdict} {token.accept_prob:.4f}"))
    return rows


def _row(name: str, value: str) -> str:
    return f"<tr><td style='color:#555'>{escape(name)}</td><td>&nbsp;<b>{value}</b></td></tr>"


def _top_tables(rejected: DraftedToken) -> str:
    title = f"<p style='margin-top:8px'>Where the draft proposed <b>{show(rejected.text)}</b>:</p>"
    top_p, top_q = _nonzero(rejected.top_p), _nonzero(rejected.top_q)
    return (title + "<table cellspacing='0' cellpadding='2'><tr><th align='left'>top of p (target)</th>"
            "<th>&nbsp;&nbsp;</th><th align='left'>top of q (draft)</th></tr>"
            + "".join(f"<tr><td>{_prob(a)}</td><td></td><td>{_prob(b)}</td></tr>" for a, b in _pairs(top_p, top_q))
            + "</table>")


def _nonzero(tokens: tuple[TokenProb, ...]) -> tuple[TokenProb, ...]:
    """A one-hot q (a copied draft) still yields a top-5: the rest are zero-probability padding, left out."""
    return tuple(t for t in tokens if t.prob > 0)


def _pairs(left: tuple[TokenProb, ...], right: tuple[TokenProb, ...]):
    for i in range(max(len(left), len(right))):
        yield left[i] if i < len(left) else None, right[i] if i < len(right) else None


def _prob(token: TokenProb | None) -> str:
    return "" if token is None else f"<code>{show(token.text)}</code> {token.prob:.3f}"


class TokenInspector(QScrollArea):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.label = QLabel(HINT)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.label.setMargin(6)
        self.setWidget(self.label)
        self.setWidgetResizable(True)
        self.span: TokenSpan | None = None
        self.pinned = False

    def show_span(self, span: TokenSpan) -> None:
        """Show a hovered token, unless one is pinned."""
        if not self.pinned:
            self.span = span
            self.label.setText(span_html(span))

    def pin(self, span: TokenSpan) -> None:
        self.span, self.pinned = span, True
        self.label.setText(span_html(span, pinned=True))

    def unpin(self) -> None:
        self.pinned = False
        if self.span is not None:
            self.label.setText(span_html(self.span))

    def reset(self) -> None:
        self.span, self.pinned = None, False
        self.label.setText(HINT)
