"""Small Markdown building blocks shared by ``report.md`` and the pull request body.

Both documents are read on GitHub, so they follow the same conventions: numbers
with a fixed number of digits and an en dash for "not measured", table cells that
cannot break the table (pipes escaped, one line), code spans that survive
backticks in test ids, and Mermaid ``xychart-beta`` line charts, which GitHub
renders natively.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def number_or_none(value: object) -> float | None:
    """``value`` as a finite float, or None (None, booleans, text, NaN and inf all give None)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def num(value: object, digits: int = 3) -> str:
    """A number with ``digits`` decimals, or an en dash when there is none."""
    number = number_or_none(value)
    return "–" if number is None else f"{number:.{digits}f}"


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: object) -> str:
    """A code span that stays one span even when the text holds a backtick."""
    raw = cell(text)
    fence = "``" if "`" in raw else "`"
    return f"{fence}{raw}{fence}"


def sha(value: object) -> str:
    """A commit id shortened to 12 characters, as a code span."""
    return code(str(value)[:12]) if value else "–"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table (cells must already be escaped with :func:`cell`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def line_chart(title: str, x_labels: Sequence[str], values: Sequence[float], y_label: str,
               ) -> list[str]:
    """A fenced Mermaid ``xychart-beta`` line chart with a 0 → 1 y axis."""
    return [
        "```mermaid",
        "xychart-beta",
        f'    title "{title}"',
        "    x-axis [" + ", ".join(x_labels) + "]",
        f'    y-axis "{y_label}" 0 --> 1',
        "    line [" + ", ".join(f"{v:.3f}" for v in values) + "]",
        "```",
    ]
