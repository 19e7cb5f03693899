"""Python examples in docs/*.md marked ``<!-- runnable -->`` run as written.

tests/test_docs.py runs the shell commands of the docs; this runs the Python
examples that claim to be complete, so an API change that breaks them fails
here rather than in a reader's notebook.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = re.compile(r"<!-- runnable -->\s*\n```python\n(.*?)^```", re.S | re.M)

EXAMPLES = [
    pytest.param(doc, index, code, id=f"{doc.name}:{index}")
    for doc in sorted((ROOT / "docs").glob("*.md"))
    for index, code in enumerate(RUNNABLE.findall(doc.read_text(encoding="utf-8")))
]


def test_the_engine_page_has_a_runnable_example() -> None:
    assert any(isinstance(p.id, str) and p.id.startswith("engine.md:") for p in EXAMPLES)


@pytest.mark.parametrize(("doc", "index", "code"), EXAMPLES)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_runnable_example(doc: Path, index: int, code: str, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / f"{doc.stem}_{index}.py"
    script.write_text(code, encoding="utf-8")
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip(), f"example {index} of {doc.name} printed nothing"
