#!/usr/bin/env bash
# The course on Debian 13, a part of the Docker leg (scripts/ci/docker.sh). Debian 12 is the
# lab's base everywhere else; this checks that a learner on Debian 13 gets a working course:
#
#   scripts/ci/debian13.sh build   the whole-lab image FROM a Debian 13 base, made the same way
#                                  as Debian 12's (docker/build.sh lab trixie): Debian 13's own
#                                  python3 (3.13) installs requirements/lock.txt, hashes checked,
#                                  next to its own ZooKeeper, etcd, Redis and PostgreSQL.
#                                  Cached: seconds when nothing changed, ~40 s when the lock
#                                  changed, ~3.5 min the first time (the base included).
#   scripts/ci/debian13.sh test    in one container of it, the quick tests that start no server
#                                  (pytest --leg pythons) and notebook 00 on real servers, which
#                                  labkit starts in there as local processes (~40 s alone)
#
# The test container has no network but its own loopback (--network none): its servers listen
# on its own 127.0.0.1, so they cannot meet the ports of the tests the Docker leg runs at the
# same time, and nothing leaves it. Its CPU share is the default one, as a learner's would be:
# with the smallest (--cpu-shares 2, against 1024 for each of the leg's server containers)
# notebook 00's timing asserts failed on CI beside the leg's tests (2026-12-02). It runs on a
# copy of this checkout (notebook 00 writes its journal next to the notebook). Its output goes
# to /tmp/labkit-debian13.log; a failure says which base failed and shows the end of that log
# and each failure's error lines. Needs a Docker engine (DOCKER_HOST as set).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
IMAGE=labkit-lab:trixie
LOG=/tmp/labkit-debian13.log
NOTEBOOK=notebooks/00_start_here.ipynb
WHAT="${1:-}"

failed() {
    # failed WHAT: say which base failed, with the end of its log and each failure's error lines
    tail -30 "$LOG" >&2
    sed -n '/= FAILURES =/,/short test summary/p' "$LOG" | sed 's/\x1b\[[0-9;]*m//g' |
        grep -E '^(_{3,} |E  |[A-Za-z.]*(Error|Exception|Expired)\b)' | head -40 >&2 || true
    say "Debian 13 ($IMAGE, Debian 13's Python and servers): $1 FAILED (full log: $LOG)"
    exit 1
}

# the test container: a copy of the checkout (without its venvs, git and outputs), the versions
# it runs on, then the command it is given
CONTAINER=(docker run --rm --network none --label labkit.check=debian13
           --user "$(id -u):$(id -g)" -v "$ROOT:/checkout:ro" -e LABKIT_HOME=/tmp/labkit-tests
           -e PYTHONDONTWRITEBYTECODE=1 "$IMAGE" bash -c '
               set -e
               mkdir /tmp/course
               tar -C /checkout --exclude="./.venv*" --exclude=./.git --exclude=./artifacts \
                   --exclude=./web/sandbox/node_modules -c . | tar -x -C /tmp/course
               cd /tmp/course
               dpkg-query -W python3 libzookeeper-java etcd-server redis-server default-jre-headless postgresql
               exec "$@"' bash)

case "$WHAT" in
    build)
        began=$SECONDS
        docker/build.sh lab trixie > "$LOG" 2>&1 || failed "building the image"
        say "Debian 13: $IMAGE ready in $((SECONDS - began)) s" ;;
    test)
        began=$SECONDS
        # a container a killed run left behind
        docker ps -aq --filter label=labkit.check=debian13 | xargs -r docker rm -f >/dev/null
        workers=$(test_workers 2)
        run_pytest "${CONTAINER[@]}" python -m pytest tests "$NOTEBOOK" --leg pythons --nbval-lax --nbval-current-env \
            -q -n "$workers" --dist loadfile > "$LOG" 2>&1 || failed "the quick tests and $NOTEBOOK"
        say "Debian 13: the quick tests and $NOTEBOOK passed in $((SECONDS - began)) s: $(tail -1 "$LOG")"
        say "Debian 13's packages: $(grep -E '^(python3|libzookeeper-java|etcd-server|redis-server|default-jre-headless|postgresql)'$'\t' "$LOG" |
            tr '\t' ' ' | paste -sd, | sed 's/,/, /g')" ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
esac
