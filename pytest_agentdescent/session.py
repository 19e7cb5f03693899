"""The ``--evolve`` controller: collects like pytest, then evolves instead of running tests.

Registered by the plugin only when ``--evolve`` (or ``evolve_paths``) is given
and the process is not itself a child evaluation.  Like pytest-xdist's
DSession it lets pytest collect as usual and takes over
``pytest_runtestloop``: the marked tests are never run in this process — each
candidate runs them in a sandboxed workspace (a child pytest) — and the loop
is the engine's durable run (:class:`~agentdescent_core.loop.durable_run.DurableRun`)
with the ``pytest_evolve_propose`` hook as proposer.  What the run leaves
behind is written by :mod:`.finish`; ``docs/architecture.md`` shows the whole path.

What a run leaves behind: accepted versions on ``<prefix>dev`` /
``<prefix>stable`` in the user's repository (a dry run: nothing, its ledger is
a scratch repository), and ``report.json`` / ``report.md`` in the state
directory, which is listed in ``.git/info/exclude`` so ``git status`` does not
change.  Exit status: 0 when the run completed (improved or not), 1 when it
ended on an error (the report says which, partial results kept), 4 for a
usage error (raised before anything is evaluated).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_agentdescent.collect import (
    EvolvePlan,
    collect_plan,
    ensure_state_dir,
    find_layout,
    resolve_roots,
)
from pytest_agentdescent.runstate import RunState
from pytest_agentdescent.selecting import SelectionLog
from pytest_agentdescent.settings import EvolveSettings
from pytest_agentdescent.terminal import (
    Out,
    collect_listing,
    header_lines,
    round_line,
    summary_lines,
)

if TYPE_CHECKING:
    from agentdescent_core.artifacts.filetree import FileTree
    from agentdescent_core.evaluation.cache import EvalCache
    from agentdescent_core.evaluation.executor import Executor
    from agentdescent_core.evaluation.sandboxed import SandboxedVerifier
    from agentdescent_core.ledger.ledger import Ledger
    from agentdescent_core.loop.result import EvolutionResult, RoundInfo
    from agentdescent_core.loop.schedule import SessionDecision
    from agentdescent_core.proposers.guardrails import Guardrails
    from agentdescent_core.proposers.models import ModelSpec
    from agentdescent_core.proposers.pricing import PriceTable
    from agentdescent_core.proposers.reflector import PromptTemplates
    from agentdescent_core.sandbox.spec import Backend
    from pytest_agentdescent.finish import Finished
    from pytest_agentdescent.model_proposer import ModelProposer
    from pytest_agentdescent.proposer import HookProposer


_TITLE = "agentdescent evolve"


class EvolveSession:
    """The controller plugin of one ``pytest --evolve`` run (``agentdescent-session``)."""

    def __init__(self, config: pytest.Config, settings: EvolveSettings) -> None:
        # --collect-only (``agentdescent check``, the pre-commit hook) calls no model,
        # so it must not demand the model's key
        self._model_setup = (_model_setup(settings, check_key=not config.option.collectonly)
                             if settings.model is not None else None)
        self.config = config
        self.settings = settings
        self.plan: EvolvePlan | None = None
        self.finished: Finished | None = None  # set when the run is over
        self.warnings: list[str] = []
        self._shown = 0  # warnings already printed in the header
        self._proposer = ""
        self._model: ModelProposer | None = None
        self._guardrails: Guardrails | None = None
        self._out = Out(config)
        self._run_info: dict[str, Any] | None = None
        self._started_at = time.time()
        self._baseline_seconds: float | None = None

    # ---------------------------------------------------------------- collection

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Tasks, guards, the split and the frozen set, from what pytest collected."""
        layout = find_layout(self.config.rootpath)
        roots = resolve_roots(self.settings.paths, layout)
        self.plan = collect_plan(session, layout=layout, roots=roots,
                                 holdout=self.settings.holdout,
                                 frozen_patterns=self.settings.frozen)

    # ---------------------------------------------------------------- the loop

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return None  # pytest's own loop stops on the collection errors
        plan = self.plan
        if plan is None:  # pragma: no cover - collection_finish always ran before
            raise pytest.UsageError("pytest --evolve: collection did not finish")
        if self.config.option.collectonly:
            self._out.sep(_TITLE)
            self._out.lines(collect_listing(plan))
            for note in plan.notes:
                self._out.line(f"warning: {note}", yellow=True)
            return True
        if not plan.tasks:
            raise pytest.UsageError(
                "pytest --evolve found no task: mark the tests whose outcome is the reward with "
                "@pytest.mark.evolve (and check the paths and -k/-m selections given to pytest)"
            )
        error = self._run(plan)
        if error:
            session.testsfailed = max(session.testsfailed, 1)  # exit status 1
        return True

    def _run(self, plan: EvolvePlan) -> bool:
        """Open everything a run needs, in order, then evolve; True when it ended on an error.

        Each part is closed in reverse order however the run ends: the verifier
        (its workspaces), the eval cache, the ledger, the model proposer, and
        last the run store with the repository lease.
        """
        from agentdescent_core.artifacts.filetree import FileTree
        from agentdescent_core.errors import RefusalError
        from agentdescent_core.evaluation.cache import EVAL_CACHE_FILE, EvalCache, EvalCacheError
        from agentdescent_core.ledger.base import head_name
        from agentdescent_core.proposers.guardrails import Guardrails
        from agentdescent_core.sandbox.select import describe_backend
        from pytest_agentdescent.proposer import hook_implementations, missing_proposer_message

        settings = self.settings
        implementations = hook_implementations(self.config)
        # --evolve-rounds 0 measures the baseline only: nothing is proposed, so none is needed
        if not implementations and self._model_setup is None and settings.rounds > 0:
            raise pytest.UsageError(missing_proposer_message())
        if self._model_setup is None:
            self.warnings.extend(_unmetered_budgets(settings))
        backend = self._backend()
        state_dir = ensure_state_dir(plan.layout, settings.state_dir)
        try:
            tree = FileTree(plan.roots, frozen=plan.frozen, repo_root=plan.layout.root)
        except RefusalError as exc:
            raise pytest.UsageError(f"pytest --evolve cannot load the artifact: {exc}") from None
        with contextlib.ExitStack() as opened:
            executor = self._executor(backend)  # before anything of the run changes
            if executor is not None:
                opened.callback(executor.close)
            run_state = RunState.open(state_dir, repo_root=plan.layout.root,
                                      prefix=settings.branch_prefix, dry_run=settings.dry_run)
            opened.callback(run_state.close)
            self.warnings.extend(run_state.notes)
            # one gate for the run: the workers check every proposal (hook or model) with it
            self._guardrails = Guardrails(
                script_policy=settings.scripts,  # type: ignore[arg-type]
                violation_limit=settings.violation_limit, pii=settings.pii)
            opened.callback(self._stop_model)
            if self._model_setup is not None:
                self._model = self._start_model(plan, tree, state_dir)
            try:
                ledger, base, ledger_line, created = self._ledger(plan, tree)
            except RefusalError as exc:
                raise pytest.UsageError(f"pytest --evolve cannot load the artifact: {exc}"
                                        ) from None
            opened.callback(ledger.close)
            try:
                # The key file sits in the state dir: hidden from the child under bwrap and
                # docker; under local a child could read it, but any write of the cache by
                # a candidate is caught by the state-dir guard (sandbox/guard.py), restored,
                # and stops the run, so results still carry over between runs.
                cache = EvalCache(state_dir / EVAL_CACHE_FILE)
                opened.callback(cache.close)
                initial = ledger.read_state(ledger.head("dev"))
            except (RefusalError, EvalCacheError) as exc:
                raise pytest.UsageError(f"pytest --evolve cannot start: {exc}") from None
            verifier = self._verifier(plan, tree, base, backend, cache, executor)
            opened.callback(verifier.close)
            self._out.sep(_TITLE)
            self._proposer = _proposer_line(implementations, self._model)
            header = header_lines(
                plan, files=len(initial), sandbox=describe_backend(backend, settings.network),
                proposer=self._proposer,
                base=head_name(plan.layout.root, base), ledger=ledger_line,
            )
            if executor is not None:
                header.insert(header.index(describe_backend(backend, settings.network)) + 1,
                              executor.describe())
            self._out.lines(header)
            for note in [*plan.notes, *self.warnings]:
                self._out.line(f"warning: {note}", yellow=True)
            self._shown = len(self.warnings)
            return self._evolve(plan, tree, ledger, verifier, initial, base, backend.name,
                                state_dir, run_state, created)

    def _start_model(self, plan: EvolvePlan, tree: FileTree, state_dir: Path) -> ModelProposer:
        """The model proposer, registered after every conftest hook (it is ``trylast``)."""
        from agentdescent_core.errors import AgentDescentError
        from agentdescent_core.proposers.llm_cache import LLM_CACHE_FILE, LLMCache
        from agentdescent_core.proposers.models import ModelClient
        from pytest_agentdescent.model_proposer import (
            PLUGIN_NAME,
            ModelProposer,
            frozen_description,
        )

        setup = self._model_setup
        assert setup is not None
        assert self._guardrails is not None
        settings = self.settings
        cache = None
        if settings.llm_cache != "off":
            try:
                cache = LLMCache(state_dir / LLM_CACHE_FILE,
                                 settings.llm_cache,  # type: ignore[arg-type]
                                 ttl=settings.llm_cache_ttl)
            except (AgentDescentError, OSError, ValueError) as exc:
                text = str(exc)
                prefix = f"--evolve-llm-cache {settings.llm_cache}: "
                raise pytest.UsageError(text if text.startswith(prefix) else prefix + text
                                        ) from None
        try:
            client = ModelClient(setup.spec, prices=setup.prices, cache=cache)
        except Exception as exc:
            if cache is not None:
                cache.close()
            raise pytest.UsageError(f"--evolve-model {setup.spec}: {exc}") from None
        model = ModelProposer(
            client, spec=str(setup.spec), tree=tree,
            guardrails=self._guardrails,
            templates=setup.templates, frozen=frozen_description(settings.frozen),
            max_usd=settings.max_usd, max_tokens=settings.max_tokens, cache=cache,
        )
        self.config.pluginmanager.register(model, PLUGIN_NAME)
        return model

    def _stop_model(self) -> None:
        model = self._model
        if model is None:
            return
        if self.config.pluginmanager.is_registered(model):
            self.config.pluginmanager.unregister(model)
        model.close()

    def _evolve(self, plan: EvolvePlan, tree: FileTree, ledger: Ledger,
                verifier: SandboxedVerifier, initial: Mapping[str, str], base: str,
                sandbox: str, state_dir: Path, run_state: RunState,
                created: Sequence[str]) -> bool:
        """Baseline, session decision, the rounds, then the report; True on an error."""
        from agentdescent_core.aggregator import AggregatorConfig
        from agentdescent_core.errors import AgentDescentError
        from pytest_agentdescent.finish import finish_run, measure_per_task
        from pytest_agentdescent.proposer import HookProposer
        from pytest_agentdescent.runstate import load_memory, memory_path

        settings = self.settings
        memory = load_memory(state_dir, plan.layout.root, settings)
        proposer = HookProposer(self.config, verifier, roots=plan.roots, train=plan.train,
                                sources=plan.sources, seed=settings.seed, memory=memory,
                                hidden=verifier.split.held_out)
        agg_config = AggregatorConfig(repeats=settings.repeats,
                                      promote_after=settings.promote_after,
                                      baseline_repeats=settings.baseline_repeats)
        selection = SelectionLog(verifier.selection)
        progress = _Progress(self, proposer, total=settings.rounds, model=self._model,
                             selection=selection)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            baseline, broken = self._baseline(verifier, initial, agg_config.base_repeats)
            progress.previous = baseline
            decision = None
            try:
                if broken is not None:
                    raise _BrokenBaseline(broken)
                if settings.session_patience is not None and not settings.dry_run:
                    decision = self._session_decision(plan, verifier, baseline)
                rounds = run_state.run_rounds(
                    settings, plan, tree, ledger, verifier, proposer, agg_config=agg_config,
                    guardrails=self._guardrails, on_round=progress, out=self._out,
                    skip=None if decision is None or decision.evolve else decision.reason)
                self._run_info = rounds.info
                self.warnings.extend(rounds.notes)
                result = rounds.result
            except (AgentDescentError, _BrokenBaseline) as exc:
                result = _failed_result(exc, tree, ledger, initial, baseline, progress.history)
            # nothing was measured when the baseline broke: the report says null, never 0.0
            before, after = ({}, {}) if broken is not None else measure_per_task(
                verifier, (initial, result.state), agg_config.base_repeats)
        self.warnings.extend(dict.fromkeys(str(w.message) for w in caught
                                           if not issubclass(w.category, DeprecationWarning)))
        try:
            memory.save(memory_path(state_dir))
        except OSError as exc:
            self.warnings.append(f"the memory of attempts was not saved: {exc}")
        model = self._model
        finished = finish_run(
            result, settings=settings, plan=plan, ledger=ledger, split=verifier.split,
            initial=initial, before=before, after=after, broken=broken is not None,
            calls=proposer.calls, cost_usd=model.client.wire_cost_usd if model else None,
            extra={**self._report_fields(plan, sandbox, decision, verifier.evaluations),
                   "selection": selection.report(len(verifier.split.eval_tasks))},
            decision=decision, created=created, base=base, state_dir=state_dir,
            started_at=self._started_at, memory=memory,
        )
        self.warnings.extend(finished.warnings)
        self.finished = finished
        self.config.hook.pytest_evolve_report(report=finished.report)
        return result.error is not None or finished.pr_failed

    def _report_fields(self, plan: EvolvePlan, sandbox: str, decision: SessionDecision | None,
                       test_runs: int) -> dict[str, object]:
        """The report fields only the controller knows (the engine's come from its result)."""
        settings, model = self.settings, self._model
        return {
            "model": model.report() if model is not None else None,
            "guardrails": (self._guardrails.describe() if self._guardrails is not None
                           else None),
            "roots": list(plan.roots),
            "subdir": plan.layout.subdir,
            "sandbox": sandbox,
            "proposer": self._proposer,
            "network": settings.network,
            "executor": settings.executor,
            "repeats": settings.repeats,
            "seed": settings.seed,
            "max_usd": settings.max_usd,
            "max_tokens": settings.max_tokens,
            "branch_prefix": settings.branch_prefix,
            "warnings": [*plan.notes, *self.warnings],
            "session": None if decision is None else decision.to_json(),
            "run": self._run_info,
            "baseline_seconds": self._baseline_seconds,
            "test_runs": test_runs,
        }

    # ---------------------------------------------------------------- durability

    def _session_decision(self, plan: EvolvePlan, verifier: SandboxedVerifier,
                          baseline: float | None) -> SessionDecision:
        """Scheduled sessions: evolve, or only measure the baseline (see loop/schedule.py).

        Only with ``evolve_session_patience`` set: then each run reads and
        extends the history on ``refs/<prefix>sessions``; otherwise no such ref
        is ever written.
        """
        decision = RunState.decide(plan.layout.root, self.settings, baseline=baseline,
                                   tasks=verifier.split.eval_tasks)
        self._out.line(f"session   {'evolve' if decision.evolve else 'skip'} "
                       f"({decision.code}): {decision.reason}", yellow=not decision.evolve)
        return decision

    # ---------------------------------------------------------------- parts

    def _baseline(self, verifier: SandboxedVerifier, state: Mapping[str, str], repeats: int
                  ) -> tuple[float | None, str | None]:
        """The starting reward (the engine reuses the measurement), and why it is unusable.

        When the unchanged artifact cannot even be evaluated — the tests do not
        collect in the workspace, or running them changes frozen files — no
        candidate could ever be judged, so the run ends at once saying why.
        """
        from agentdescent_core.errors import AgentDescentError

        started, runs = time.monotonic(), verifier.evaluations
        try:
            # the report measures the guards at these repeats too: one set of sweeps for both
            verifier.prefetch(state, verifier.split.all_tasks, repeats)
            reward = verifier.evaluate(state, verifier.split.eval_tasks, repeats).reward()
        except AgentDescentError:
            return None, None  # the engine retries and reports it in its own terms
        problem = verifier.candidate_error(state)
        if problem is not None:
            return None, (f"the tests do not run in the sandboxed workspace even with the "
                          f"unchanged artifact, so no candidate can be judged: {problem}")
        refusal = verifier.disqualification(state)
        if refusal is not None:
            did = "tampers with the test process" if refusal.category == "tamper" \
                else "changes frozen files"
            return None, (f"running the tests with the unchanged artifact already {did}, "
                          f"so every candidate would be disqualified: {refusal.message}")
        ran = verifier.evaluations - runs
        self._baseline_seconds = time.monotonic() - started
        self._out.line(f"baseline  reward {reward:.3f}  ({ran} test runs, "
                       f"{self._baseline_seconds:.1f}s)")
        return reward, None

    def _backend(self) -> Backend:
        from pytest_agentdescent.sandboxing import usable_backend

        try:
            backend = usable_backend(self.settings.sandbox, option="--evolve-sandbox")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        # refused here, before the ledger creates any ref (the verifier would refuse it later)
        if self.settings.network == "none" and backend.name == "local":
            raise pytest.UsageError(
                "--evolve-network none needs a sandbox that can cut the network, but the "
                "sandbox is 'local'; use --evolve-sandbox bwrap or docker, or drop "
                "--evolve-network none"
            )
        return backend

    def _ledger(self, plan: EvolvePlan, tree: FileTree
                ) -> tuple[Ledger, str, str, tuple[str, ...]]:
        """The run's ledger, the base commit, the header line saying which ledger it is,
        and the branches this run created (removed again if the baseline cannot be run)."""
        from agentdescent_core.errors import LedgerError
        from agentdescent_core.ledger.base import files_at, resolve_head
        from agentdescent_core.ledger.ledger import Ledger

        settings = self.settings
        prefix = settings.branch_prefix
        try:
            if settings.dry_run:
                try:
                    base = resolve_head(plan.layout.root)
                except LedgerError as exc:  # no commit yet: the message says what to do
                    raise pytest.UsageError(str(exc)) from None
                files = files_at(plan.layout.root, base, tree)
                scratch = Ledger.scratch(files, tree, prefix=prefix)
                return scratch, base, ("ledger: dry run on a scratch repository; no ref of "
                                       "this repository changes"), ()
            ledger = Ledger(plan.layout.root, tree, prefix=prefix)
            try:
                branches = ledger.ensure_branches("HEAD")
            except BaseException:
                ledger.close()
                raise
        except LedgerError as exc:
            raise pytest.UsageError(f"pytest --evolve cannot use the repository: {exc}") from None
        if branches.messages:
            line = "ledger: " + "\n  ".join(branches.messages)
        elif branches.resumed:
            line = (f"ledger: resuming {ledger.dev_branch} at v{branches.dev_version} "
                    f"({branches.dev[:12]})")
        else:
            line = f"ledger: created {', '.join(branches.created)} at the base"
        return ledger, branches.base, line, tuple(branches.created)

    def _executor(self, backend: Backend) -> Executor | None:
        """The cluster of ``--evolve-executor`` (None for ``local``), or UsageError saying why."""
        from pytest_agentdescent.sandboxing import open_cluster

        try:
            return open_cluster(self.settings.executor, backend, option="--evolve-executor")
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None

    def _verifier(self, plan: EvolvePlan, tree: FileTree, base: str, backend: Backend,
                  cache: EvalCache, executor: Executor | None = None) -> SandboxedVerifier:
        from agentdescent_core.sandbox.local import SandboxSetupError
        from pytest_agentdescent.sandboxing import open_verifier, plugin_args

        settings = self.settings
        try:
            verifier, notes = open_verifier(
                plan.layout.root, base, plan.split(), tree=tree, frozen=plan.frozen,
                backend=backend, cache=cache, env_allow=settings.env,
                network=settings.network, test_timeout=settings.test_timeout,
                eval_concurrency=settings.eval_concurrency, subdir=plan.layout.subdir,
                pytest_args=plugin_args(self.config.invocation_params.args, os.environ),
                select=settings.select, executor=executor,
            )
        except SandboxSetupError as exc:
            raise pytest.UsageError(str(exc)) from None
        except ValueError as exc:
            raise pytest.UsageError(f"pytest --evolve: {exc}") from None
        self.warnings.extend(notes)
        return verifier

    # ---------------------------------------------------------------- the end

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        finished = self.finished
        if finished is None:
            return
        report, out = finished.report, self._out
        if finished.diff:
            out.sep("evolved diff (dry run)", "-")
            for line in finished.diff:
                out.line(line, green=line.startswith("+") and not line.startswith("+++"),
                         red=line.startswith("-") and not line.startswith("---"))
        elif self.settings.dry_run:
            out.sep("evolved diff (dry run)", "-")
            out.line("(no change)")
        if self.warnings[self._shown:]:
            out.sep("agentdescent warnings", "-")
            for text in self.warnings[self._shown:]:
                out.line(text, yellow=True)
        improved = _improved(report)
        failed = bool(report.get("error"))
        out.sep("agentdescent summary", "-", red=failed, green=improved and not failed,
                yellow=not improved and not failed)
        # relative to where the user ran pytest, so it can be opened as printed
        here = self.config.invocation_params.dir
        shown = os.path.relpath(finished.report_path, here)
        out.lines(summary_lines(report, report_path=f"{shown} (and report.md)",
                                prefix=self.settings.branch_prefix))
        if finished.pr_line is not None:
            out.line(finished.pr_line, red=finished.pr_failed)
        runs = int(report.get("test_runs") or 0)
        if runs:
            # pytest's closing line counts the reports in ``stats``: without this it
            # would end hundreds of sandboxed test runs on "no tests ran"
            terminalreporter.stats.setdefault(_RUNS_KEY, []).extend([_SandboxedRuns] * runs)


