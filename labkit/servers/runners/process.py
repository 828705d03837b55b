"""A server node run as a local process: start, SIGKILL, SIGTERM, SIGSTOP/SIGCONT.

Processes start in their own session so that a Ctrl-C in a notebook or terminal does
not reach them; the lab's state file records each pid with its start time, so that a
reaper can tell our process from an unrelated one that reused the pid. A restart (after a
kill, a crash_restart) is a new process with a new pid: the runner calls its ``on_start``
after every start, and the lab records the new pid there (``Lab.save_state``), so no
caller has to remember to. ``servers_inside`` is the reaper's second look, for a process
the state file missed all the same.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from labkit.timing import became_true


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a pid (Linux), to detect pid reuse; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return "unknown"


def process_state(pid: int) -> str:
    """'running', 'paused' (SIGSTOPped) or 'stopped' (gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            code = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return "stopped"
        return "running"
    if code in ("Z", "X"):
        return "stopped"
    return "paused" if code in ("T", "t") else "running"


def wait_for_process_state(pid: int, reached, timeout: float = 5.0) -> bool:
    """Poll until ``reached(process_state(pid))``; True if it did within the timeout.
    SIGSTOP and SIGCONT are asynchronous: a JVM's many threads take a moment to all stop."""
    return became_true(lambda: reached(process_state(pid)), timeout, poll=0.005)


def process_rss_bytes(pid: int | None) -> int | None:
    """Resident memory of a process (VmRSS in /proc on Linux, ``ps`` elsewhere); None if gone."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return None  # a zombie has no VmRSS
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True, timeout=5).stdout
        return int(out.strip()) * 1024 if out.strip() else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def process_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def servers_inside(folder: str | Path, executables: set[str], leaders: set[int] = frozenset()) -> list[int]:
    """This user's processes that look like servers of the lab in ``folder`` though its state
    file does not list them: each runs one of ``executables`` (real paths), has its working
    directory or a command-line argument inside ``folder``, and leads a session of its own, as
    every process ``LocalProcess`` starts does (or belongs to the session of one of ``leaders``:
    a postmaster's backends). All three are needed: a learner's shell, ``tail -f`` of a log, or
    a Python started by hand in the folder is not ours to stop. Processes of other users are
    skipped before anything of them is read. Linux only (/proc); elsewhere nothing is found."""
    folder = str(folder).rstrip("/")
    inside = folder + "/"
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            cwd = os.readlink(f"{entry.path}/cwd").removesuffix(" (deleted)") + "/"
            if not cwd.startswith(inside):
                with open(f"{entry.path}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().decode(errors="replace").split("\0")
                if not any(arg == folder or arg.startswith(inside) for arg in argv):
                    continue
            if os.readlink(f"{entry.path}/exe").removesuffix(" (deleted)") not in executables:
                continue
            with open(f"{entry.path}/stat") as stat:
                session = int(stat.read().rsplit(")", 1)[1].split()[3])
            if session == int(entry.name) or session in leaders:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):   # gone meanwhile, or not ours to look at
            continue
    return found


class LocalProcess:
    """Runs one argv with its output appended to a log file."""

    backend = "local"

    def __init__(self, argv: list[str], log_path: str, cwd: str, env: dict | None = None,
                 pid: int | None = None, start_time: str | None = None,
                 on_start: Callable[[], None] | None = None):
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.env = env or {}
        self.pid = pid
        self.start_time = start_time
        self._popen: subprocess.Popen | None = None
        self.on_start = on_start   # called after every start: the lab records the pid

    @property
    def executable(self) -> str:
        """The real path of the program it runs (what /proc/PID/exe shows), for the reaper."""
        program = self.argv[0] if os.sep in self.argv[0] else (shutil.which(self.argv[0]) or self.argv[0])
        return os.path.realpath(program)

    def start(self) -> None:
        env = dict(os.environ, **self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- labkit start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, cwd=self.cwd, env=env,
                                               start_new_session=True)
            except OSError as exc:
                raise OSError(f"could not run {self.argv[0]}: {exc}") from exc
        self.pid = self._popen.pid
        self.start_time = process_start_time(self.pid)
        if self.on_start is not None:
            self.on_start()

    def _ours(self) -> bool:
        return self.pid is not None and process_start_time(self.pid) == self.start_time

    def state(self) -> str:
        if self._popen is not None and self._popen.poll() is not None:
            return "stopped"
        if not self._ours():
            return "stopped"
        return process_state(self.pid)

    def memory_bytes(self) -> int | None:
        return process_rss_bytes(self.pid) if self.state() != "stopped" else None

    def exit_code(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def signal(self, signum: int) -> None:
        if self.state() != "stopped":
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self._reap(5.0)

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM (after SIGCONT, since a stopped process cannot act on it), then SIGKILL."""
        if self.state() == "stopped":
            self._reap(0.1)
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if not self._reap(grace):
            self.kill()

    def pause(self) -> None:
        """SIGSTOP, then wait until the kernel reports the process stopped."""
        self.signal(signal.SIGSTOP)
        if self.pid is not None:
            wait_for_process_state(self.pid, lambda state: state != "running")

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        if self.pid is not None:
            wait_for_process_state(self.pid, lambda state: state != "paused")

    def _reap(self, timeout: float) -> bool:
        """Wait until the process is gone; True if it went within the timeout."""
        def gone() -> bool:
            if self._popen is None:
                return self.state() == "stopped"
            try:
                self._popen.wait(timeout=0.05)   # reaps our own child, so it is no zombie
            except subprocess.TimeoutExpired:
                return False
            return True
        return became_true(gone, timeout, poll=0.02)

    def to_state(self) -> dict:
        return {"backend": "local", "argv": self.argv, "log_path": self.log_path, "cwd": self.cwd,
                "env": self.env, "pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_state(cls, data: dict, on_start: Callable[[], None] | None = None) -> "LocalProcess":
        return cls(data["argv"], data["log_path"], data["cwd"], data.get("env"),
                   data.get("pid"), data.get("start_time"), on_start)
