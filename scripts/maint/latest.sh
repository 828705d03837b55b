#!/usr/bin/env bash
# ./lab.sh test --latest [PYTEST ARGS...]: the suite (local processes, notebooks included)
# against the newest release of every dependency, in .venv-latest: the step before
# `./lab.sh lock --upgrade`. CI never runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
venv="$ROOT/.venv-latest"

./lab.sh setup  # the servers (and .venv, as for ./lab.sh test)
install_test_extras
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
say "installing the newest release of every dependency into .venv-latest (the lock is not used)"
pip_quiet "$venv/bin/python" --upgrade pip
pip_quiet "$venv/bin/python" --upgrade --upgrade-strategy eager -e ".[test]"
install_lab_settings "$venv"
say "what differs from $LOCK:"
"$venv/bin/python" scripts/maint/lock_diff.py "$LOCK"
export LABKIT_HOME="${LABKIT_HOME:-$HOME/.local/state/labkit-tests-latest}"
say "running the test suite and every notebook with the newest versions"
status=0
workers=$(test_workers 3)
run_pytest "$venv/bin/python" -m pytest tests notebooks --nbval-lax -n "$workers" --dist loadfile "$@" || status=$?
labkit_down_quietly "$venv/bin/python"
if [ "$status" -eq 0 ]; then
    say "the newest versions PASS: ./lab.sh lock --upgrade, then ./lab.sh test, then commit the lock"
else
    say "the newest versions FAIL (pytest exit $status): keep the lock; the failures above say what broke"
fi
exit "$status"
