#!/usr/bin/env bash
# The non-root leg of ./lab.sh test: every notebook as an ordinary user (labkit-learner),
# after root installed everything: nothing a learner runs may need root. This is where the
# notebooks run when the suite runs as root (the local leg runs them otherwise).
#
#   scripts/ci/nonroot.sh             the leg (exit 77 and why when it cannot run here)
#   scripts/ci/nonroot.sh --can-run   exit 0 when it can run here, else 1, silently
#
# The user gets its own copy of the course and a venv made from Debian's /usr/bin/python3
# (the venv of ./lab.sh setup may come from a python under root's home, which other users
# cannot execute), filled by copying that venv's packages when the Python minor versions
# match, then topped up from the lock by pip as that user (~15 s). Every notebook, a few side
# by side (LABKIT_TEST_WORKERS, scripts/lib.sh); LABKIT_NONROOT_NOTEBOOKS="notebooks/00_... ..."
# runs only those; LABKIT_NONROOT_TESTS=no skips the leg (the local leg then runs the notebooks).
# Before the notebooks, a warm-up as that user (bytecode, matplotlib's font cache, one kernel),
# so that the kernels starting side by side do not each pay a fresh user's first-use costs.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
NONROOT_USER=labkit-learner
# how long a kernel may take to answer at its start (nbval's default is 60 s): warm, a kernel
# answers in ~2 s on an idle machine, but three start at once here, beside labs starting and
# whatever else runs (the load mode's hogs, a classroom's other kernels); a kernel that is
# really stuck still fails, after 3 minutes instead of 1
KERNEL_STARTUP_TIMEOUT=180

why_not() {
    if [ "${LABKIT_NONROOT_TESTS:-auto}" = no ]; then echo "LABKIT_NONROOT_TESTS=no"
    elif [ "$(id -u)" != 0 ] || ! command -v useradd >/dev/null || ! command -v runuser >/dev/null ||
         [ ! -x /usr/bin/python3 ]; then
        echo "it needs root (to create a user) and Debian's /usr/bin/python3"
    fi
}

if [ "${1:-}" = --can-run ]; then [ -z "$(why_not)" ]; exit; fi
reason=$(why_not)
[ -z "$reason" ] || { say "non-root leg skipped: $reason"; exit 77; }

began=$SECONDS
id -u "$NONROOT_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$NONROOT_USER"
home=$(getent passwd "$NONROOT_USER" | cut -d: -f6)
# a copy of its own for this run, removed at the end: two runs at once on one machine (two
# clones, scripts/maint/soak.sh beside a developer's run) once emptied each other's copy
course=$(mktemp -d "$home/labkit-course.XXXXXX")
forget_course() {
    as_learner .venv/bin/python -m labkit.cli down >/dev/null 2>&1 || true
    rm -rf "$course"
}
trap forget_course EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cp -r labkit notebooks pyproject.toml "$course/"
version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site="$course/.venv/lib/python$version/site-packages"
/usr/bin/python3 -m venv "$course/.venv"
if [ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$version" ]; then
    # same minor version: this venv's packages work there (a head start, not the whole
    # story: the lock's markers may differ, e.g. redis needs async-timeout before 3.11.3)
    cp -a "$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/." "$site/"
    rm -f "$site"/__editable__*labkit* "$site"/*labkit*.pth
fi
echo "$course" > "$site/labkit-course.pth"  # labkit from the user's copy
cp "$LOCK" "$course/lock.txt"
chown -R "$NONROOT_USER:" "$course"

as_learner() {
    # as_learner COMMAND...: COMMAND as the learner, in its copy of the course, with a clean environment
    runuser -u "$NONROOT_USER" -- env -i -C "$course" HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin \
        LANG=C.UTF-8 LABKIT_HOME="$course/.labkit" LABKIT_BACKEND=local LABKIT_EXPECT_CURATOR="${LABKIT_EXPECT_CURATOR:-}" "$@"
}

as_learner .venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r lock.txt ||
    { say "non-root leg: the packages of $LOCK could not be installed for $NONROOT_USER"; exit 1; }
say "copy and venv for $NONROOT_USER ready in $((SECONDS - began)) s"
# What a fresh user pays on first use, paid once here and not by three kernels starting at once
# (#34: notebook 06's kernel "didn't respond in 60 seconds" beside 07 and 04, in 2 of 2 fresh
# runs): the bytecode of the venv and of labkit (the copy's sources are newer than any cached
# .pyc), matplotlib's font cache (~/.cache/matplotlib), and one kernel started and stopped.
warmed=$SECONDS
as_learner .venv/bin/python -m compileall -q -j 0 "$site" labkit >/dev/null ||
    say "non-root leg: compileall found files it could not compile (the notebooks compile them again)"
as_learner .venv/bin/python -c 'import matplotlib.pyplot, matplotlib.font_manager' ||
    { say "non-root leg: matplotlib does not import for $NONROOT_USER"; exit 1; }
as_learner .venv/bin/python -c 'import sys
from jupyter_client.manager import start_new_kernel
manager, client = start_new_kernel(kernel_name="python3", startup_timeout=float(sys.argv[1]))
client.stop_channels()
manager.shutdown_kernel(now=True)' "$KERNEL_STARTUP_TIMEOUT" ||
    { say "non-root leg: a kernel did not start for $NONROOT_USER within $KERNEL_STARTUP_TIMEOUT s"; exit 1; }
say "bytecode, font cache and a first kernel ready for $NONROOT_USER in $((SECONDS - warmed)) s"
if [ -n "${LABKIT_NONROOT_NOTEBOOKS:-}" ]; then read -r -a notebooks <<< "$LABKIT_NONROOT_NOTEBOOKS"
else mapfile -t notebooks < <(notebooks_longest_first); fi
# two at a time: the Docker leg's tests and its Debian 13 run start beside this leg; with three
# notebooks at once a fresh-clone run reached a load of 10 on 2 cores and four lessons missed
# their margins (a healthy hold of 2.19 s in 06, a lease failover past its bound in 09)
workers=$(test_workers 2)
say "running ${#notebooks[@]} notebooks as $NONROOT_USER (uid $(id -u "$NONROOT_USER")), $workers at a time"
status=0
# each notebook whole on one worker (its cells share one kernel), in the order given
run_pytest as_learner .venv/bin/python -m pytest "${notebooks[@]}" --nbval-lax -n "$workers" --dist loadfile \
    --no-loadscope-reorder --nbval-kernel-startup-timeout "$KERNEL_STARTUP_TIMEOUT" || status=$?
say "non-root leg: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s"
exit "$status"
