#!/usr/bin/env bash
# scripts/maint/sandbox_js.sh: compile the TypeScript sandbox (web/sandbox/src/*.mts) into
# labkit/practice/web/*.mjs, the JavaScript that ships in the package (a learner needs no
# Node). Run it after editing the TypeScript, and commit both: tests/practice/test_ts_sandbox.py
# compiles afresh and fails if the committed JavaScript differs. Needs node and npm; npm ci
# installs the typescript that web/sandbox/package-lock.json pins.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
command -v npm >/dev/null || { say "npm is not installed: apt-get install -y nodejs npm" >&2; exit 1; }
[ -x web/sandbox/node_modules/.bin/tsc ] || (cd web/sandbox && npm ci --no-audit --no-fund)
rm -f labkit/practice/web/*.mjs
web/sandbox/node_modules/.bin/tsc -p web/sandbox
say "compiled into labkit/practice/web: $(cd labkit/practice/web && echo *.mjs)"
