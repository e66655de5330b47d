"""Where docs/screenshots/take.sh points and clicks: places in a picture of the studio's window (its client area, as
`import -window` grabs it), found by the colours the window draws. xdotool sees only the top-level window, not
Qt's widgets inside it, so the script reads the picture instead.

    .venv/bin/python docs/screenshots/locate.py tokens PNG FATE...   # the chat's tokens of these fates (trace view)
    .venv/bin/python docs/screenshots/locate.py message-box PNG      # a point inside the message box

Each prints "x y" lines in the window's coordinates (tokens in reading order), and exits 1 where it finds none.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.events import Fate  # noqa: E402 (after the path)
from ui.window.palette import LEGEND_FATES, STYLES  # noqa: E402

TINTED = [fate for fate in LEGEND_FATES if STYLES[fate].background]  # the chips with a colour to find

WHITE = "#ffffff"  # the base of the chat pane, the message box and the charts (Qt's Fusion palette, pyqtgraph "w")
CHIP_GAP = (1, 16)  # pixels between the legend's chips (their spacing and rounded corners); tokens touch
STRIKE_GAP = 3  # a trace token's tint is cut by its strike-through line and glyphs: gaps this tall are closed
MIN_TOKEN = 5  # a region narrower or lower than this is a glyph's fringe, not a token
MIN_PAGE_RUN = 12  # rows of white at the window's right edge that begin the charts' page (its first header)
MIN_BOX_RUN = 30  # rows of white down the chat pane that are the message box (it is 90 px tall at most)
INTO_PANE = 25  # from the left edge of the chat pane to a point in its message box


def load(path: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def of_colour(image: np.ndarray, colour: str) -> np.ndarray:
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return np.all(image == rgb, axis=2)


def runs(line: np.ndarray, least: int = 1) -> list[tuple[int, int]]:
    """(start, end) of the stretches of True in a row or column of a mask, at least `least` long."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], line.astype(np.int8), [0]))))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2]) if e - s >= least]


def legend(image: np.ndarray) -> tuple[int, int, int, int] | None:
    """(left, top, right, bottom) of the colour chips above the chat pane: the topmost row where the legend's four
    colours come in its order, a few pixels apart (in the trace, tokens of these colours touch)."""
    masks = [of_colour(image, STYLES[fate].background) for fate in TINTED]
    for y in range(image.shape[0]):
        for first in runs(masks[0][y], 6):
            chips = [first]
            for mask in masks[1:]:
                after = [run for run in runs(mask[y], 6) if CHIP_GAP[0] <= run[0] - chips[-1][1] <= CHIP_GAP[1]]
                if not after:
                    break
                chips.append(after[0])
            if len(chips) == len(masks):
                bottom, probe = y, chips[1][0] + 1  # down the second chip's left padding, where no glyph is
                while bottom + 1 < image.shape[0] and masks[1][bottom + 1, probe]:
                    bottom += 1
                return chips[0][0], y, chips[-1][1], bottom
    return None


def chart_page(image: np.ndarray) -> tuple[int, int] | None:
    """(left, top) of the page under the charts pane's tabs: near the window's right edge, the first white stretch
    from the top that is a pane's width wide (the menu bar and the inspector above it are grey, the inspector's
    scroll bar narrow), as far left as its first rows are white."""
    white = of_colour(image, WHITE)
    width = image.shape[1]
    x = width - 12
    for top, end in runs(white[:, x], MIN_PAGE_RUN):
        left = x
        for y in range(top, min(top + 3, end)):
            grey = np.flatnonzero(~white[y, :x + 1])
            left = min(left, int(grey[-1]) + 1 if len(grey) else 0)
        if left < width - 150:  # the pane is at least 200 px wide
            return left, top
    return None


def regions(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(left, top, right, bottom) of the mask's connected regions, once short gaps down each column are closed."""
    above = np.zeros_like(mask)
    below = np.zeros_like(mask)
    for d in range(1, STRIKE_GAP + 1):
        above[d:] |= mask[:-d]
        below[:-d] |= mask[d:]
    closed = mask | (above & below)
    seen = np.zeros_like(closed)
    boxes = []
    for y0, x0 in zip(*np.nonzero(closed)):
        if seen[y0, x0]:
            continue
        seen[y0, x0] = True
        stack, box = [(y0, x0)], [x0, y0, x0, y0]
        while stack:
            y, x = stack.pop()
            box = [min(box[0], x), min(box[1], y), max(box[2], x), max(box[3], y)]
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < closed.shape[0] and 0 <= nx < closed.shape[1] and closed[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        if box[2] - box[0] + 1 >= MIN_TOKEN and box[3] - box[1] + 1 >= MIN_TOKEN:
            boxes.append(tuple(int(v) for v in box))
    return boxes


def tokens(image: np.ndarray, fates: list[Fate]) -> list[tuple[int, int]]:
    """Centres of the tinted tokens of these fates in the chat pane (the trace view tints every draft): below the
    legend, right of its left edge and left of the charts pane, whose inspector shows a token's tint too."""
    chips, page = legend(image), chart_page(image)
    if chips is None:
        return []
    mask = np.zeros(image.shape[:2], dtype=bool)
    for fate in fates:
        mask |= of_colour(image, STYLES[fate].background)
    mask[:chips[3] + 1] = False
    mask[:, :max(0, chips[0] - 2)] = False
    if page is not None:
        mask[:, page[0]:] = False
    boxes = sorted(regions(mask), key=lambda box: (box[1] // MIN_TOKEN, box[0]))
    if not boxes:
        return []
    # Tokens on lines that touch merge: the middle of a region taller than a line is between two tokens, so a
    # point on its first line is given instead.
    line = int(np.median([bottom - top + 1 for _, top, _, bottom in boxes]))
    points = []
    for left, top, right, bottom in boxes:
        if bottom - top + 1 > 1.5 * line:
            bottom = top + line - 1
            xs = np.flatnonzero(mask[top:bottom + 1, left:right + 1].any(axis=0))
            left, right = left + int(xs[0]), left + int(xs[-1])
        points.append(((left + right) // 2, (top + bottom) // 2))
    return points


def message_box(image: np.ndarray) -> tuple[int, int] | None:
    """The middle of the lowest tall white stretch down the chat pane: the message box, under the chat."""
    chips = legend(image)
    if chips is None:
        return None
    x = chips[0] + 2 * INTO_PANE  # past the chat pane's edge, and the New chat button's rounded corner
    stretches = runs(of_colour(image, WHITE)[:, x], MIN_BOX_RUN)
    return (x, (stretches[-1][0] + stretches[-1][1]) // 2) if stretches else None


def main(argv: list[str]) -> int:
    what, path, *rest = argv
    image = load(path)
    if what == "tokens":
        points = tokens(image, [Fate(name) for name in rest])
    elif what == "message-box":
        points = [p] if (p := message_box(image)) else []
    else:
        raise SystemExit(f"locate.py: no such place: {what}")
    for x, y in points:
        print(x, y)
    return 0 if points else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
