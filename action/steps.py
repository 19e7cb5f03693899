"""The Python steps of the composite Action (``action.yml``): evolve, push, summary, review.

Each step is ``python action/steps.py STEP`` run by the Action's virtualenv.
Inputs arrive as ``AGENTDESCENT_*`` environment variables (the Action maps
``${{ inputs.* }}`` onto them, so no input is ever spliced into a script), the
results leave through ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY``.  The
script is also runnable outside Actions (the tests do that): without those
variables the outputs are printed instead.

``review`` is the Action's ``mode: review``: on a pull request it runs
``agentdescent review --base <the pull request's base sha> --head HEAD
--json`` and keeps one sticky comment on the pull request up to date with the
verdict (:mod:`agentdescent_core.github.review_comment`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentdescent_core.github import (
    GitHubClient,
    GitHubError,
    append_step_summary,
    publish_review_comment,
    push_branches,
    render_review_comment,
    render_review_error,
    review_status,
    set_outputs,
)
from pytest_agentdescent.cli._common import installed_cli
from pytest_agentdescent.cli.project import repo_root, state_dir, state_dir_argument


def _env(name: str, default: str = "") -> str:
    return os.environ.get(f"AGENTDESCENT_{name}", default).strip()


def _flag(name: str) -> bool:
    value = _env(name, "false").lower()
    if value not in ("true", "false", ""):
        raise SystemExit(f"::error::input {name.lower().replace('_', '-')} must be true or "
                         f"false, got {value!r}")
    return value == "true"


def _pytest_args() -> list[str]:
    return shlex.split(_env("PYTEST_ARGS"))


def _state_dir(root: Path) -> Path:
    return state_dir(root, state_dir_argument(_pytest_args()))


def _cli() -> str:
    """The ``agentdescent`` script next to this interpreter (the Action's virtualenv)."""
    found = installed_cli()
    if found is None:
        raise SystemExit("::error::the agentdescent command is not installed next to "
                         f"{sys.executable}; did the install step run?")
    return found


def evolve_command() -> list[str]:
    """The ``agentdescent run ...`` command (``pytest --evolve``) the inputs describe."""
    command = [_cli(), "run", *_env("PATHS").split()]
    for option, name in (("--model", "MODEL"), ("--rounds", "ROUNDS"),
                         ("--workers", "WORKERS"), ("--repeats", "REPEATS")):
        if _env(name):
            command += [option, _env(name)]
    if _flag("DRY_RUN"):
        command.append("--dry-run")
    extra: list[str] = []
    if _env("BRANCH_PREFIX"):
        extra += ["--evolve-branch-prefix", _env("BRANCH_PREFIX")]
    if _env("EXECUTOR"):
        extra += ["--evolve-executor", _env("EXECUTOR")]
    return [*command, "--", *extra, *_pytest_args()]


def _reward(value: object) -> str:
    return "" if value is None or isinstance(value, bool) else f"{float(value):.4f}"  # type: ignore[arg-type]


def evolve() -> int:
    """Run the evolution; write its outputs (rewards, cost, report); return pytest's exit code."""
    root = repo_root()
    command = evolve_command()
    print("::group::Evolve: agentdescent run (pytest --evolve), one line per round", flush=True)
    try:
        code = subprocess.run(command, check=False).returncode
    finally:
        print("::endgroup::", flush=True)
    report_path = _state_dir(root) / "report.json"
    report: dict[str, Any] = {}
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
    else:
        print(f"::error::the run wrote no {report_path}; see the log above (with no `paths` "
              "input, evolve_paths of the pytest configuration names the artifact roots)")
        code = code or 1
    outputs = {
        "reward-before": _reward(report.get("reward_before")),
        "reward-after": _reward(report.get("reward_after")),
        "report": str(report_path) if report else "",
        "cost-usd": _reward(report.get("cost_usd")),
    }
    if not set_outputs(outputs):
        print(json.dumps(outputs))
    return code


def push() -> int:
    """Push dev, stable and the session history back, so the next session resumes."""
    root = repo_root()
    prefix = _env("BRANCH_PREFIX", "agentdescent/") or "agentdescent/"
    remote = _env("REMOTE", "origin") or "origin"
    import git

    with git.Repo(root) as repo:
        existing = {ref.path for ref in repo.refs}
    # The session history of scheduled runs: refs/agentdescent/sessions by default.
    wanted = [f"refs/heads/{prefix}dev", f"refs/heads/{prefix}stable", f"refs/{prefix}sessions"]
    refs = [ref for ref in wanted if ref in existing]
    if not refs:
        print("nothing to push: no agentdescent branch or session history here",
              file=sys.stderr)
        return 0
    pushed = push_branches(root, remote=remote, refs=refs)
    for ref in refs:
        state = "pushed" if ref in pushed else "up to date"
        print(f"{state} {ref}", file=sys.stderr)
    return 0


def summary() -> int:
    """Append report.md (and the pull request's fate) to the job summary."""
    root = repo_root()
    report_md = _state_dir(root) / "report.md"
    parts: list[str] = []
    operation, url = _env("PR_OPERATION"), _env("PR_URL")
    if operation:
        where = f" — {url}" if url else ""
        parts.append(f"**agentdescent pull request:** {operation}{where}\n")
    if report_md.is_file():
        parts.append(report_md.read_text(encoding="utf-8"))
    else:
        parts.append("**agentdescent:** no report was written; the evolution did not run "
                     "to the end (see the step log).\n")
    text = "\n".join(parts)
    if not append_step_summary(text):
        print(text)
    return 0


def _pull_request_event() -> tuple[int, str]:
    """The pull request's number and base sha, from the event GitHub wrote to a file."""
    name = os.environ.get("GITHUB_EVENT_NAME", "") or "unknown"
    path = os.environ.get("GITHUB_EVENT_PATH", "")
    if not path or not Path(path).is_file():
        raise SystemExit("::error::mode: review needs the event of a pull request "
                         "($GITHUB_EVENT_PATH is not set or no file); run it from a workflow "
                         "`on: pull_request`")
    event = json.loads(Path(path).read_text(encoding="utf-8"))
    pull = event.get("pull_request") if isinstance(event, dict) else None
    number = pull.get("number") if isinstance(pull, dict) else None
    base = (pull.get("base") or {}).get("sha") if isinstance(pull, dict) else None
    if not isinstance(number, int) or not isinstance(base, str) or not base:
        raise SystemExit(f"::error::mode: review runs on pull requests, but this is a {name} "
                         "event without pull_request.number and pull_request.base.sha; use "
                         "`on: pull_request` (or evolve with the default mode)")
    return number, base


def _have_commit(root: Path, sha: str) -> bool:
    done = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=root,
                          capture_output=True, check=False)
    return done.returncode == 0


