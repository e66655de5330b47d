"""The token inspector: fate, p(x), q(x), min(1, p/q), the draw r and, for rejections, the top tokens of p and q."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QScrollArea

from engine.events import DraftedToken, Fate, TokenProb
from ui.palette import STYLES
from ui.tokens import TokenSpan

EXPLANATIONS = {
    Fate.ACCEPTED: "drafted by q and kept: r < min(1, p/q)",
    Fate.REJECTED: "drafted by q and thrown away: r ≥ min(1, p/q); it and the later drafts are discarded",
    Fate.RESAMPLED: "sampled by the target from norm(max(0, p − q)) in place of the rejected draft",
    Fate.CORRECTED: "greedy: the target's argmax in place of the rejected draft",
    Fate.BONUS: "all γ drafts were accepted, so the target's next position gives one more token for free",
    Fate.TARGET: "plain autoregressive decoding: one target forward per token",
}


def show(text: str) -> str:
    """A token's text with whitespace made visible."""
    return escape(repr(text)[1:-1]) if text.strip() != text or not text else escape(text)


def span_html(span: TokenSpan) -> str:
    style = STYLES[span.fate]
    swatch = f"background:{style.background or '#eeeeee'};color:{style.foreground or '#000'};"
    if style.strike:
        swatch += "text-decoration:line-through;"
    rows = [f"<p><span style='{swatch}font-size:15px;padding:2px'>&nbsp;{show(span.text)}&nbsp;</span>"
            f" &nbsp;<b>{style.label}</b> · round {span.round_index + 1}</p>",
            f"<p style='color:#555'>{EXPLANATIONS[span.fate]}</p>", "<table cellspacing='0' cellpadding='2'>"]
    token = span.drafted
    if token is not None:
        rows += [_row("p(x) target", f"{token.p:.4f}"), _row("q(x) draft", f"{token.q:.4f}"),
                 _row("min(1, p/q)", f"{token.accept_prob:.4f}"),
                 _row("draw r", "— (greedy: accept iff argmax p = x)" if token.r is None else f"{token.r:.4f}")]
    elif span.emitted is not None:
        rows.append(_row("p(x) target", f"{span.emitted.p:.4f}"))
    rows.append("</table>")
    rejected = span.drafted if span.fate is Fate.REJECTED else span.replaces
    if rejected is not None:
        rows.append(_top_tables(rejected))
    return "".join(rows)


def _row(name: str, value: str) -> str:
    return f"<tr><td style='color:#555'>{name}</td><td>&nbsp;<b>{value}</b></td></tr>"


def _top_tables(rejected: DraftedToken) -> str:
    title = f"<p style='margin-top:8px'>At the rejected position (draft proposed <b>{show(rejected.text)}</b>):</p>"
    return (title + "<table cellspacing='0' cellpadding='2'><tr><th align='left'>top of p (target)</th>"
            "<th>&nbsp;&nbsp;</th><th align='left'>top of q (draft)</th></tr>"
            + "".join(f"<tr><td>{_prob(a)}</td><td></td><td>{_prob(b)}</td></tr>"
                      for a, b in _pairs(rejected.top_p, rejected.top_q)) + "</table>")


def _pairs(left: tuple[TokenProb, ...], right: tuple[TokenProb, ...]):
    for i in range(max(len(left), len(right))):
        yield left[i] if i < len(left) else None, right[i] if i < len(right) else None


def _prob(token: TokenProb | None) -> str:
    return "" if token is None else f"<code>{show(token.text)}</code> {token.prob:.3f}"


class TokenInspector(QScrollArea):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.label = QLabel("Hover or click a token in the reply to inspect it.")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.label.setMargin(6)
        self.setWidget(self.label)
        self.setWidgetResizable(True)
        self.span: TokenSpan | None = None

    def show_span(self, span: TokenSpan) -> None:
        self.span = span
        self.label.setText(span_html(span))
