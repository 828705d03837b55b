"""The stop button, for real: a torture run in a process of its own is interrupted (SIGINT,
what Jupyter's stop button sends a kernel) while its trial's progress shows. The run must
stop within a bounded time, its progress must say it was stopped, and none of the servers
and client processes it started may outlive it.

Real servers (one ZooKeeper, one Redis for the store), in a LABKIT_HOME of this test's own:
every process the run started has that folder in its command line or its working directory,
so "nothing left running" is checked over /proc, not over what the run says of itself."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.progress import LINE_PREFIX
from labkit.timing import wait_until

pytestmark = pytest.mark.slow

RUN = ("from labkit.torture.run import torture\n"
       "torture('zookeeper', clients=2, duration=60.0, nemesis='pause', seed=3, quiet=True)\n")


def processes_inside(folder: Path) -> list[str]:
    """Processes whose command line or working directory names ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            where = os.readlink(entry / "cwd")
        except OSError:           # gone meanwhile, or not ours to read
            continue
        if str(folder) in command or where.startswith(str(folder)):
            found.append(f"{entry.name}: {command[:120]}")
    return found


def test_an_interrupted_torture_stops_its_servers_and_clients(tmp_path):
    home = tmp_path / "labkit-home"
    environment = {**os.environ, "LABKIT_HOME": str(home), "LABKIT_PROGRESS": "lines", "PYTHONUNBUFFERED": "1"}
    # SIGINT as a terminal delivers it: a script's background job (the suite's rest part) ignores
    # it, and a child that starts with it ignored never raises KeyboardInterrupt
    run = subprocess.Popen([sys.executable, "-c", RUN], env=environment, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    try:
        # the trial is under way once its step is shown: its servers and clients are running
        for line in run.stdout:
            lines.append(line)
            if line.startswith(LINE_PREFIX + "torture of zookeeper 1 of 1"):
                break
        assert processes_inside(home), "the trial should be running servers and clients by now:\n" + "".join(lines)
        time.sleep(1.0)            # a moment into the trial: the clients take turns, the nemesis waits
        interrupted_at = time.monotonic()
        run.send_signal(signal.SIGINT)
        rest, _ = run.communicate(timeout=120)
        lines.append(rest)
    finally:
        if run.poll() is None:
            run.kill()
    output = "".join(lines)
    stopped = [line for line in output.splitlines() if line.startswith(LINE_PREFIX) and "stopped by" in line]
    assert stopped and "KeyboardInterrupt" in stopped[-1], output[-3000:]
    assert "KeyboardInterrupt" in output and run.returncode != 0, "the interrupt should end the run as an interrupt"
    # the servers' processes may take a moment to be reaped after their lab's down()
    wait_until(lambda: not processes_inside(home), "every process of the interrupted run to end", timeout=15,
               error=lambda: AssertionError("still running after the interrupt:\n" + "\n".join(processes_inside(home))))
    print(f"stopped {time.monotonic() - interrupted_at:.1f} s after the interrupt")
