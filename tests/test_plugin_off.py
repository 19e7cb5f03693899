"""With the plugin off (``-p no:agentdescent``) every example's suite still runs.

A conftest that implements ``pytest_evolve_propose`` without
``@pytest.hookimpl(optionalhook=True)`` stops pytest with "unknown hook" when
the plugin is not loaded, so a user who copied it could not run their own
suite on a machine without the plugin.  The examples and the docs' snippets
carry the marker; here each example runs with the plugin off and must give
the same passes and failures as with it on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "conftest.py").exists())


def _outcomes(cwd: Path, *args: str) -> tuple[int, dict[str, int], str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    counts = {word: int(n) for n, word in
              re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", result.stdout)}
    return result.returncode, counts, result.stdout + result.stderr


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_runs_with_the_plugin_off(tmp_path: Path, example: str) -> None:
    work = tmp_path / example
    shutil.copytree(ROOT / "examples" / example, work,
                    ignore=shutil.ignore_patterns("__pycache__", ".agentdescent", "build"))

    code_off, off, out_off = _outcomes(work, "-p", "no:agentdescent")
    code_on, on, out_on = _outcomes(work)

    assert "INTERNALERROR" not in out_off, out_off
    assert "unknown hook" not in out_off, out_off
    assert code_off in (0, 1), out_off  # tests ran (some fail before evolving), no usage error
    assert off == on, f"plugin off: {off}\n{out_off}\nplugin on: {on}\n{out_on}"
    assert code_off == code_on
    assert "evolve:" not in out_off  # the summary line is the plugin's, so it is gone


def test_the_examples_exist() -> None:
    # the parametrization above would silently run nothing if the folder moved
    assert {"support-bot", "hello-skill", "claude-skills"} <= set(EXAMPLES)
