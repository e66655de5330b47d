"""The export's "why this γ" parts: the tab's charts and line in the PNG (drawn though the tab is not shown), and
acceptance by draft position in NAME-positions.csv, checked against hand counts of synthetic rounds."""
from __future__ import annotations

import csv
import json

import pytest
from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QColor, QImage

from app.chat.export import export_session
from app.why import why_gamma
from engine.events import DecodeSettings, EmittedToken, Fate, ModelInfo, PairInfo, RoundEvent
from engine.stats import expected_tokens_per_round
from tests.ui.helpers import shown_window
from tests.ui.synthetic import accepted_round, rejected_round
from ui.why.gamma_charts import COLOURS, EXPORT_WHY_SIZE, why_panel
from ui.why.pane import EXPORT_TITLE_HEIGHT
from words.records import Reply, ReplyRequest, Session

SPEC = DecodeSettings(gamma=4, lookup=False)
AR = DecodeSettings(mode="ar")
COSTS = {"target_block_ms": [10.0] * 9, "draft_step_ms": 2.0, "copy_ms": 0.01, "overhead_ms": 0.0}


def first_reply():
    """γ 3, 2, 4, 1 keeping 3, 1, 0, 1."""
    return (accepted_round(0, ["a", "b", "c"], "d"), rejected_round(1, ["a"], "x", "y"),
            rejected_round(2, [], "x", "y", gamma=4), accepted_round(3, ["a"], "b"))


def second_reply():
    """γ 2 keeping both; γ 2 keeping none."""
    return accepted_round(0, ["a", "b"], "c"), rejected_round(1, [], "x", "y", gamma=2)


def ar_reply():
    """Plain AR: three single target steps, no drafts."""
    return tuple(RoundEvent(index=i, gamma=0, drafted=(), emitted=(EmittedToken(5 + i, f"w{i}", Fate.TARGET, 0.5),),
                            text_delta=f"w{i}", draft_s=0.0, verify_s=0.02, round_s=0.02, target_step_s=0.02)
                 for i in range(3))


def session_of(*replies: tuple[DecodeSettings, tuple]) -> Session:
    pair = PairInfo(ModelInfo("t", "/t", 1, 64), ModelInfo("d", "/d", 1, 64), "cpu", "float32", costs=COSTS)
    return Session(pair, [Reply(ReplyRequest(({"role": "user", "content": f"m{i}"},), settings), events, "", False,
                                reference_s=0.01) for i, (settings, events) in enumerate(replies)])


