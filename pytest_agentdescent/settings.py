"""The settings of ``pytest --evolve``: one table of knobs, read once per run.

Every setting has a command-line option in the ``agentdescent`` group and an ini
key of the same name (``--evolve-rounds`` <-> ``evolve_rounds``; ``--evolve`` <->
``evolve_paths``); a few tuning knobs are ini-only.  The command line wins over
the ini file.  :data:`KNOBS` is the single description of them: the plugin
registers options and ini keys from it, :func:`read_settings` validates through
it, and every bad value becomes a :class:`pytest.UsageError` that names the
option, its ini key, the rule and the value given.

This module is imported by every pytest run in an environment where the plugin
is installed, so it imports nothing heavy (no git, numpy or SDKs); the branch
prefix check, which needs git, only runs for a non-default prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from agentdescent_core.evaluation.selection import SELECT_MODES
from agentdescent_core.proposers.guardrail_spec import SCRIPT_POLICIES, parse_guardrails
from agentdescent_core.sandbox.env import DEFAULT_ENV_ALLOWLIST, is_never_passed
from agentdescent_core.sandbox.spec import BACKEND_NAMES, NETWORK_MODES

__all__ = [
    "DEFAULT_LLM_CACHE_TTL",
    "DEFAULT_REPEATS",
    "GROUP",
    "KNOBS",
    "LLM_CACHE_MODES",
    "MODEL_PROVIDERS",
    "SCRIPT_POLICIES",
    "SETTINGS_KEY",
    "EvolveSettings",
    "Knob",
    "add_options",
    "read_settings",
]

GROUP = "agentdescent"

#: Repeats per task and candidate.  The same value as
#: ``agentdescent_core.stats.DEFAULT_REPEATS`` (a test keeps them equal); it is
#: written out here because importing the statistics package loads scipy, which
#: would cost every plain pytest run half a second.
DEFAULT_REPEATS = 2

MODEL_PROVIDERS: tuple[str, ...] = ("anthropic", "openai")

LLM_CACHE_MODES: tuple[str, ...] = ("off", "record", "replay", "read-through")
#: ``evolve_llm_cache_ttl``'s default, in seconds (7 days; the same value as
#: ``agentdescent_core.proposers.llm_cache.DEFAULT_TTL_SECONDS``, kept equal by a test).
DEFAULT_LLM_CACHE_TTL = 7 * 24 * 3600.0

_DEFAULT_PREFIX = "agentdescent/"


@dataclass(frozen=True)
class EvolveSettings:
    """Validated settings of one pytest run (``enabled`` is False for a plain run).

    ``paths`` are absolute paths of the artifact roots: command-line paths are
    resolved against the directory pytest was invoked from, ``evolve_paths``
    against the ini file's directory.  ``frozen`` globs are repo-relative
    patterns, the ini's and the command line's together (more frozen paths are
    never less safe).  ``state_dir`` is relative to the git repository root.
    """

    paths: tuple[str, ...] = ()
    rounds: int = 10
    workers: int = 2
    repeats: int = DEFAULT_REPEATS
    model: str | None = None
    sandbox: str = "auto"
    network: str = "default"
    frozen: tuple[str, ...] = ()
    dry_run: bool = False
    pr: bool = False
    target: float | None = None
    patience: int | None = None
    max_calls: int | None = None
    max_usd: float | None = None
    max_tokens: int | None = None
    seed: int = 0
    state_dir: str = ".agentdescent"
    branch_prefix: str = _DEFAULT_PREFIX
    promote_after: int = 3
    holdout: float = 0.25
    env: tuple[str, ...] = DEFAULT_ENV_ALLOWLIST
    test_timeout: float = 60.0
    eval_concurrency: int = 1
    llm_cache: str = "off"
    llm_cache_ttl: float = DEFAULT_LLM_CACHE_TTL
    prompt: str | None = None
    script_policy: str = "warn"
    guardrails: str = "secrets"
    violation_limit: int = 3
    prices: tuple[tuple[str, float, float], ...] = ()
    session_patience: int | None = None
    degradation: float = 0.15
    degradation_min_sessions: int = 3
    tasks: str | None = None
    baseline_repeats: int | None = None
    select: str = "reads"
    executor: str = "local"

    @property
    def enabled(self) -> bool:
        """Was an evolution asked for (``--evolve PATH`` or ``evolve_paths``)?"""
        return bool(self.paths)

    @property
    def pii(self) -> bool:
        """``evolve_guardrails`` names ``pii``: proposals carrying personal data are refused."""
        return "pii" in self.guardrails.split()

    @property
    def scripts(self) -> str:
        """The script policy in force: ``reject`` when ``evolve_guardrails`` or its alias
        ``evolve_script_policy`` says so (the stricter of the two wins), else ``warn``."""
        strict = "scripts=reject" in self.guardrails.split() or self.script_policy == "reject"
        return "reject" if strict else "warn"


SETTINGS_KEY = pytest.StashKey[EvolveSettings]()


# ---------------------------------------------------------------- converters
# Each takes what the command line (a str) or the ini file (str, or a native
# TOML value) gave and returns the setting's value, or raises ValueError.

Convert = Callable[[Any], Any]


def _as_int(raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError(raw)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        return int(raw.strip())
    raise ValueError(raw)


def _as_float(raw: object) -> float:
    if isinstance(raw, bool):
        raise ValueError(raw)
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        value = float(raw.strip())
    else:
        raise ValueError(raw)
    if not math.isfinite(value):
        raise ValueError(raw)
    return value


def _int_at_least(low: int) -> Convert:
    def convert(raw: object) -> int:
        value = _as_int(raw)
        if value < low:
            raise ValueError(raw)
        return value

    return convert


def _float_in(low: float, high: float | None, *, low_open: bool, high_open: bool) -> Convert:
    def convert(raw: object) -> float:
        value = _as_float(raw)
        if value < low or (low_open and value == low):
            raise ValueError(raw)
        if high is not None and (value > high or (high_open and value == high)):
            raise ValueError(raw)
        return value

    return convert


def _choice(names: Sequence[str]) -> Convert:
    def convert(raw: object) -> str:
        value = str(raw).strip()
        if value not in names:
            raise ValueError(raw)
        return value

    return convert


def _duration(raw: object) -> float:
    """Seconds of a duration such as ``7d``, ``12h``, ``30m`` or ``90s`` (bare: seconds)."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str):
        raise ValueError(raw)
    from agentdescent_core.proposers.llm_cache import parse_duration

    return parse_duration(raw)


