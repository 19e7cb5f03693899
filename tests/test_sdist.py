"""The source distribution carries its own tests: unpacked, the suite collects.

Distributions (Debian, conda-forge) build from the sdist and run its tests; an
sdist without the suite's helpers, examples and docs cannot.  ``MANIFEST.in``
says what goes in; this builds the sdist the way ``python -m build`` does (in an
isolated environment, from ``pyproject.toml``'s build requirements).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import clone_working_tree

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_sdist_holds_the_suite_and_collects_it(tmp_path: Path) -> None:
    pytest.importorskip("build")
    # from a clean copy: a checkout's stale *.egg-info/SOURCES.txt would fill the gaps
    source = clone_working_tree(ROOT, tmp_path / "checkout")
    built = subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir",
                            str(tmp_path / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "license" not in built.stderr.lower() or "deprecat" not in built.stderr.lower(), \
        built.stderr  # the TOML license table stops building in 2027
    [archive] = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    [unpacked] = (tmp_path / "src").iterdir()
    for needed in ("tests/conftest.py", "tests/wire_servers.py", "tests/github_server.py",
                   "tests/sandbox_support.py", "examples/support-bot/conftest.py",
                   "docs/quickstart.md", "action.yml", "action/steps.py", "bench/__main__.py",
                   "LICENSE"):
        assert (unpacked / needed).is_file(), f"the sdist lacks {needed}"
    assert not list(unpacked.rglob("__pycache__"))

    files = ["tests/test_models.py", "tests/test_examples.py", "tests/test_github_pr.py",
             "tests/test_sandbox_backends.py", "tests/test_docs.py"]
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                                "-p", "no:cacheprovider", *files], cwd=unpacked,
                               capture_output=True, text=True, timeout=600, check=False)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert " collected" in collected.stdout
    assert "error" not in collected.stdout.splitlines()[-1]