def positions_rows(session: Session, tmp_path) -> list[dict]:
    export_session(session, tmp_path / "chat")
    with (tmp_path / "chat-positions.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def shares(row: dict, measure: str, longest: int = 4) -> list[float | None]:
    return [float(row[f"{measure}_{i}"]) if row[f"{measure}_{i}"] else None for i in range(1, longest + 1)]


def test_positions_csv_has_a_row_per_reply_then_the_session(tmp_path):
    rows = positions_rows(session_of((SPEC, first_reply()), (AR, ar_reply()), (SPEC, second_reply())), tmp_path)
    assert [(r["scope"], r["reply"], r["mode"], r["rounds"]) for r in rows] == [
        ("reply", "1", "spec", "4"), ("reply", "2", "ar", "3"), ("reply", "3", "spec", "2"),
        ("session", "", "spec", "6")]
    assert list(rows[0])[:8] == ["scope", "reply", "mode", "rounds", "alpha", "mean_accepted", "tokens_per_round",
                                 "seed_tokens_per_round"]
    assert [f"kept_{i}" for i in range(1, 5)] == list(rows[0])[8:12]  # the longest γ of the session: 4


def test_positions_csv_kept_shares_equal_the_hand_count(tmp_path):
    first, ar, second, session = positions_rows(
        session_of((SPEC, first_reply()), (AR, ar_reply()), (SPEC, second_reply())), tmp_path)
    # first reply, 4 rounds: position 1 kept by rounds 0, 1, 3; 2 and 3 by round 0; 4 by none
    assert shares(first, "kept") == [3 / 4, 1 / 4, 1 / 4, 0.0]
    assert shares(second, "kept") == [1 / 2, 1 / 2, None, None]  # it never drafted a 3rd: blank, not 0
    assert shares(ar, "kept") == [None] * 4
    # the session: the 6 speculative rounds (the AR reply's steps are the baseline, not counted)
    assert shares(session, "kept") == [4 / 6, 2 / 6, 1 / 6, 0.0]


def test_positions_csv_conditional_and_drafted_shares_equal_the_hand_count(tmp_path):
    first, second, _ = positions_rows(session_of((SPEC, first_reply()), (SPEC, second_reply())), tmp_path)
    # the target saw a 1st draft in all 4 rounds (3 kept), a 2nd in rounds 0 and 1 (1 kept), a 3rd in round 0 (kept)
    assert shares(first, "conditional") == [3 / 4, 1 / 2, 1.0, None]
    assert shares(first, "drafted") == [4 / 4, 3 / 4, 2 / 4, 1 / 4]  # γ 3, 2, 4, 1
    assert shares(first, "copied") == [0.0] * 4
    assert shares(second, "conditional") == [1 / 2, 1.0, None, None]


def test_positions_csv_gives_mean_length_and_the_seeds_expectation_beside_the_measured(tmp_path):
    first, ar, session = positions_rows(session_of((SPEC, first_reply()), (AR, ar_reply())), tmp_path)
    alpha = 5 / 7  # accepted 3 + 1 + 0 + 1 of verified 3 + 2 + 1 + 1
    assert float(first["alpha"]) == alpha
    assert (float(first["mean_accepted"]), float(first["tokens_per_round"])) == (5 / 4, 9 / 4)
    seed = sum(expected_tokens_per_round(alpha, g) for g in (3, 2, 4, 1)) / 4
    assert float(first["seed_tokens_per_round"]) == pytest.approx(seed, rel=1e-12)
    assert float(session["seed_tokens_per_round"]) == pytest.approx(seed, rel=1e-12)  # the AR reply is not in it
    assert ar["alpha"] == "" and float(ar["tokens_per_round"]) == 1.0  # no drafts: no α


def test_positions_csv_agrees_with_the_json(tmp_path):
    session = session_of((SPEC, first_reply()), (SPEC, second_reply()))
    rows = positions_rows(session, tmp_path)
    data = json.loads((tmp_path / "chat.json").read_text())
    for row, acceptance in [(rows[0], data["replies"][0]["position_acceptance"]),
                            (rows[1], data["replies"][1]["position_acceptance"]),
                            (rows[2], data["why_gamma"]["session_acceptance"])]:
        for measure in ("kept", "conditional", "drafted", "copied"):
            assert [s for s in shares(row, measure) if s is not None] == acceptance[measure]
        for key in ("mean_accepted", "tokens_per_round", "seed_tokens_per_round", "alpha"):
            assert float(row[key]) == acceptance[key]


# -- the PNG --------------------------------------------------------------------------------------------------


def exported_png(qtbot, tmp_path, session: Session) -> tuple[QImage, object]:
    """The window's export of `session`, with the why tab left hidden behind "this reply"; and the window."""
    window = shown_window(qtbot, 1400, 900)
    window.on_why_changed(why_gamma(session))
    assert window.chart_tabs.currentIndex() == 0 and not window.why_charts.isVisible()
    export_session(session, tmp_path / "chat", window.analysis.chart_image)
    return QImage(str(tmp_path / "chat.png")).convertToFormat(QImage.Format.Format_RGB32), window


def why_offset(window, session: Session) -> tuple[int, int]:
    """Where the why column starts in the exported image: after a column per shown reply, under the titles."""
    return window.charts.width() * len(session.shown_replies()), EXPORT_TITLE_HEIGHT


def count_colour(image: QImage, rect: QRect, colour: str) -> int:
    rgb = QColor(colour).rgb()
    return sum(image.pixel(x, y) == rgb for x in range(rect.left(), rect.right() + 1)
               for y in range(rect.top(), rect.bottom() + 1))


def test_the_png_holds_the_why_tab_beside_the_replies_charts(qtbot, tmp_path):
    session = session_of((SPEC, first_reply()), (SPEC, second_reply()))
    image, window = exported_png(qtbot, tmp_path, session)
    x, y = why_offset(window, session)
    panel = why_panel(session, why_gamma(session), window.charts.size())
    assert image.width() == x + panel.width() and image.height() >= y + panel.height()
    # the column is the tab as drawn on its own, pixel for pixel
    assert image.copy(x, y, panel.width(), panel.height()) == panel.grab().toImage().convertToFormat(
        QImage.Format.Format_RGB32)


def test_the_pngs_why_charts_are_drawn_where_the_tab_has_them(qtbot, tmp_path):
    session = session_of((SPEC, first_reply()), (SPEC, second_reply()))
    image, window = exported_png(qtbot, tmp_path, session)
    x, y = why_offset(window, session)
    panel = why_panel(session, why_gamma(session), window.charts.size())

    def at(widget) -> QRect:
        return widget.geometry().translated(x, y)

    assert count_colour(image, at(panel.acceptance_plot), COLOURS["reply"]) > 100  # this reply's bars
    assert count_colour(image, at(panel.acceptance_plot), COLOURS["session"]) > 100
    assert count_colour(image, at(panel.costs_plot), "#263238") > 50  # the target's block costs
    assert count_colour(image, at(panel.speedup_plot), COLOURS[panel.why.recommendation.drafting]) > 50
    line = at(panel.explanation)
    assert panel.explanation.text().startswith("Best here: draft model, γ ≤ ")
    assert count_colour(image, line, "#ffffff") < line.width() * line.height()  # its text is drawn


def test_the_pngs_acceptance_chart_is_empty_after_plain_ar_only(qtbot, tmp_path):
    """Negative control for the check above: with no speculative round there are no bars to find."""
    session = session_of((AR, ar_reply()))
    image, window = exported_png(qtbot, tmp_path, session)
    x, y = why_offset(window, session)
    panel = why_panel(session, why_gamma(session), window.charts.size())
    plot = panel.acceptance_plot.geometry().translated(x, y)
    assert count_colour(image, plot, COLOURS["reply"]) == count_colour(image, plot, COLOURS["session"]) == 0


def blank_rows_at_the_bottom(image: QImage, left: int, width: int) -> int:
    """How many of the image's last rows are all white between `left` and `left + width`."""
    white = QColor("#ffffff").rgb()
    for rows, y in enumerate(range(image.height() - 1, -1, -1)):
        if any(image.pixel(x, y) != white for x in range(left, left + width)):
            return rows
    return image.height()


def test_no_column_of_the_png_ends_above_a_blank_band(qtbot, tmp_path):
    """The why column is taller than the charts pane (its plots get EXPORT_WHY_SIZE's height under their headers):
    each reply's charts fill the same height, their last axis title a few pixels from the image's bottom."""
    session = session_of((SPEC, first_reply()), (SPEC, second_reply()))
    image, window = exported_png(qtbot, tmp_path, session)
    x, _ = why_offset(window, session)
    assert image.height() - EXPORT_TITLE_HEIGHT > window.charts.height()  # the case where the charts fell short
    columns = {f"reply {n + 1}": (n * window.charts.width(), window.charts.width()) for n in range(2)}
    columns["why this γ"] = (x, image.width() - x)
    for name, (left, width) in columns.items():
        assert blank_rows_at_the_bottom(image, left, width) <= 10, name


def test_the_why_tab_drawn_off_screen_gives_each_plot_room_and_the_whole_line(qtbot):
    session = session_of((SPEC, first_reply()))
    panel = why_panel(session, why_gamma(session), QSize(200, 100))  # a pane narrower and lower than the tab needs
    qtbot.addWidget(panel)
    assert panel.width() >= EXPORT_WHY_SIZE.width()
    for plot, header in panel.headers.items():
        assert plot.height() >= EXPORT_WHY_SIZE.height(), header.title
        assert header.height() >= header.heightForWidth(header.width()), f"{header.title}: legend cut"
        assert not header.geometry().intersects(plot.geometry())
    line = panel.explanation
    assert line.height() >= line.heightForWidth(line.width()) and line.geometry().bottom() < panel.height()