def _text(raw: object) -> str:
    value = str(raw).strip()
    if not value:
        raise ValueError(raw)
    return value


def _model(raw: object) -> str:
    provider, sep, name = str(raw).strip().partition(":")
    if not sep or provider not in MODEL_PROVIDERS or not name.strip():
        raise ValueError(raw)
    return f"{provider}:{name.strip()}"


def _prefix(raw: object) -> str:
    value = str(raw).strip()
    if value == _DEFAULT_PREFIX:
        return value
    from agentdescent_core.errors import LedgerError  # git is imported only for a custom prefix
    from agentdescent_core.ledger.ledger import validate_prefix

    try:
        return validate_prefix(value)
    except LedgerError as exc:
        raise ValueError(str(exc)) from exc


def _bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "y", "on", "t"):
        return True
    if text in ("0", "false", "no", "n", "off", "f", ""):
        return False
    raise ValueError(raw)


def _strings(raw: object) -> tuple[str, ...]:
    items = raw.split("\n") if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(raw)
        text = item.strip()
        if text and text not in out:
            out.append(text)
    return tuple(out)


def _prices(raw: object) -> tuple[tuple[str, float, float], ...]:
    """``MODEL = INPUT_USD OUTPUT_USD`` per line (US dollars per million tokens)."""
    from agentdescent_core.proposers.pricing import parse_price_lines

    return tuple((model, price.input_per_mtok, price.output_per_mtok)
                 for model, price in parse_price_lines(_strings(raw)).items())


def _task_expression(raw: object) -> str | None:
    from pytest_agentdescent.markers import task_expression

    text = str(raw).strip()
    if not text:
        return None
    task_expression(text)  # ValueError with pytest's reason when it does not parse
    return text


def _guardrails(raw: object) -> str:
    """The canonical words (``secrets [pii] [scripts=POLICY]``) of a valid value."""
    spec = parse_guardrails(str(raw))
    words = ["secrets", *(["pii"] if spec.pii else []),
             *([f"scripts={spec.scripts}"] if spec.scripts else [])]
    return " ".join(words)


