#!/usr/bin/env bash
# Smoke test of the whole-lab image, run by the Docker leg (scripts/ci/docker.sh) once the
# images are built: docker/compose.yaml, as a learner runs it, must serve Jupyter on
# 127.0.0.1 with its token and refuse without it, and let lesson 10 make its namespaces; and,
# run as a uid with no line in the image's /etc/passwd (what compose's default LAB_UID is
# there, or a pod's random uid), a lab with PostgreSQL must start and answer (initdb under
# nss_wrapper; ~7 s warm). Needs a Docker engine (DOCKER_HOST as set).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh

compose() {
    if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt_install docker-compose
    else say "smoke test of the whole-lab image skipped: no docker compose here"; exit 0; fi
fi
JUPYTER_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(16))')
LAB_PORT=$(free_port 8888)
LAB_UID=$(id -u) LAB_GID=$(id -g)
export JUPYTER_TOKEN LAB_PORT LAB_UID LAB_GID
say "smoke test: docker/compose.yaml serves Jupyter on 127.0.0.1:$LAB_PORT"
project=(-f docker/compose.yaml -p labkit-smoke)
compose "${project[@]}" up -d --no-build >/dev/null 2>&1 || { compose "${project[@]}" up -d --no-build; exit 1; }
status=0
container=$(compose "${project[@]}" ps -q lab)
"$PY" scripts/jupyter_ready.py "$LAB_PORT" "$JUPYTER_TOKEN" --container "$container" --deadline 180 \
    --refused-without-token || status=1
# lesson 10's half-open cells: the learner's container may make a user + network namespace
docker exec "$container" python -c 'from labkit.faults.namespace import check_namespaces; check_namespaces()' ||
    { say "smoke test: lesson 10's half-open cells could not make a namespace in the lab container"; status=1; }
[ "$status" -eq 0 ] || compose "${project[@]}" logs --tail 30 >&2
compose "${project[@]}" down --timeout 20 >/dev/null 2>&1 || status=1
say "smoke test: as uid 54321 (no user entry in the image), a lab with PostgreSQL answers"
docker run --rm --network host --user 54321:54321 labkit-lab:latest python -c '
import labkit
with labkit.up(postgres=True, quiet=True) as lab, lab.postgres.connect() as conn:
    assert conn.execute("select 40 + 2").fetchone() == (42,)' || status=1
exit "$status"
