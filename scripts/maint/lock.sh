#!/usr/bin/env bash
# ./lab.sh lock [uv pip compile options]: rewrite requirements/lock.txt from pyproject.toml,
# and requirements/hub.txt (the class hub's packages) held to the lock's versions. Pins that
# still fit are kept; `./lab.sh lock --upgrade` moves everything to the newest release (after
# `./lab.sh test --latest` passed), `--upgrade-package NAME` just one.
#
# The tool that writes the lock; learners never need it. uv rather than pip-tools:
# `--universal` resolves once for every platform and Python >= 3.10 (macOS-only and
# Windows-only dependencies get markers and hashes), where pip-compile locks only the machine
# it runs on, so a Mac learner's `--require-hashes` install would fail; and it resolves in
# seconds. The lock it writes is a plain requirements file: pip installs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
UV_VERSION=0.13.9
tools="$ROOT/.venv-tools"

if [ "$("$tools/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    say "installing uv $UV_VERSION (the tool that writes the lock) into .venv-tools"
    [ -x "$tools/bin/python" ] || python3 -m venv "$tools"
    pip_quiet "$tools/bin/python" "uv==$UV_VERSION"
fi
"$tools/bin/uv" pip compile pyproject.toml --extra test --universal --python-version 3.10 \
    --generate-hashes --custom-compile-command "./lab.sh lock" --quiet -o "$LOCK" "$@"
say "$LOCK: $(grep -c '^[a-z0-9]' "$LOCK") pins; the next ./lab.sh start/test/setup installs them"
"$tools/bin/uv" pip compile requirements/hub.in --constraint "$LOCK" --universal --python-version 3.10 \
    --generate-hashes --custom-compile-command "./lab.sh lock" --quiet -o requirements/hub.txt "$@"
say "requirements/hub.txt: $(grep -c '^[a-z0-9]' requirements/hub.txt) pins (docker/hub/hub.sh installs them)"
