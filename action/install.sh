#!/usr/bin/env bash
# Install pytest-agentdescent from the Action's own checkout into a virtualenv
# under RUNNER_TEMP.  --system-site-packages: the virtualenv sees what the
# workflow installed into its Python (the project's test dependencies), while
# the Action's own packages stay out of the user's environment.
set -euo pipefail

base_python="${AGENTDESCENT_BASE_PYTHON:-}"
if [ -z "$base_python" ]; then
  base_python="$(command -v python3 || command -v python)"
fi
venv="${RUNNER_TEMP:?RUNNER_TEMP is not set}/agentdescent-venv"

echo "::group::Install pytest-agentdescent"
"$base_python" -m venv --system-site-packages "$venv"
if [ -x "$venv/bin/python" ]; then
  python="$venv/bin/python"
else
  python="$venv/Scripts/python.exe"
fi
# [all]: the model SDKs, the docker SDK and Dask are extras; the Action offers every model,
# sandbox and executor
"$python" -m pip install --disable-pip-version-check --quiet "${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set}[all]"
"$python" -c "import pytest_agentdescent.cli, anthropic, openai, docker, distributed"
echo "::endgroup::"
echo "python=$python" >> "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
echo "installed pytest-agentdescent into $venv" >&2