_RUNS_KEY = "sandboxed test runs"


class _SandboxedRuns:
    """Stands for one test run of a candidate in pytest's closing line."""

    count_towards_summary = True


class _BrokenBaseline(Exception):
    """The unchanged artifact cannot be evaluated; the message says why."""


class _Progress:
    """``on_round``: a terminal line and the ``pytest_evolve_round`` hook per round."""

    def __init__(self, session: EvolveSession, proposer: HookProposer, *, total: int,
                 model: ModelProposer | None = None,
                 selection: SelectionLog | None = None) -> None:
        self._session = session
        self._selection = selection
        self._model = model
        self._proposer = proposer
        self._total = total
        self._start = time.monotonic()
        self._calls = 0
        self.previous: float | None = None
        self.history: list[RoundInfo] = []

    def __call__(self, info: RoundInfo) -> None:
        from pytest_agentdescent.hooks import RoundSummary

        calls = self._proposer.calls
        round_calls, self._calls = calls - self._calls, calls
        self.history.append(info)
        self._proposer.observe_round(info)
        if self._model is not None:
            self._model.observe_round(info)
        ran = None if self._selection is None else self._selection.close_round(info.round)
        self._session._out.line(round_line(
            info, total=self._total, previous=self.previous, calls=round_calls,
            elapsed=time.monotonic() - self._start, ran=ran,
        ), green=bool(info.merged))
        if info.reward is not None:
            self.previous = info.reward
        self._session.config.hook.pytest_evolve_round(info=RoundSummary(
            round=info.round, version=info.version, reward=info.reward,
            accepted=bool(info.merged), outcomes=dict(info.reasons), calls=round_calls,
            seconds=info.seconds,
        ))


