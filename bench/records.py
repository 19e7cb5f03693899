"""What every benchmark records: the machine it ran on, and its table in the docs."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

__all__ = ["machine", "refresh_doc"]


def machine(**versions: str) -> dict[str, Any]:
    """The machine a result was measured on, plus any library ``versions`` that matter."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **versions,
    }


def refresh_doc(doc: Path, table: str, markdown: str) -> None:
    """Replace what stands between ``<!-- {table}:start -->`` and ``:end -->`` in ``doc``."""
    start, end = f"<!-- {table}:start -->", f"<!-- {table}:end -->"
    text = doc.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc} lacks the {start} / {end} markers; add them where the table goes")
    doc.write_text(pattern.sub(lambda _m: f"{start}\n{markdown}\n{end}", text), encoding="utf-8")
