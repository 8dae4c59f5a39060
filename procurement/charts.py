"""Small server-rendered SVG line charts (no JavaScript): the backtest, a scope's history and the capacity plan."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 760, 240, 44, 28, 12, 12
COLORS = ["#2563eb", "#dc2626", "#9ca3af", "#6b7280", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#be185d"]


@dataclass
class Series:
    name: str
    values: list[float | None]
    dashed: bool = False
    step: bool = False


def line_chart(labels: list[str], series: list[Series], *, title: str) -> SafeString:
    """An SVG chart of ``series`` over ``labels`` (x), with a legend; None values leave gaps."""
    values = [v for s in series for v in s.values if v is not None]
    top = max(values + [1.0]) * 1.1
    n = max(len(labels) - 1, 1)

    def x(i: int) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * i / n

    def y(v: float) -> float:
        return H - PAD_B - (H - PAD_B - PAD_T) * v / top

    parts: list[str] = []
    for k in range(5):
        v = top * k / 4
        parts.append(format_html('<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e5e7eb"/>'
                                 '<text x="{}" y="{}" font-size="10" text-anchor="end" fill="#6b7280">{}</text>',
                                 PAD_L, W - PAD_R, f"{y(v):.1f}", f"{y(v):.1f}", PAD_L - 4, f"{y(v) + 3:.1f}",
                                 f"{v:.0f}"))
    step = max(len(labels) // 8, 1)
    parts.extend(format_html('<text x="{}" y="{}" font-size="10" text-anchor="middle" fill="#6b7280">{}</text>',
                             f"{x(i):.1f}", H - 8, labels[i]) for i in range(0, len(labels), step))
    for j, s in enumerate(series):
        color = COLORS[j % len(COLORS)]
        points: list[str] = []
        for i, v in enumerate(s.values):
            if v is None:
                continue
            if s.step and points:
                points.append(f"{x(i):.1f},{float(points[-1].split(',')[1]):.1f}")
            points.append(f"{x(i):.1f},{y(v):.1f}")
        parts.append(format_html('<polyline data-series="{}" fill="none" stroke="{}" stroke-width="{}" {} points="{}"/>',
                                 s.name, color, 1.2 if s.dashed else 2,
                                 mark_safe('stroke-dasharray="4 3"') if s.dashed else "", " ".join(points)))
    legend = format_html_join("", '<span class="legend-item"><span style="display:inline-block;width:12px;height:3px;'
                              'background:{};vertical-align:middle;margin:0 4px 0 10px"></span>{}</span>',
                              ((COLORS[j % len(COLORS)], s.name) for j, s in enumerate(series)))
    svg = format_html('<svg viewBox="0 0 {} {}" width="100%" role="img" aria-label="{}">{}</svg>', W, H, title,
                      mark_safe("".join(parts)))  # noqa: S308 - every part was built with format_html
    return format_html('<figure class="chart"><figcaption class="small muted">{}</figcaption>{}<div class="small">{}'
                       "</div></figure>", title, svg, legend)