# ---------------------------------------------------------------- helpers

class _ModelSetup:
    """What ``--evolve-model`` needs, checked before anything runs (usage errors)."""

    def __init__(self, spec: ModelSpec, prices: PriceTable, templates: PromptTemplates
                 ) -> None:
        self.spec = spec
        self.prices = prices
        self.templates = templates


def _model_setup(settings: EvolveSettings, *, check_key: bool = True) -> _ModelSetup:
    """Parse the model spec, check its key, prices and prompt template, or raise UsageError."""
    from agentdescent_core.proposers.models import missing_key, parse_model_spec
    from agentdescent_core.proposers.pricing import PriceTable
    from agentdescent_core.proposers.reflector import load_templates

    assert settings.model is not None
    try:
        spec = parse_model_spec(settings.model)
    except ValueError as exc:
        raise pytest.UsageError(f"--evolve-model: {exc}") from None
    if check_key:  # the SDK is an extra: say which one before asking for its key
        from agentdescent_core.errors import MissingExtra
        from agentdescent_core.extras import require_extra

        try:
            require_extra("anthropic" if spec.provider == "anthropic" else "openai")
        except MissingExtra as exc:
            raise pytest.UsageError(f"--evolve-model {spec} needs {exc.what}: {exc.pip_command}"
                                    ) from None
    # A replay answers from the recording: no request reaches the provider.
    variable = None if settings.llm_cache == "replay" or not check_key else missing_key(spec)
    if variable is not None:
        raise pytest.UsageError(
            f"--evolve-model {spec} needs {variable}: export {variable}=... (the {spec.provider} "
            f"SDK reads it)"
            + ("; or point OPENAI_BASE_URL at an OpenAI-compatible local server such as Ollama"
               if spec.provider == "openai" else "")
        )
    prices = PriceTable().with_overrides({m: (a, b) for m, a, b in settings.prices})
    if settings.max_usd is not None and prices.price(spec.model) is None:
        raise pytest.UsageError(
            f"--evolve-max-usd {settings.max_usd} cannot be enforced: the model {spec.model!r} "
            f"has no price; add a line '{spec.model} = INPUT_USD OUTPUT_USD' (per million "
            "tokens) to the evolve_prices ini key, or drop --evolve-max-usd"
        )
    try:
        templates = load_templates(settings.prompt)
    except (ValueError, OSError) as exc:
        raise pytest.UsageError(f"ini evolve_prompt: {exc}") from None
    return _ModelSetup(spec, prices, templates)


