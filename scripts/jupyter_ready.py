"""Wait until a Jupyter server answers on 127.0.0.1 with its token: the one readiness probe of
lab.sh (`./lab.sh start`) and of the whole-lab image's smoke test (scripts/ci/smoke_lab_image.sh).

    python scripts/jupyter_ready.py PORT TOKEN [--pid PID | --container ID] [--deadline S]
                                    [--refused-without-token]

Gives up early when the process (--pid) or the container (--container) it waits for is gone.
With --refused-without-token it also checks that Jupyter refuses a request without the token.
Exit 0 when ready; otherwise one line on stderr saying why, and exit 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def still_there(pid: int | None, container) -> str | None:
    """Why waiting is pointless (the process or the container is gone), or None."""
    if pid is not None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"process {pid} exited"
    if container is not None:
        container.reload()
        if container.status != "running":
            return f"the container stopped ({container.status})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("token")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--container", help="a Docker container id (needs the docker package)")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds (default 120)")
    parser.add_argument("--refused-without-token", action="store_true")
    options = parser.parse_args()
    container = None
    if options.container:
        import docker
        container = docker.from_env().containers.get(options.container)
    url = f"http://127.0.0.1:{options.port}/api/status"
    deadline = time.monotonic() + options.deadline
    while True:
        try:
            with urllib.request.urlopen(f"{url}?token={options.token}", timeout=5) as reply:
                status = json.loads(reply.read())
            break
        except (OSError, ValueError) as exc:
            gone = still_there(options.pid, container)
            if gone:
                print(f"{gone} before Jupyter answered on {url}", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                print(f"Jupyter did not answer on {url} within {options.deadline:.0f} s ({exc})", file=sys.stderr)
                return 1
            time.sleep(0.3)
    if options.refused_without_token:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            print("Jupyter answered without the token", file=sys.stderr)
            return 1
        except urllib.error.HTTPError as exc:
            if exc.code != 403:
                print(f"Jupyter answered {exc.code} without the token, not 403", file=sys.stderr)
                return 1
        print(f"  Jupyter answers with the token (started {status['started']}), refuses without it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
