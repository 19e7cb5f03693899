"""A suite shaped like a real project's scores the same sandboxed as under plain pytest.

The first thing a user checks is that ``pytest --evolve`` scores their tests as
``pytest`` does.  Our own example suites are too tidy to show where that breaks,
so this one is built the way real projects' suites are: configuration in
pytest 9's native ``[tool.pytest]`` table with ``--strict-config`` and
``--import-mode=importlib``, a ``src/`` layout reached through ``pythonpath``,
a version module that is generated at install and gitignored, conftests in a
subfolder, pytest-asyncio and hypothesis tests (hypothesis writes its example
database into the repository), doctest modules selected as tasks with
``evolve_tasks``, a parametrization fed by a generator, tests that write into
the repository, and deliberate failures so the reward is neither 0 nor 1.

Each backend runs the baseline only (``--evolve-rounds 0 --evolve-dry-run``);
its ``reward_before`` must be the plain run's ``evolve: N tasks, reward R``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import user_git, write
from sandbox_support import ALL_BACKENDS, require_backend
from test_session_runs import evolve, explain, plain_reward, report_of, user_visible

pytestmark = pytest.mark.slow

PYPROJECT = '''\
[project]
name = "minihuman"
version = "0.0.0"

[tool.pytest]
minversion = "9.0"
addopts = ["--strict-config", "--strict-markers", "--import-mode=importlib",
           "--doctest-modules", "-p", "no:cacheprovider"]
testpaths = ["tests", "src"]
pythonpath = ["src"]
asyncio_mode = "strict"
markers = ["network: needs the network (never here)"]
evolve_tasks = "natural_list or doctest_natural_pairs"
'''

GITIGNORE = """\
/src/minihuman/_version.py
.hypothesis/
*.egg-info/
__pycache__/
/out/
"""

PACKAGE = '''\
"""Humanize things, a little."""

from minihuman._version import __version__
from minihuman.lists import natural_list

__all__ = ["__version__", "natural_list"]
'''

LISTS = '''\
"""Lists in words."""


def natural_list(items):
    """Join ``items`` the way people write them.

    >>> natural_list(["a", "b", "c"])
    'a, b and c'
    >>> natural_list(["a"])
    'a'
    """
    items = [str(item) for item in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def doctest_natural_pairs():
    """A doctest that fails: the rule for two items is not written yet.

    >>> natural_list(["a", "b"])
    'a or b'
    """
'''

ROOT_CONFTEST = '''\
import pytest


@pytest.fixture
def words():
    return ["one", "two", "three"]
'''

UNIT_CONFTEST = '''\
import pytest


@pytest.fixture
def separator(words):
    return " and " if len(words) > 1 else ""
'''

UNIT_TESTS = '''\
import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minihuman
from minihuman import natural_list

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.evolve
@pytest.mark.parametrize("item", (c for c in "abc"))
def test_one_item_is_itself(item):
    assert natural_list([item]) == item


@pytest.mark.evolve
def test_version_is_generated():
    assert minihuman.__version__ == "1.2.3"


@pytest.mark.evolve
def test_fixtures_from_two_conftests(words, separator):
    assert natural_list(words).endswith(separator + words[-1])


@pytest.mark.evolve(weight=2.0)
def test_two_items_use_or():
    assert natural_list(["tea", "cake"]) == "tea or cake"


@pytest.mark.evolve
@pytest.mark.asyncio
async def test_async_join():
    await asyncio.sleep(0)
    assert natural_list(["x", "y", "z"]) == "x, y and z"


@pytest.mark.evolve
@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="abc", min_size=1), min_size=2, max_size=4))
def test_last_item_is_at_the_end(items):
    assert natural_list(items).endswith(items[-1])


@pytest.mark.evolve
def test_writes_a_report_into_the_repository():
    out = REPO / "out"
    out.mkdir(exist_ok=True)
    target = out / "lists.txt"
    assert not target.exists(), "a file from an earlier run is still there"
    target.write_text(natural_list(["a", "b", "c"]))
    assert target.read_text() == "a, b and c"
    target.unlink()


@pytest.mark.network
def test_not_a_task():
    assert natural_list([]) == ""
'''


def make_real_shaped_repo(path: Path) -> None:
    """A committed repository shaped like a real project; ``_version.py`` generated, ignored."""
    path.mkdir(parents=True)
    user_git(path, "init", "--quiet", "--initial-branch=main")
    write(path / "pyproject.toml", PYPROJECT)
    write(path / ".gitignore", GITIGNORE)
    write(path / "src/minihuman/__init__.py", PACKAGE)
    write(path / "src/minihuman/lists.py", LISTS)
    write(path / "tests/conftest.py", ROOT_CONFTEST)
    write(path / "tests/unit/conftest.py", UNIT_CONFTEST)
    write(path / "tests/unit/test_lists.py", UNIT_TESTS)
    write(path / "skills/humanizer/SKILL.md", "# Humanizer\n\nJoin lists with 'and'.\n")
    user_git(path, "add", "-A")
    user_git(path, "commit", "--quiet", "-m", "a real-shaped project")
    # generated at install time (hatch-vcs style): in the working tree, never committed
    write(path / "src/minihuman/_version.py", '__version__ = "1.2.3"\n')


def _outside_tool_caches(files: dict[str, str]) -> dict[str, str]:
    """The snapshot without hypothesis' cache, which ``pytest --evolve``'s own collection
    (in the repository, as any pytest run) writes to like plain pytest does."""
    return {k: v for k, v in files.items() if not k.startswith(".hypothesis/")}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_the_sandboxed_baseline_is_the_plain_runs_reward(tmp_path: Path, backend: str
                                                         ) -> None:
    require_backend(backend)
    repo = tmp_path / "project"
    make_real_shaped_repo(repo)
    tasks, reward = plain_reward(repo)
    before = _outside_tool_caches(user_visible(repo))
    # 3 one-item cases, version, two conftests, async, hypothesis, the write, the
    # "or" test (weight 2, fails) and two doctests of lists.py (one fails): 9 of 12
    assert tasks == 11
    assert reward == pytest.approx(9 / 12, abs=5e-4)

    result = evolve(repo, "--evolve-rounds", "0", "--evolve-dry-run",
                    "--evolve-sandbox", backend, "--evolve-workers", "1", every_plugin=True)

    assert result.returncode == 0, explain(result)
    # no proposer is needed to measure the baseline only
    assert "proposer: none (--evolve-rounds 0" in result.stdout
    report = report_of(repo)
    assert report["reward_before"] == pytest.approx(reward, abs=5e-4), explain(result)
    assert len(report["tasks"]) == tasks
    failing = sorted(row["nodeid"] for row in report["tasks"] if row["before"] == 0.0)
    assert failing == [
        "src/minihuman/lists.py::minihuman.lists.doctest_natural_pairs",
        "tests/unit/test_lists.py::test_two_items_use_or",
    ], explain(result)
    # the working tree is as it was: what the sandboxed tests wrote stayed in the sandbox
    assert _outside_tool_caches(user_visible(repo)) == before
