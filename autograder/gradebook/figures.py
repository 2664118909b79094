"""The class report's figures, drawn as SVG text by the grader itself (no plotting library): the
histograms of the scores, the share of the class that passed each item, the seconds per notebook.

Each function takes the numbers of the table the figure stands before and returns one SVG
document; the page shows it as an image (a data: address), which a browser never runs anything
of. Every text in it is escaped.
"""

from __future__ import annotations

from html import escape

#: The page's colours: a bar, a bar under half, the axes and the text.
BAR, LOW, INK = "#4477aa", "#cc6677", "#333"
FONT = 'font-family="system-ui,sans-serif"'


def _svg(width: float, height: float, parts: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT} font-size="11">' + "".join(parts) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, weight: str = "normal") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}" '
        f'fill="{INK}">{escape(str(text))}</text>'
    )


def _rect(x: float, y: float, width: float, height: float, fill: str) -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(width, 0):.1f}" height="{max(height, 0):.1f}" fill="{fill}"/>'


def _line(x1: float, y1: float, x2: float, y2: float) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{INK}" stroke-width="1"/>'


def _number(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def histograms(parts: list[str], bins: dict[str, list[tuple[float, float, int]]]) -> str:
    """One small histogram per part (students per band of points), three to a row."""
    columns = min(3, len(parts))
    rows = -(-len(parts) // columns)
    cell_w, cell_h, pad = 260.0, 170.0, 36.0
    drawn: list[str] = []
    for index, part in enumerate(parts):
        left, top = (index % columns) * cell_w, (index // columns) * cell_h
        width, height = cell_w - 2 * pad + 10, cell_h - 2 * pad
        x0, y0 = left + pad, top + pad + height  # the axes' corner
        counts = [count for _, _, count in bins[part]]
        most = max(counts + [1])
        step = width / len(counts)
        drawn.append(_text(left + cell_w / 2, top + 18, part, "middle", 12, "bold"))
        for position, count in enumerate(counts):
            bar = height * count / most
            drawn.append(_rect(x0 + position * step + 1, y0 - bar, step - 2, bar, BAR))
        drawn += [_line(x0, y0, x0 + width, y0), _line(x0, y0, x0, y0 - height)]
        drawn += [_text(x0, y0 + 14, "0", "middle"), _text(x0 + width, y0 + 14, _number(bins[part][-1][1]), "middle")]
        drawn += [_text(x0 - 4, y0 - height + 4, str(most), "end"), _text(x0 - 4, y0 + 4, "0", "end")]
        drawn.append(_text(x0 + width / 2, y0 + 28, "points", "middle", 10))
    return _svg(columns * cell_w, rows * cell_h, drawn)


def share_bars(labels: list[str], shares: list[float]) -> str:
    """One horizontal bar per item: the share of the class that passed it (0 to 1), under half in red."""
    label_w, bar_w, row_h, top = 230.0, 420.0, 18.0, 10.0
    height = top + row_h * len(labels) + 36
    drawn: list[str] = []
    for position, (label, share) in enumerate(zip(labels, shares, strict=True)):
        y = top + position * row_h
        drawn.append(_text(label_w - 6, y + row_h * 0.7, label, "end", 10))
        drawn.append(_rect(label_w, y + 2, bar_w * min(max(share, 0.0), 1.0), row_h - 4, LOW if share < 0.5 else BAR))
    bottom = top + row_h * len(labels)
    drawn += [_line(label_w, top, label_w, bottom), _line(label_w, bottom, label_w + bar_w, bottom)]
    for tick in (0.0, 0.5, 1.0):
        drawn.append(_text(label_w + bar_w * tick, bottom + 14, _number(tick), "middle"))
    drawn.append(_text(label_w + bar_w / 2, bottom + 30, "share of the class that passed", "middle", 10))
    return _svg(label_w + bar_w + 20, height, drawn)


def boxes(labels: list[str], stats: list[dict]) -> str:
    """A box plot per notebook: least and most (whiskers), quartiles (box), median (line)."""
    left, top, plot_h, box_w = 50.0, 12.0, 180.0, 70.0
    width = left + box_w * 1.5 * len(labels) + 20
    most = max([s["whishi"] for s in stats] + [1.0])
    y = lambda seconds: top + plot_h * (1 - seconds / most)  # noqa: E731
    drawn: list[str] = [_line(left, top, left, top + plot_h), _line(left, top + plot_h, width - 10, top + plot_h)]
    drawn += [_text(left - 4, top + 4, _number(most), "end"), _text(left - 4, top + plot_h + 4, "0", "end")]
    drawn.append(_text(12, top + plot_h / 2, "s", "middle", 10))
    for position, (label, stat) in enumerate(zip(labels, stats, strict=True)):
        middle = left + box_w * 1.5 * (position + 0.5) + box_w * 0.25
        drawn += [
            _line(middle, y(stat["whislo"]), middle, y(stat["q1"])),
            _line(middle, y(stat["q3"]), middle, y(stat["whishi"])),
            _line(middle - box_w / 4, y(stat["whislo"]), middle + box_w / 4, y(stat["whislo"])),
            _line(middle - box_w / 4, y(stat["whishi"]), middle + box_w / 4, y(stat["whishi"])),
            _rect(middle - box_w / 2, y(stat["q3"]), box_w, y(stat["q1"]) - y(stat["q3"]), BAR),
            _line(middle - box_w / 2, y(stat["med"]), middle + box_w / 2, y(stat["med"])),
            _text(middle, top + plot_h + 14, label, "middle", 10),
        ]
    return _svg(width, top + plot_h + 24, drawn)
