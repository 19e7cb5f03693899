"""docs/configuration.md lists every option, ini key, marker, fixture and hook the plugin has.

The names come from what pytest itself reports for a project with the plugin
installed (``--help``, ``--markers``, ``--fixtures`` and the hook relay), not
from the plugin's own tables, so a name registered any other way is caught too.
The check also runs backwards: an option or ini key the page names must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_agentdescent import hooks
from pytest_agentdescent.settings import KNOBS, EvolveSettings

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _help(pytester: pytest.Pytester) -> str:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    return result.stdout.str()


def registered_options(help_text: str) -> set[str]:
    return set(re.findall(r"^\s+(--evolve(?:-[a-z-]+)?)\b", help_text, re.M))


def registered_ini_keys(help_text: str) -> set[str]:
    return set(re.findall(r"^\s+(evolve_[a-z_]+) \(", help_text, re.M))


def test_every_option_and_ini_key_is_documented(pytester: pytest.Pytester, doc: str) -> None:
    text = _help(pytester)
    options, keys = registered_options(text), registered_ini_keys(text)
    assert len(options) >= 18, options  # the parse of --help still works
    assert len(keys) >= 22, keys
    missing = [o for o in sorted(options) if not re.search(rf"`{re.escape(o)}[ `]", doc)]
    missing += [k for k in sorted(keys) if f"`{k}`" not in doc]
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_the_page_names_no_option_that_does_not_exist(pytester: pytest.Pytester,
                                                      doc: str) -> None:
    text = _help(pytester)
    named_options = set(re.findall(r"`(--evolve(?:-[a-z-]+)?)[ `]", doc))
    named_keys = set(re.findall(r"`(evolve_[a-z_]+)`", doc)) - {"evolve_reward", "evolve_guard"}
    assert named_options <= registered_options(text)
    assert named_keys <= registered_ini_keys(text)


def test_every_marker_is_documented(pytester: pytest.Pytester, doc: str) -> None:
    result = pytester.runpytest("--markers")
    markers = re.findall(r"^@pytest\.mark\.(evolve\w*)", result.stdout.str(), re.M)
    assert sorted(markers) == ["evolve", "evolve_guard"]
    for name in markers:
        assert f"`@pytest.mark.{name}" in doc, name
    assert "`@pytest.mark.evolve(weight=1.0, holdout=None)`" in doc


def test_every_fixture_is_documented(pytester: pytest.Pytester, doc: str) -> None:
    result = pytester.runpytest("--fixtures")
    fixtures: list[str] = []
    ours = False
    for line in result.stdout.lines:
        if line.startswith("-") and "fixtures defined from" in line:
            ours = "pytest_agentdescent" in line
        elif ours and re.match(r"^\w+ --", line):
            fixtures.append(line.split()[0])
    assert fixtures == ["evolve_reward"]
    for name in fixtures:
        assert f"| `{name}` |" in doc, name


def test_every_hook_is_documented(pytester: pytest.Pytester, doc: str) -> None:
    config = pytester.parseconfigure()
    names = sorted(
        name for name in dir(config.hook)
        if (spec := getattr(getattr(config.hook, name), "spec", None)) is not None
        and spec.namespace is hooks
    )
    assert names == ["pytest_evolve_propose", "pytest_evolve_report", "pytest_evolve_round"]
    for name in names:
        assert re.search(rf"`{name}\(\w+\)`", doc), name
    for field in hooks.ProposeContext.__dataclass_fields__:
        assert f"`{field}`" in doc, f"ProposeContext.{field}"
    for field in hooks.Failure.__dataclass_fields__:
        assert f"`{field}`" in doc, f"Failure.{field}"
    for field in hooks.RoundSummary.__dataclass_fields__:
        assert f"`{field}`" in doc, f"RoundSummary.{field}"


def _row(doc: str, name: str) -> str:
    for line in doc.splitlines():
        if line.startswith("| `") and (f"`{name} " in line or f"`{name}`" in line):
            return line
    raise AssertionError(f"no table row for {name}")


def test_documented_defaults_are_the_real_ones(doc: str) -> None:
    defaults = EvolveSettings()
    for knob in KNOBS:
        row = _row(doc, knob.option or knob.ini)
        assert f"`{knob.ini}`" in row, knob.ini
        value = getattr(defaults, knob.field)
        if isinstance(value, bool):
            assert f"`{str(value).lower()}`" in row, knob.ini
        elif isinstance(value, (int, float, str)):
            assert f"`{value:g}`" in row if isinstance(value, float) else f"`{value}`" in row, \
                knob.ini
        elif value is None or value == ():
            assert "| none" in row, knob.ini
        else:  # the environment allowlist
            assert " ".join(value) in row, knob.ini