def review_command(base: str) -> list[str]:
    """The ``agentdescent review ... --json`` command of the inputs, head = the checkout."""
    command = [_cli(), "review", *_env("PATHS").split(), "--base", base, "--head", "HEAD",
               "--json"]
    if _env("REPEATS"):
        command += ["--repeats", _env("REPEATS")]
    return [*command, "--", *_pytest_args()]


def _review_file() -> Path:
    """Where the review step leaves its result for the comment step."""
    return Path(os.environ.get("RUNNER_TEMP") or repo_root() / ".agentdescent") / \
        "agentdescent-review.json"


def review() -> int:
    """Run ``agentdescent review`` on the pull request; leave the result for :func:`comment`.

    This step holds no token: the tests of the head run here, and under the
    ``local`` sandbox they could read any secret of this process or its
    parents.  It exits 0 whatever the verdict (the comment step, which has the
    token, fails the job), and 1 only when it could not run at all.
    """
    root = repo_root()
    number, base = _pull_request_event()
    remote = _env("REMOTE", "origin") or "origin"
    if not _have_commit(root, base):
        subprocess.run(["git", "fetch", "--quiet", "--no-tags", remote, base], cwd=root,
                       check=False)
    command = review_command(base)
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    print(f"::group::Review: agentdescent review --base {base[:12]} --head HEAD", flush=True)
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
        sys.stderr.write(done.stderr)
    finally:
        print("::endgroup::", flush=True)
    words = command[1:-1] if command[-1] == "--" else command[1:]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=False).stdout.strip()
    shown = " ".join(shlex.quote(w) for w in ["agentdescent", *words] if w != "--json")
    shown = shown.replace("--head HEAD", f"--head {head[:12]}")
    data: dict[str, Any] | None = None
    try:
        parsed = json.loads(done.stdout) if done.stdout.strip() else None
        data = parsed if isinstance(parsed, dict) and "ok" in parsed else None
    except ValueError:
        data = None
    record = {"number": number, "base": base, "head": head, "command": shown,
              "returncode": done.returncode, "result": data,
              "error": "" if data is not None else (
                  done.stderr.strip()[-4000:] or f"agentdescent review exited "
                                                 f"{done.returncode}")}
    target = _review_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record), encoding="utf-8")
    return 0


def comment() -> int:
    """Keep the pull request's sticky review comment current; exit 1 when the review failed.

    A pull request that changes no artifact file passes as ``skipped``; its
    earlier comment, if any, is updated so it does not show a stale verdict,
    but no new comment is made for it.
    """
    source = _review_file()
    if not source.is_file():
        print("::error::the review step left no result; see its log")
        return 1
    record = json.loads(source.read_text(encoding="utf-8"))
    number, data = int(record["number"]), record.get("result")
    if isinstance(data, dict):
        status = review_status(data)
        body = render_review_comment(data, command=str(record["command"]))
    else:
        status = "failed"
        body = render_review_error(str(record["error"]), base=str(record["base"]),
                                   head=str(record["head"]), command=str(record["command"]))
    url = ""
    try:
        with GitHubClient(os.environ.get("GITHUB_TOKEN", ""),
                          os.environ.get("GITHUB_REPOSITORY", ""),
                          api_url=os.environ.get("GITHUB_API_URL") or
                          "https://api.github.com") as client:
            operation, url = publish_review_comment(client, number, body,
                                                    create=status != "skipped")
        print(f"review comment on #{number}: {operation} {url}".rstrip(), file=sys.stderr)
    except GitHubError as exc:
        # The verdict is the exit code; a comment that cannot be written (a fork's
        # read-only token) is reported, not turned into a failed review.
        print(f"::warning::could not write the review comment on #{number}: {exc}")
    if not append_step_summary(body):
        print(body)
    outputs = {"review-result": status, "comment-url": url}
    if not set_outputs(outputs):
        print(json.dumps(outputs))
    if status == "failed":
        print(f"::error::agentdescent review FAILED on #{number}; see the comment and the log")
        return 1
    return 0


STEPS = {"evolve": evolve, "push": push, "summary": summary, "review": review,
         "comment": comment}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in STEPS:
        print(f"usage: steps.py {{{'|'.join(STEPS)}}}", file=sys.stderr)
        return 2
    return STEPS[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
