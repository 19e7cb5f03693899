#!/usr/bin/env bash
# Bring back what earlier sessions left on the remote, so this one resumes:
# the <prefix>* branches (dev, stable) and refs/<prefix>* (the session
# history, refs/agentdescent/sessions for the default prefix).  A runner
# starts from an empty disk; on the very first session none of these exist
# yet, which is fine.
set -euo pipefail

prefix="${AGENTDESCENT_BRANCH_PREFIX:-agentdescent/}"
remote="${AGENTDESCENT_REMOTE:-origin}"

case "$prefix" in
  */) ;;
  *) echo "::error::branch-prefix must end with '/', got '$prefix'"; exit 1 ;;
esac

if [ "$(git rev-parse --is-shallow-repository)" = "true" ]; then
  echo "the checkout is shallow; fetching the full history (use fetch-depth: 0 to skip this)" >&2
  git fetch --quiet --unshallow --no-tags "$remote"
fi

# Glob refspecs that match nothing are not an error; anything else is.
if ! out="$(git fetch --no-tags "$remote" \
    "+refs/heads/${prefix}*:refs/heads/${prefix}*" \
    "+refs/${prefix}*:refs/${prefix}*" 2>&1)"; then
  case "$out" in
    *"couldn't find remote ref"*|*"no such ref"*)
      echo "no earlier session on $remote; starting fresh" >&2 ;;
    *)
      echo "$out" >&2
      echo "::error::could not fetch the agentdescent branches from $remote"
      exit 1 ;;
  esac
fi
git for-each-ref --format='resumed %(refname)' "refs/heads/${prefix}" "refs/${prefix}" >&2