def _unmetered_budgets(settings: EvolveSettings) -> list[str]:
    """Warnings for the model budgets given to a run without a model: nothing counts them."""
    given = [f"{option} {value}" for option, value in (
        ("--evolve-max-usd", settings.max_usd), ("--evolve-max-tokens", settings.max_tokens))
        if value is not None]
    if not given:
        return []
    return [f"{', '.join(given)} counts the --evolve-model proposer's calls, and this run has "
            "no --evolve-model: nothing is counted against it (a pytest_evolve_propose hook's "
            "own calls are not seen); use --evolve-max-calls to cap the hook calls"]


def _proposer_line(implementations: Sequence[str], model: ModelProposer | None) -> str:
    parts = []
    if implementations:
        parts.append("pytest_evolve_propose (" + ", ".join(implementations) + ")")
    if model is not None:
        parts.append(f"model {model.spec} at {model.client.endpoint}")
    return ", then ".join(parts) or "none (--evolve-rounds 0: the baseline is measured only)"


def _improved(report: Mapping[str, Any]) -> bool:
    before, after = report.get("reward_before"), report.get("reward_after")
    return isinstance(before, (int, float)) and isinstance(after, (int, float)) and after > before


def _failed_result(exc: BaseException, tree: FileTree, ledger: Ledger,
                   initial: Mapping[str, str], baseline: float | None,
                   history: Sequence[RoundInfo]) -> EvolutionResult:
    """The result of a run that ended on an error: what dev reached, and why it stopped."""
    from agentdescent_core.errors import RunStopped
    from agentdescent_core.loop.driver import describe_error
    from agentdescent_core.loop.result import EvolutionResult
    from agentdescent_core.stops import StopReason

    if isinstance(exc, _BrokenBaseline):
        error = str(exc)
    elif isinstance(exc, RunStopped):
        error = exc.error
    else:
        error = describe_error(exc)
    # versions accepted before the error stay on dev: report from there
    reached = ledger.state_or_none("dev") or dict(initial)
    return EvolutionResult(
        rendered=tree.render(reached), state=reached, final_reward=baseline,
        initial_reward=baseline, history=list(history), error=error,
        stop_reason=StopReason.ERROR,
    )
