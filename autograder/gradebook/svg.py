"""The class report's figures, drawn as inline SVG: no plotting library, nothing fetched, nothing run.

Each function returns one `<svg>` element with its alt text as `<title>` and `aria-label`; every
text it draws is escaped (a student id or an item's wording is never markup). Colours are a
colour-blind-safe palette (Paul Tol's), and each figure is followed on the page by a table of the
same numbers.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

BLUE, RED, GREY, SAND, PALE, INK = "#4477aa", "#cc6677", "#bbbbbb", "#ddcc77", "#eeeeee", "#222222"
FONT = 'font-family="system-ui,sans-serif" font-size="11"'


def _text(value) -> str:
    return html.escape(str(value), quote=True)


def _svg(width: float, height: float, alt: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_text(alt)}" '
        f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" {FONT}>'
        f"<title>{_text(alt)}</title>" + "".join(body) + "</svg>"
    )


def _label(x: float, y: float, text, anchor: str = "start", size: int = 11) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{INK}">{_text(text)}</text>'


def _rect(x: float, y: float, width: float, height: float, fill: str, title: str = "", edge: str = "") -> str:
    tip = f"<title>{_text(title)}</title>" if title else ""
    stroke = f' stroke="{edge}"' if edge else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(width, 0):.1f}" height="{max(height, 0):.1f}" fill="{fill}"'
        f"{stroke}>{tip}</rect>"
    )


def bars(alt: str, labels: Sequence[str], shares: Sequence[float | None], axis: str) -> str:
    """Horizontal bars of shares between 0 and 1, one per label, top to bottom; a share under one
    half in red; None (nothing to show) as an empty row."""
    left, width, row = 260, 420, 16
    height = 30 + row * len(labels) + 30
    body = []
    for tick in (0, 0.25, 0.5, 0.75, 1):
        x = left + width * tick
        body.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height - 30}" stroke="{PALE}"/>')
        body.append(_label(x, height - 16, f"{tick:g}", "middle"))
    for index, (label, share) in enumerate(zip(labels, shares, strict=True)):
        y = 24 + row * index
        body.append(_label(left - 6, y + row * 0.7, label[:48], "end", 10))
        if share is not None:
            colour = RED if share < 0.5 else BLUE
            body.append(_rect(left, y + 2, width * share, row - 4, colour, f"{label}: {share:.2f}"))
    body.append(_label(left + width / 2, height - 2, axis, "middle"))
    return _svg(left + width + 20, height, alt, body)


def histograms(alt: str, parts: Sequence[tuple[str, Sequence[tuple[float, float, int]]]]) -> str:
    """One small histogram per part (its title, and its bins: low edge, high edge, count), three
    to a row."""
    panel_w, panel_h, columns = 230, 150, 3
    rows = -(-len(parts) // columns)
    body = []
    for index, (title, bins) in enumerate(parts):
        ox, oy = (index % columns) * panel_w, (index // columns) * panel_h
        top = max([count for _, _, count in bins] + [1])
        inner_w, inner_h = panel_w - 50, panel_h - 55
        body.append(_label(ox + panel_w / 2, oy + 14, title, "middle", 12))
        step = inner_w / max(len(bins), 1)
        for position, (low, high, count) in enumerate(bins):
            bar = inner_h * count / top
            x, y = ox + 35 + position * step, oy + 22 + inner_h - bar
            body.append(_rect(x + 1, y, step - 2, bar, BLUE, f"{low:g} to {high:g} points: {count} student(s)"))
        base = oy + 22 + inner_h
        body.append(f'<line x1="{ox + 35}" y1="{base:.1f}" x2="{ox + 35 + inner_w}" y2="{base:.1f}" stroke="{INK}"/>')
        body.append(_label(ox + 31, oy + 30, top, "end", 9))
        body.append(_label(ox + 31, base, 0, "end", 9))
        if bins:
            body.append(_label(ox + 35, base + 12, f"{bins[0][0]:g}", "middle", 9))
            body.append(_label(ox + 35 + inner_w, base + 12, f"{bins[-1][1]:g}", "middle", 9))
        body.append(_label(ox + 35 + inner_w / 2, base + 26, "points (bars: students)", "middle", 9))
    return _svg(panel_w * min(columns, max(len(parts), 1)), panel_h * rows, alt, body)


def boxes(alt: str, labels: Sequence[str], stats: Sequence[dict]) -> str:
    """A box per label: whiskers at least and most, the box from the first to the third quartile,
    a line at the median (`stats`: whislo, q1, med, q3, whishi)."""
    left, height, column = 50, 220, 110
    top = max([s["whishi"] for s in stats] + [1.0])
    scale = (height - 50) / top

    def y(value: float) -> float:
        return height - 30 - value * scale

    body = []
    for tick in (0, top / 2, top):
        body.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + column * len(labels)}" y2="{y(tick):.1f}" ')
        body[-1] += f'stroke="{PALE}"/>'
        body.append(_label(left - 4, y(tick) + 4, f"{tick:.0f}", "end", 9))
    for index, (label, s) in enumerate(zip(labels, stats, strict=True)):
        cx = left + column * index + column / 2
        body.append(f'<line x1="{cx:.1f}" y1="{y(s["whislo"]):.1f}" x2="{cx:.1f}" y2="{y(s["whishi"]):.1f}" ')
        body[-1] += f'stroke="{INK}"/>'
        tip = f"{label}: least {s['whislo']:.1f}, median {s['med']:.1f}, most {s['whishi']:.1f} s"
        # (a box of one student, or of equal times, is drawn 2 px high: still seen)
        body.append(_rect(cx - 20, y(s["q3"]) - 1, 40, max(y(s["q1"]) - y(s["q3"]), 0) + 2, BLUE, tip))
        body.append(f'<line x1="{cx - 20:.1f}" y1="{y(s["med"]):.1f}" x2="{cx + 20:.1f}" y2="{y(s["med"]):.1f}" ')
        body[-1] += 'stroke="#ffffff" stroke-width="2"/>'
        body.append(_label(cx, height - 14, label, "middle", 10))
    body.append(_label(12, 14, "seconds", "start", 10))
    return _svg(left + column * max(len(labels), 1) + 10, height, alt, body)


def grid(
    alt: str,
    rows: Sequence[str],
    columns: Sequence[str],
    cells: Sequence[Sequence[str]],
    palette: dict[str, tuple[str, str]],
) -> str:
    """A square per row and column, coloured by its category (`cells[row][column]`, a key of
    `palette`: category -> (colour, what it means)), with a legend."""
    left, size, top = 150, 14, 20
    width = left + size * len(columns) + 10
    legend_y = top + size * len(rows) + 16
    body = []
    for r, (row, values) in enumerate(zip(rows, cells, strict=True)):
        y = top + size * r
        body.append(_label(left - 6, y + size * 0.8, row[:24], "end", 10))
        for c, value in enumerate(values):
            colour, meaning = palette[value]
            tip = f"{row}, {columns[c]}: {meaning}"
            body.append(_rect(left + size * c + 1, y + 1, size - 2, size - 2, colour, tip, GREY))
    for index, (colour, meaning) in enumerate(palette.values()):
        x = 10 + 230 * (index % 3)
        y = legend_y + 18 * (index // 3)
        body.append(_rect(x, y, 12, 12, colour, edge=GREY))
        body.append(_label(x + 16, y + 10, meaning, "start", 10))
    height = legend_y + 18 * (-(-len(palette) // 3)) + 6
    return _svg(max(width, 690), height, alt, body)