def _executor(raw: object) -> str:
    """``local`` or ``ENGINE://[ADDRESS]``, checked (the extra is only needed to run it)."""
    from agentdescent_core.evaluation.executor import parse_executor

    value = str(raw).strip()
    parse_executor(value)  # ValueError saying the forms it takes
    return value


def _env(raw: object) -> tuple[str, ...]:
    names = _strings(raw)
    for name in names:
        if not any(ch in name for ch in "*?[") and is_never_passed(name):
            raise ValueError(name)
    return names


# ---------------------------------------------------------------- the table

@dataclass(frozen=True)
class Knob:
    """One setting: its field, option, ini key, how it is parsed and documented.

    ``option`` is None for an ini-only knob.  ``kind`` is what the option takes:
    ``value`` (one argument), ``append`` (repeatable), ``flag`` (no argument);
    ``ini_type`` is the type given to ``parser.addini``.  ``rule`` completes the
    sentence "<option> must be ...".
    """

    field: str
    option: str | None
    ini: str
    kind: str
    ini_type: str
    rule: str
    convert: Convert
    help: str
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The argparse destination of the option (``config.getoption(dest)``)."""
        return self.ini


def _numeric_ini(kind: str) -> str:
    """``int`` / ``float`` ini types where pytest has them (8.4+), so TOML can use numbers."""
    major, minor = (int(part) for part in pytest.__version__.split(".")[:2])
    return kind if (major, minor) >= (8, 4) else "string"


_INT = _numeric_ini("int")
_FLOAT = _numeric_ini("float")

KNOBS: tuple[Knob, ...] = (
    Knob("paths", "--evolve", "evolve_paths", "append", "args",
         "an existing file or directory", _text,
         "Evolve the artifact files under PATH (a skill folder, a prompt file, AGENTS.md); "
         "repeat for several roots. Turns evolution on.", "PATH"),
    Knob("rounds", "--evolve-rounds", "evolve_rounds", "value", _INT,
         "an integer >= 0", _int_at_least(0), "Rounds of evolution (default 10).", "N"),
    Knob("workers", "--evolve-workers", "evolve_workers", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Proposals made in parallel per round (default 2).", "N"),
    Knob("repeats", "--evolve-repeats", "evolve_repeats", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Pair budget of the acceptance test: up to 3 x N pairs of runs per task on "
         f"average (default {DEFAULT_REPEATS}).", "N"),
    Knob("model", "--evolve-model", "evolve_model", "value", "string",
         "'anthropic:MODEL' or 'openai:MODEL'", _model,
         "The model that proposes edits, as anthropic:MODEL or openai:MODEL (the SDKs' "
         "environment variables apply). Without it a pytest_evolve_propose hook proposes.",
         "PROVIDER:MODEL"),
    Knob("sandbox", "--evolve-sandbox", "evolve_sandbox", "value", "string",
         "one of " + "|".join(BACKEND_NAMES), _choice(BACKEND_NAMES),
         "Where candidates' tests run: auto (the strongest that works here), local, bwrap "
         "or docker (default auto).", "|".join(BACKEND_NAMES)),
    Knob("network", "--evolve-network", "evolve_network", "value", "string",
         "one of " + "|".join(NETWORK_MODES), _choice(NETWORK_MODES),
         "Network of candidates' tests: default (as the backend gives) or none "
         "(cut off; bwrap and docker only).", "|".join(NETWORK_MODES)),
    Knob("frozen", "--evolve-frozen", "evolve_frozen", "append", "linelist",
         "a glob such as 'skills/*/LICENSE'", _strings,
         "Repo-relative glob of files inside the artifact paths that must not change; "
         "repeatable, added to the ini's list.", "GLOB"),
    Knob("dry_run", "--evolve-dry-run", "evolve_dry_run", "flag", "bool",
         "true or false", _bool,
         "Run the whole loop on a scratch ledger: no ref of your repository changes; the "
         "evolved diff is printed."),
    Knob("pr", "--evolve-pr", "evolve_pr", "flag", "bool", "true or false", _bool,
         "At the end of the run, push the stable branch and open, update or close its pull "
         "request (needs GITHUB_TOKEN; see docs/ci.md)."),
    Knob("target", "--evolve-target", "evolve_target", "value", _FLOAT,
         "a number in (0, 1]", _float_in(0.0, 1.0, low_open=True, high_open=False),
         "Stop once the reward reaches this value (default: none, stop when every task "
         "passes).", "REWARD"),
    Knob("patience", "--evolve-patience", "evolve_patience", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Stop after this many rounds without an accepted candidate (default: never).", "N"),
    Knob("max_calls", "--evolve-max-calls", "evolve_max_calls", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Stop after this many proposer calls (default: no limit).", "N"),
    Knob("max_usd", "--evolve-max-usd", "evolve_max_usd", "value", _FLOAT,
         "a number > 0", _float_in(0.0, None, low_open=True, high_open=False),
         "Stop once the model calls have cost this many US dollars (default: no limit).",
         "USD"),
    Knob("max_tokens", "--evolve-max-tokens", "evolve_max_tokens", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Stop before the model calls would use more than N tokens, input plus output as "
         "the API reports them (default: no limit).", "N"),
    Knob("seed", "--evolve-seed", "evolve_seed", "value", _INT, "an integer", _as_int,
         "Seed of every random choice of the run (default 0).", "N"),
    Knob("state_dir", "--evolve-state-dir", "evolve_state_dir", "value", "string",
         "a non-empty path", _text,
         "Where report.json, report.md, the run store and the eval cache live, relative "
         "to the git repository root (default .agentdescent).", "DIR"),
    Knob("branch_prefix", "--evolve-branch-prefix", "evolve_branch_prefix", "value", "string",
         "a valid branch prefix such as 'agentdescent/'", _prefix,
         "Prefix of the dev and stable branches (default agentdescent/).", "PREFIX"),
    Knob("promote_after", "--evolve-promote-after", "evolve_promote_after", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Promote a dev version to stable after this many regression-free rounds "
         "(default 3).", "N"),
    Knob("holdout", None, "evolve_holdout", "value", _FLOAT, "a number in [0, 1)",
         _float_in(0.0, 1.0, low_open=False, high_open=True),
         "Fraction of tasks held out from the proposer, by a stable hash of the node id "
         "(default 0.25; suites under 8 tasks get none)."),
    Knob("env", None, "evolve_env", "value", "linelist",
         "environment variable names or patterns, one per line, no credentials", _env,
         "Host environment variables passed to candidates' tests, one name or fnmatch "
         "pattern per line (default: " + " ".join(DEFAULT_ENV_ALLOWLIST) + ")."),
    Knob("test_timeout", None, "evolve_test_timeout", "value", _FLOAT, "a number > 0",
         _float_in(0.0, None, low_open=True, high_open=False),
         "Seconds one test of a candidate may run before it is killed (default 60)."),
    Knob("eval_concurrency", None, "evolve_eval_concurrency", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Child pytest processes that evaluate candidates at the same time (default 1)."),
    Knob("llm_cache", "--evolve-llm-cache", "evolve_llm_cache", "value", "string",
         "one of " + "|".join(LLM_CACHE_MODES), _choice(LLM_CACHE_MODES),
         "Model call cache in the state dir: record (store every answer), replay (answer "
         "from the store only; a missing entry is an error), read-through (answer from a "
         "fresh stored entry, else call and store) or off (default).",
         "|".join(LLM_CACHE_MODES)),
    Knob("llm_cache_ttl", "--evolve-llm-cache-ttl", "evolve_llm_cache_ttl", "value", "string",
         "a duration such as 7d, 12h, 30m or 90s", _duration,
         "How long a read-through cache entry answers before the model is asked again "
         "(default 7d).", "DURATION"),
    Knob("prompt", None, "evolve_prompt", "value", "string",
         "an existing template file or folder", _text,
         "The reflector's prompt template: a file replacing the user template, or a folder "
         "with system.txt and/or user.txt (default: the packaged templates)."),
    Knob("script_policy", None, "evolve_script_policy", "value", "string",
         "one of " + "|".join(SCRIPT_POLICIES), _choice(SCRIPT_POLICIES),
         "Alias of 'scripts=' in evolve_guardrails (the stricter of the two applies): what "
         "to do with a proposed script that calls eval/exec, spawns processes or opens "
         "sockets: warn (default) or reject."),
    Knob("guardrails", None, "evolve_guardrails", "value", "string",
         "words among 'secrets', 'pii', 'scripts=warn', 'scripts=reject'", _guardrails,
         "Checks on every proposal, e.g. 'secrets pii scripts=reject': secrets are always "
         "checked (they cannot be turned off), pii refuses emails, phone and card numbers, "
         "scripts=reject refuses risky scripts and commands (default: secrets, with "
         "scripts as evolve_script_policy says)."),
    Knob("violation_limit", None, "evolve_violation_limit", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Critical guardrail violations (such as a secret in a proposal) after which the run "
         "stops (default 3)."),
    Knob("prices", None, "evolve_prices", "value", "linelist",
         "lines 'MODEL = INPUT_USD OUTPUT_USD' (US dollars per million tokens)", _prices,
         "Model prices overriding the built-in table, one 'MODEL = INPUT_USD OUTPUT_USD' line "
         "per model (US dollars per million input / output tokens)."),
    Knob("session_patience", None, "evolve_session_patience", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Scheduled sessions: measure the baseline only (no model call) once this many "
         "sessions in a row brought no improvement, unless the baseline degraded or a test "
         "was added (default: every session evolves)."),
    Knob("degradation", None, "evolve_degradation", "value", _FLOAT, "a number in (0, 1]",
         _float_in(0.0, 1.0, low_open=True, high_open=False),
         "Scheduled sessions: evolve again when the mean reward of the last 3 sessions is "
         "more than this fraction below the best of the first 3 since the last improvement "
         "(default 0.15, a 15 % drop)."),
    Knob("degradation_min_sessions", None, "evolve_degradation_min_sessions", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Scheduled sessions: measurements of the version in use (this session's included) "
         "needed before a degradation can trigger evolution (default 3)."),
    Knob("tasks", "--evolve-tasks", "evolve_tasks", "value", "string",
         "a -k style expression such as 'humanize and not slow'", _task_expression,
         "Also make the tests this -k style expression selects tasks (names of tests, "
         "classes, modules and markers), without editing the tests.", "EXPR"),
    Knob("baseline_repeats", None, "evolve_baseline_repeats", "value", _INT,
         "an integer >= 1", _int_at_least(1),
         "Runs of every task at the base before the first round (default 1: the acceptance "
         "test buys more base runs where a pair needs one). More measure a flaky baseline "
         "more exactly and name tests whose first run differs from later ones."),
    Knob("select", "--evolve-select", "evolve_select", "value", "string",
         "one of " + "|".join(SELECT_MODES), _choice(SELECT_MODES),
         "Which tests a candidate re-runs: reads (default: those that read a file it "
         "changes, plus untraced tests and guards; the others keep their evidence) or all.",
         "|".join(SELECT_MODES)),
    Knob("executor", "--evolve-executor", "evolve_executor", "value", "string",
         "'local', 'dask://' or 'dask://HOST:PORT'", _executor,
         "Where candidates' tests run: local (default: child processes on this machine, "
         "evolve_eval_concurrency at a time), dask:// (an embedded Dask cluster of worker "
         "processes here) or dask://HOST:PORT (a running Dask scheduler; needs "
         "pytest-agentdescent[dask], see docs/scale.md).", "local|dask://[HOST:PORT]"),
)

_DEFAULTS = EvolveSettings()
assert {knob.field for knob in KNOBS} == {f.name for f in fields(EvolveSettings)}


def add_options(parser: pytest.Parser) -> None:
    """Register every knob: the options in one ``agentdescent`` group, then the ini keys."""
    group = parser.getgroup(GROUP, "agentdescent: evolve agent files with your marked tests")
    for knob in KNOBS:
        if knob.option is None:
            continue
        text = f"{knob.help} [ini {knob.ini}]"
        if knob.kind == "flag":
            group.addoption(knob.option, action="store_true", default=None, dest=knob.dest,
                            help=text)
        else:
            group.addoption(knob.option, action="append" if knob.kind == "append" else "store",
                            default=None, dest=knob.dest, metavar=knob.metavar, help=text)
    for knob in KNOBS:
        help_text = knob.help if knob.option is None else f"Default for {knob.option}: {knob.help}"
        default: object = None
        if knob.field == "env":
            default = list(DEFAULT_ENV_ALLOWLIST)
        elif knob.ini_type in ("args", "linelist"):
            default = []
        elif knob.ini_type == "bool":
            default = False
        parser.addini(knob.ini, help_text, type=knob.ini_type,  # type: ignore[arg-type]
                      default=default)


# ---------------------------------------------------------------- reading

def _who(knob: Knob, *, from_ini: bool) -> str:
    """How an error names the setting: the option, or the ini key (and its option)."""
    if knob.option is None:
        return f"ini {knob.ini}"
    if from_ini:
        return f"ini {knob.ini} (the ini key of {knob.option})"
    return knob.option


def _fail(knob: Knob, raw: object, *, from_ini: bool, detail: str = "") -> pytest.UsageError:
    """The one shape of a bad-value error: who, the rule, what was given, where it came from."""
    who = _who(knob, from_ini=from_ini)
    where = f" (ini {knob.ini})" if knob.option and not from_ini else ""
    extra = f": {detail}" if detail else ""
    return pytest.UsageError(f"{who} must be {knob.rule}, got {raw!r}{where}{extra}")


def _ini_value(config: pytest.Config, knob: Knob) -> object:
    try:
        return config.getini(knob.ini)
    # pytest's own coercion of the ini text failed: a ValueError before pytest 9.2,
    # a UsageError naming neither the key nor the rule since.
    except (ValueError, TypeError, pytest.UsageError) as exc:
        raise pytest.UsageError(f"{_who(knob, from_ini=True)} must be {knob.rule}: {exc}"
                                ) from exc


def _ini_base(config: pytest.Config) -> Path:
    return config.inipath.parent if config.inipath is not None else config.rootpath


def _paths(knob: Knob, raw: Sequence[str], base: Path, *, from_ini: bool) -> tuple[str, ...]:
    out: list[str] = []
    for entry in raw:
        text = str(entry).strip()
        if not text:
            raise _fail(knob, entry, from_ini=from_ini)
        path = Path(text).expanduser()
        resolved = (path if path.is_absolute() else base / path).resolve()
        if not resolved.exists():
            raise _fail(knob, entry, from_ini=from_ini,
                        detail=f"{resolved} does not exist; give the folder or file "
                               "of the agent's artifact (e.g. --evolve skills/)")
        if str(resolved) not in out:
            out.append(str(resolved))
    return tuple(out)


def _read(config: pytest.Config, knob: Knob) -> Any:
    """The value of one knob: the command line's, else the ini file's, else the default."""
    cli = config.getoption(knob.dest) if knob.option else None
    if knob.field == "paths":
        if cli:
            return _paths(knob, cli, config.invocation_params.dir, from_ini=False)
        ini = _ini_value(config, knob)
        given = list(ini) if ini else []  # type: ignore[call-overload]
        return _paths(knob, given, _ini_base(config), from_ini=True)
    if knob.field == "prompt":
        ini_raw = None if knob.option else _ini_value(config, knob)
        if not ini_raw:
            return None
        path = Path(str(ini_raw).strip()).expanduser()
        resolved = path if path.is_absolute() else _ini_base(config) / path
        if not resolved.exists():
            raise _fail(knob, ini_raw, from_ini=True,
                        detail=f"{resolved} does not exist; give the template file (or folder "
                               "with system.txt / user.txt) relative to the ini file")
        return str(resolved.resolve())
    if knob.field == "frozen":
        merged = [*(_ini_value(config, knob) or []), *(cli or [])]  # type: ignore[misc]
        try:
            return _strings(merged)
        except ValueError:
            raise _fail(knob, merged, from_ini=False) from None
    if cli is not None:
        raw, from_ini = cli, False
    else:
        raw, from_ini = _ini_value(config, knob), True
        # An unset key gives its registered default; evolve_env's is the default list
        # itself, so an explicitly empty evolve_env means "pass nothing".
        empty_list = raw == [] and knob.field != "env"
        if raw is None or raw == "" or empty_list or (knob.kind == "flag" and raw is False):
            return getattr(_DEFAULTS, knob.field)
    try:
        return knob.convert(raw)
    except ValueError as exc:
        detail = str(exc) if knob.field in ("branch_prefix", "tasks", "guardrails",
                                            "executor") else ""
        if knob.field == "env" and str(exc) != str(raw):
            detail = (f"{exc} is a credential that is never passed to candidate code; "
                      "remove it and give the agent a narrower key of its own")
        raise _fail(knob, raw, from_ini=from_ini, detail=detail) from None


def read_settings(config: pytest.Config) -> EvolveSettings:
    """The run's validated settings (cached on ``config.stash``).

    Raises :class:`pytest.UsageError` naming the option, its ini key and the
    rule when a value is bad.
    """
    cached = config.stash.get(SETTINGS_KEY, None)
    if cached is not None:
        return cached
    values = {knob.field: _read(config, knob) for knob in KNOBS}
    settings = EvolveSettings(**values)
    config.stash[SETTINGS_KEY] = settings
    return settings
