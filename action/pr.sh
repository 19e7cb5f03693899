#!/usr/bin/env bash
# Open, update or close the pull request of <prefix>stable (`agentdescent pr`);
# it writes the pr-number / pr-url / pr-operation step outputs itself.
set -euo pipefail

python="${AGENTDESCENT_PYTHON:?the install step did not run}"
cli="$(dirname "$python")/agentdescent"
args=(pr --remote "${AGENTDESCENT_REMOTE:-origin}" --branch-prefix "${AGENTDESCENT_BRANCH_PREFIX:-agentdescent/}")
if [ -n "${AGENTDESCENT_BASE:-}" ]; then
  args+=(--base "$AGENTDESCENT_BASE")
fi
if [ "${AGENTDESCENT_DRAFT:-false}" = "true" ]; then
  args+=(--draft)
fi
# Labels: separated by commas or newlines.
while IFS= read -r label; do
  label="$(echo "$label" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
  if [ -n "$label" ]; then
    args+=(--label "$label")
  fi
done < <(printf '%s\n' "${AGENTDESCENT_LABELS:-agentdescent}" | tr ',' '\n')
"$cli" "${args[@]}"
