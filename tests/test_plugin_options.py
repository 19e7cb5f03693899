"""Options, ini keys and their validation; hook registration; when the controller starts.

Settings are read from real pytest configurations built by pytester
(``parseconfig`` parses the command line and the ini file without configuring,
so ``--evolve`` can be tested without starting an evolution); the end-to-end
behaviour (exit code 4, the message on stderr) is checked with in-process runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentdescent_core.evaluation.journal import CHILD_ENV
from agentdescent_core.sandbox.env import DEFAULT_ENV_ALLOWLIST
from pytest_agentdescent.settings import (
    DEFAULT_REPEATS,
    KNOBS,
    SETTINGS_KEY,
    EvolveSettings,
    read_settings,
)


def settings_of(pytester: pytest.Pytester, *args: str) -> EvolveSettings:
    return read_settings(pytester.parseconfig(*args))


def usage_error(pytester: pytest.Pytester, *args: str) -> str:
    with pytest.raises(pytest.UsageError) as info:
        settings_of(pytester, *args)
    return str(info.value)


# ---------------------------------------------------------------- defaults and values

def test_plain_run_has_default_settings_and_evolution_off(pytester: pytest.Pytester) -> None:
    settings = settings_of(pytester)
    assert settings == EvolveSettings()
    assert not settings.enabled
    assert settings.rounds == 10
    assert settings.workers == 2
    assert settings.sandbox == "auto"
    assert settings.network == "default"
    assert settings.holdout == 0.25
    assert settings.env == DEFAULT_ENV_ALLOWLIST
    assert settings.state_dir == ".agentdescent"
    assert settings.branch_prefix == "agentdescent/"


def test_default_repeats_is_the_engines() -> None:
    from agentdescent_core.stats import DEFAULT_REPEATS as engine_default

    assert engine_default == DEFAULT_REPEATS
    assert EvolveSettings().repeats == engine_default


def test_every_field_has_one_knob_with_the_design_names() -> None:
    assert [k.field for k in KNOBS] == [f for f in EvolveSettings.__dataclass_fields__]
    for knob in KNOBS:
        if knob.option is None:
            continue
        expected = "evolve_paths" if knob.option == "--evolve" else \
            knob.option.removeprefix("--").replace("-", "_")
        assert knob.ini == expected


def test_command_line_values(pytester: pytest.Pytester) -> None:
    (pytester.path / "skills").mkdir()
    (pytester.path / "AGENTS.md").write_text("# agents\n")
    settings = settings_of(
        pytester,
        "--evolve", "skills/", "--evolve", "AGENTS.md",
        "--evolve-rounds", "0", "--evolve-workers", "3", "--evolve-repeats", "4",
        "--evolve-model", "anthropic:claude-sonnet-4-5", "--evolve-sandbox", "local",
        "--evolve-network", "none", "--evolve-frozen", "skills/*/LICENSE",
        "--evolve-dry-run", "--evolve-target", "1", "--evolve-patience", "2",
        "--evolve-max-calls", "7", "--evolve-max-usd", "0.5", "--evolve-max-tokens", "9000",
        "--evolve-seed", "-3",
        "--evolve-state-dir", "build/state", "--evolve-branch-prefix", "bots/evolve-",
        "--evolve-promote-after", "1",
    )
    assert settings.enabled
    assert settings.paths == (str(pytester.path / "skills"), str(pytester.path / "AGENTS.md"))
    assert (settings.rounds, settings.workers, settings.repeats) == (0, 3, 4)
    assert settings.model == "anthropic:claude-sonnet-4-5"
    assert (settings.sandbox, settings.network) == ("local", "none")
    assert settings.frozen == ("skills/*/LICENSE",)
    assert settings.dry_run is True
    assert settings.pr is False
    assert (settings.target, settings.patience, settings.max_calls) == (1.0, 2, 7)
    assert settings.max_usd == 0.5
    assert settings.max_tokens == 9000
    assert settings.seed == -3
    assert settings.state_dir == "build/state"
    assert settings.branch_prefix == "bots/evolve-"
    assert settings.promote_after == 1


def test_ini_fallback_for_every_key(pytester: pytest.Pytester) -> None:
    (pytester.path / "skills").mkdir()
    (pytester.path / "prompts").mkdir()
    pytester.makeini(
        """
        [pytest]
        evolve_paths = skills prompts
        evolve_rounds = 4
        evolve_workers = 1
        evolve_repeats = 3
        evolve_model = openai:gpt-4o-mini
        evolve_sandbox = bwrap
        evolve_network = none
        evolve_frozen =
            skills/LICENSE
            prompts/*.lock
        evolve_dry_run = true
        evolve_target = 0.9
        evolve_patience = 5
        evolve_max_calls = 20
        evolve_max_usd = 2.5
        evolve_max_tokens = 120000
        evolve_seed = 11
        evolve_state_dir = .state
        evolve_branch_prefix = ad/
        evolve_promote_after = 2
        evolve_holdout = 0
        evolve_env =
            PATH
            MY_AGENT_*
        evolve_test_timeout = 5.5
        evolve_eval_concurrency = 2
        """
    )
    settings = settings_of(pytester)
    assert settings == EvolveSettings(
        paths=(str(pytester.path / "skills"), str(pytester.path / "prompts")),
        rounds=4, workers=1, repeats=3, model="openai:gpt-4o-mini", sandbox="bwrap",
        network="none", frozen=("skills/LICENSE", "prompts/*.lock"), dry_run=True,
        target=0.9, patience=5, max_calls=20, max_usd=2.5, max_tokens=120_000, seed=11,
        state_dir=".state",
        branch_prefix="ad/", promote_after=2, holdout=0.0, env=("PATH", "MY_AGENT_*"),
        test_timeout=5.5, eval_concurrency=2,
    )


def test_model_keys_from_the_ini(pytester: pytest.Pytester) -> None:
    (pytester.path / "prompts").mkdir()
    (pytester.path / "prompts" / "user.txt").write_text("${failures}\n")
    pytester.makeini(
        """
        [pytest]
        evolve_llm_cache = replay
        evolve_prompt = prompts/user.txt
        evolve_script_policy = reject
        evolve_violation_limit = 5
        evolve_prices =
            my-local-model = 0 0
            gpt-x = 1.5 6
        """
    )
    settings = settings_of(pytester)
    assert settings.llm_cache == "replay"
    assert settings.prompt == str(pytester.path / "prompts" / "user.txt")
    assert settings.script_policy == "reject"
    assert settings.violation_limit == 5
    assert settings.prices == (("my-local-model", 0.0, 0.0), ("gpt-x", 1.5, 6.0))
    assert settings_of(pytester, "--evolve-llm-cache", "off").llm_cache == "off"
    assert settings.llm_cache_ttl == 7 * 86400.0  # the default week
    through = settings_of(pytester, "--evolve-llm-cache", "read-through",
                          "--evolve-llm-cache-ttl", "36h")
    assert (through.llm_cache, through.llm_cache_ttl) == ("read-through", 36 * 3600.0)


def test_command_line_wins_over_ini(pytester: pytest.Pytester) -> None:
    (pytester.path / "skills").mkdir()
    (pytester.path / "other").mkdir()
    pytester.makeini(
        """
        [pytest]
        evolve_paths = skills
        evolve_rounds = 4
        evolve_sandbox = docker
        evolve_frozen = skills/LICENSE
        """
    )
    settings = settings_of(pytester, "--evolve", "other", "--evolve-rounds", "6",
                           "--evolve-sandbox", "local", "--evolve-frozen", "other/keep.md")
    assert settings.paths == (str(pytester.path / "other"),)
    assert settings.rounds == 6
    assert settings.sandbox == "local"
    # frozen globs add up: the command line can freeze more, never unfreeze the ini's
    assert settings.frozen == ("skills/LICENSE", "other/keep.md")


def test_ini_paths_resolve_against_the_ini_file_and_cli_paths_against_the_cwd(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pytester.path / "skills").mkdir()
    (pytester.path / "sub" / "skills").mkdir(parents=True)
    pytester.makeini("[pytest]\nevolve_paths = skills\n")
    monkeypatch.chdir(pytester.path / "sub")
    assert settings_of(pytester).paths == (str(pytester.path / "skills"),)
    assert settings_of(pytester, "--evolve", "skills").paths == \
        (str(pytester.path / "sub" / "skills"),)


def test_native_toml_numbers(pytester: pytest.Pytester) -> None:
    if tuple(int(p) for p in pytest.__version__.split(".")[:2]) < (9, 0):
        pytest.skip("native [tool.pytest] TOML tables arrived with pytest 9")
    pytester.makepyprojecttoml(
        """
        [tool.pytest]
        evolve_rounds = 3
        evolve_holdout = 0.5
        evolve_dry_run = true
        evolve_frozen = ["a/*.md"]
        """
    )
    settings = settings_of(pytester)
    assert (settings.rounds, settings.holdout, settings.dry_run) == (3, 0.5, True)
    assert settings.frozen == ("a/*.md",)


def test_settings_are_read_once_and_cached(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("--evolve-rounds", "2")
    first = read_settings(config)
    assert config.stash[SETTINGS_KEY] is first
    assert read_settings(config) is first


# ---------------------------------------------------------------- usage errors

@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--evolve-rounds", "x"),
         "--evolve-rounds must be an integer >= 0, got 'x' (ini evolve_rounds)"),
        (("--evolve-rounds", "-1"), "--evolve-rounds must be an integer >= 0, got '-1'"),
        (("--evolve-workers", "0"), "--evolve-workers must be an integer >= 1, got '0'"),
        (("--evolve-repeats", "1.5"), "--evolve-repeats must be an integer >= 1, got '1.5'"),
        (("--evolve-model", "claude"),
         "--evolve-model must be 'anthropic:MODEL' or 'openai:MODEL', got 'claude'"),
        (("--evolve-model", "mistral:large"), "got 'mistral:large'"),
        (("--evolve-model", "openai:"), "got 'openai:'"),
        (("--evolve-sandbox", "vm"),
         "--evolve-sandbox must be one of auto|local|bwrap|docker, got 'vm'"),
        (("--evolve-network", "host"), "--evolve-network must be one of none|default"),
        (("--evolve-target", "0"), "--evolve-target must be a number in (0, 1], got '0'"),
        (("--evolve-target", "1.5"), "got '1.5'"),
        (("--evolve-target", "nan"), "got 'nan'"),
        (("--evolve-patience", "0"), "--evolve-patience must be an integer >= 1"),
        (("--evolve-max-calls", "0"), "--evolve-max-calls must be an integer >= 1"),
        (("--evolve-max-usd", "0"), "--evolve-max-usd must be a number > 0, got '0'"),
        (("--evolve-max-usd", "inf"), "got 'inf'"),
        (("--evolve-max-tokens", "0"),
         "--evolve-max-tokens must be an integer >= 1, got '0' (ini evolve_max_tokens)"),
        (("--evolve-max-tokens", "1e6"), "--evolve-max-tokens must be an integer >= 1"),
        (("--evolve-seed", "one"), "--evolve-seed must be an integer, got 'one'"),
        (("--evolve-state-dir", " "), "--evolve-state-dir must be a non-empty path"),
        (("--evolve-promote-after", "0"), "--evolve-promote-after must be an integer >= 1"),
        (("--evolve-branch-prefix", "bad..name/"),
         "--evolve-branch-prefix must be a valid branch prefix"),
        (("--evolve", "missing/"), "--evolve must be an existing file or directory, "
                                   "got 'missing/' (ini evolve_paths)"),
        (("--evolve-llm-cache", "always"),
         "--evolve-llm-cache must be one of off|record|replay|read-through, got 'always'"),
        (("--evolve-llm-cache-ttl", "a week"),
         "--evolve-llm-cache-ttl must be a duration such as 7d, 12h, 30m or 90s, got 'a week'"),
    ],
)
def test_bad_command_line_values(
    pytester: pytest.Pytester, args: tuple[str, ...], expected: str
) -> None:
    assert expected in usage_error(pytester, *args)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("evolve_holdout = 1", "ini evolve_holdout must be a number in [0, 1)"),
        ("evolve_holdout = -0.1", "ini evolve_holdout must be a number in [0, 1)"),
        ("evolve_test_timeout = 0", "ini evolve_test_timeout must be a number > 0, got"),
        ("evolve_eval_concurrency = 0", "ini evolve_eval_concurrency must be an integer >= 1"),
        ("evolve_workers = 0",
         "ini evolve_workers (the ini key of --evolve-workers) must be an integer >= 1"),
        ("evolve_sandbox = vm", "ini evolve_sandbox (the ini key of --evolve-sandbox)"),
        ("evolve_rounds = many", "ini evolve_rounds (the ini key of --evolve-rounds) must be "
                                 "an integer >= 0"),
        ("evolve_dry_run = perhaps", "ini evolve_dry_run (the ini key of --evolve-dry-run)"),
        ("evolve_env = GITHUB_TOKEN", "GITHUB_TOKEN is a credential that is never passed"),
        ("evolve_script_policy = ignore", "ini evolve_script_policy must be one of warn|reject"),
        ("evolve_violation_limit = 0", "ini evolve_violation_limit must be an integer >= 1"),
        ("evolve_max_tokens = lots", "ini evolve_max_tokens (the ini key of "
                                     "--evolve-max-tokens) must be an integer >= 1"),
        ("evolve_prices = gpt-x = 1", "ini evolve_prices must be lines 'MODEL = INPUT_USD "
                                      "OUTPUT_USD'"),
        ("evolve_prices = gpt-x = 1 -2", "got"),
        ("evolve_prompt = nowhere.txt", "ini evolve_prompt must be an existing template file"),
        ("evolve_llm_cache = on",
         "ini evolve_llm_cache (the ini key of --evolve-llm-cache) must be one of off|record"),
        ("evolve_llm_cache_ttl = 0d",
         "ini evolve_llm_cache_ttl (the ini key of --evolve-llm-cache-ttl) must be a duration"),
    ],
)
def test_bad_ini_values(pytester: pytest.Pytester, line: str, expected: str) -> None:
    pytester.makeini(f"[pytest]\n{line}\n")
    assert expected in usage_error(pytester)


def test_a_bad_value_is_a_usage_error_of_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--evolve-workers", "none")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --evolve-workers must be an integer >= 1, got 'none' (ini evolve_workers)"]
    )


def test_help_works_while_an_ini_value_is_wrong(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nevolve_rounds = many\n")
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["agentdescent:*", "*--evolve=PATH*"])


# ---------------------------------------------------------------- modes of a run

def test_child_of_an_evaluation_is_always_a_plain_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pytester.path / "skills").mkdir()
    pytester.makeini("[pytest]\nevolve_paths = skills\nevolve_rounds = bad\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.evolve\ndef test_task():\n    pass\n")
    monkeypatch.setenv(CHILD_ENV, "1")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["evolve: 1 task, reward 1.000"])


def test_evolve_registers_the_controller(pytester: pytest.Pytester) -> None:
    session = pytest.importorskip("pytest_agentdescent.session")
    (pytester.path / "skills").mkdir()
    config = pytester.parseconfigure("--evolve", "skills")
    controller = config.pluginmanager.get_plugin("agentdescent-session")
    assert isinstance(controller, session.EvolveSession)
    assert config.pluginmanager.get_plugin("agentdescent-summary") is None


def test_plain_run_registers_no_controller(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    assert config.pluginmanager.get_plugin("agentdescent-session") is None
    assert config.pluginmanager.get_plugin("agentdescent-summary") is not None


def test_xdist_with_evolve_is_refused(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    (pytester.path / "skills").mkdir()
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--evolve", "skills", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --evolve cannot run under pytest-xdist (-n 2)*-n 0*"])


@pytest.mark.parametrize(("addopts", "shown"), [("-n 2", "-n 2"), ("--dist load", "--dist load")])
def test_xdist_advice_from_addopts_works_when_followed(
    pytester: pytest.Pytester, addopts: str, shown: str
) -> None:
    """The refusal names an option; adding exactly that option gets past the refusal."""
    pytest.importorskip("xdist")
    (pytester.path / "skills").mkdir()
    pytester.makeini(f"[pytest]\naddopts = {addopts}\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    refused = pytester.runpytest("--evolve", "skills")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    message = refused.stderr.str()
    assert f"pytest-xdist ({shown})" in message
    advice = message.split("Add ", 1)[1].split(" to the --evolve command line", 1)[0]
    assert "no:xdist" not in message
    followed = pytester.runpytest("--evolve", "skills", *advice.split())
    # past the xdist refusal: the next complaint is that there is no proposer / task
    assert "pytest-xdist" not in followed.stderr.str()
    assert "unrecognized arguments" not in followed.stderr.str()


#: Loaded by an ``--evolve`` controller, never by a plain run or a child: the engine's
#: package ``__init__``s export lazily (``agentdescent_core/lazy.py``), so importing one
#: small module of a package does not import the rest of it.
HEAVY = ("numpy", "scipy", "git", "anthropic", "openai", "docker", "pathspec",
         "agentdescent_core.artifacts.filetree", "agentdescent_core.governance",
         "agentdescent_core.evaluation.protocol", "agentdescent_core.sandbox.select",
         "agentdescent_core.stats.samples")


def test_plugin_import_stays_light() -> None:
    # what a plain run and a child run import: the plugin, its hookspecs, the recorder
    code = (
        "import sys, pytest_agentdescent.plugin, pytest_agentdescent.settings, "
        "pytest_agentdescent.summary, pytest_agentdescent.markers, "
        "pytest_agentdescent.hooks, pytest_agentdescent.recorder\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- hooks

def test_hookspecs_are_registered(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    for name in ("pytest_evolve_propose", "pytest_evolve_round", "pytest_evolve_report"):
        caller = getattr(config.hook, name)
        assert caller.spec is not None, name
    spec = config.hook.pytest_evolve_propose.spec
    assert spec is not None
    assert spec.opts["firstresult"] is True


def test_conftest_proposer_is_called_first_answer_wins(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_evolve_propose(context):
            if not context.failures:
                return None
            return {"skills/a.md": context.files["skills/a.md"] + context.failures[0].message}
        """
    )
    pytester.makepyfile(
        """
        import random
        from pytest_agentdescent.hooks import Failure, ProposeContext

        def test_call_the_hook(pytestconfig):
            fail = Failure("t.py::test_x", "failed", 0.0, "say hi", "", "def test_x(): ...")
            ctx = ProposeContext({"skills/a.md": "rules: "}, ("skills",), (fail,), 1, "w0", 3,
                                 random.Random(0))
            answer = pytestconfig.hook.pytest_evolve_propose(context=ctx)
            assert answer == {"skills/a.md": "rules: say hi"}
            empty = ProposeContext({}, ("skills",), (), 1, "w0", 3, random.Random(0))
            assert pytestconfig.hook.pytest_evolve_propose(context=empty) is None
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_a_misspelled_hook_argument_is_rejected(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_evolve_propose(ctx):\n    return None\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret != pytest.ExitCode.OK
    assert "pytest_evolve_propose" in result.stdout.str() + result.stderr.str()


def test_options_documented_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for knob in KNOBS:
        if knob.option:
            assert f"{knob.option}=" in text or f"{knob.option} " in text, knob.option
        assert f"{knob.ini} (" in text, knob.ini


def test_an_empty_evolve_env_passes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nevolve_env =\n")
    assert settings_of(pytester).env == ()


@pytest.mark.parametrize(("pattern", "said"), [
    ("[z-a]", "frozen pattern '[z-a]' is not a valid glob"),
    ("skills/a[b", "frozen pattern 'skills/a[b' matches nothing"),
])
def test_a_bad_frozen_glob_is_a_usage_error_naming_it(pytester: pytest.Pytester, pattern: str,
                                                      said: str) -> None:
    subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
    (pytester.path / "skills").mkdir()
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--evolve", "skills", "--evolve-frozen", pattern,
                                "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert said in result.stderr.str()
    assert "--evolve-frozen (ini evolve_frozen)" in result.stderr.str()


def test_bracket_globs_freeze_what_git_would_match(pytester: pytest.Pytester) -> None:
    """``[]]`` once crashed pytest (INTERNALERROR); it freezes a file named ``]``."""
    subprocess.run(["git", "init", "-q"], cwd=pytester.path, check=True)
    (pytester.path / "skills").mkdir()
    (pytester.path / "skills" / "]").write_text("x\n")
    (pytester.path / "skills" / "a").write_text("x\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.evolve\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--evolve", "skills", "--evolve-frozen", "skills/[]]",
                                "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str()
    assert "  skills/[]]" in result.stdout.lines
