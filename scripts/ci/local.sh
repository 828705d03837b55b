#!/usr/bin/env bash
# The local leg of ./lab.sh test: the tests with every server a local process.
#
#   scripts/ci/local.sh [--quick | --notebooks] [PYTEST ARGS...]
#     --quick      without the slow tests and the browser (pytest --leg quick), no notebooks
#     --notebooks  every notebook too (when the non-root leg does not run them)
# Run after ./lab.sh setup; LABKIT_HOME keeps the tests' labs apart from a learner's lab.
# LABKIT_TEST_WORKERS: how many test files run side by side (default 3; 0: one at a time); with
# workers, the timing races one file at a time and beside them the rest on one worker fewer
# (scripts/lib.sh run_pytest_in_parts).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

leg=local paths=(tests) extra=()
case "${1:-}" in
    --quick) shift; leg=quick ;;
    --notebooks) shift; paths=(tests notebooks); extra=(--nbval-lax) ;;
esac
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests}"
workers=$(test_workers 3)
say "running the tests (leg $leg) on real servers (local processes), $workers files at a time: ${paths[*]}"
status=0
# the timing races one at a time, beside them whole files side by side (tests/conftest.py: --part, work_unit)
run_pytest_in_parts "$workers" "$PY" -m pytest "${paths[@]}" --leg "$leg" "${extra[@]}" "$@" || status=$?
labkit_down_quietly "$PY"
exit "$status"
