"""What a killed PostgreSQL leaves behind, and how the lab removes it.

A postmaster stopped by SIGKILL (``labkit down``, the reaper of a lab whose owner died)
cannot clean up after itself. Two things outlive it: the small System V shared memory
segment it uses to tell whether another postmaster runs on its data folder (its id is on
line 7 of ``postmaster.pid``), and, when the lab's owner is root, the data folder itself,
which then lives outside the run folder (labkit/servers/services/postgres.py says why). Its main
shared memory is anonymous and its dynamic shared memory a file in the data folder: both
go with the processes and the folder.

This module imports nothing of labkit, so that the reaper (``labkit.servers.state``) can
call it without importing the server's module.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import shutil
from pathlib import Path

IPC_RMID = 0
OUTSIDE_MARK = "labkit-postgres-"   # the prefix of a data folder's parent outside the run folder


def shared_memory_id(data_dir: str | Path) -> int | None:
    """The System V segment named in the data folder's postmaster.pid, if any."""
    try:
        lines = (Path(data_dir) / "postmaster.pid").read_text().splitlines()
        return int(lines[6].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def segment_is_the_postmasters(data_dir: str | Path, segment: int) -> bool:
    """True only if the kernel's table (Linux: /proc/sysvipc/shm) has ``segment`` with the key
    postmaster.pid names, made by the pid it names. A stale postmaster.pid (after a reboot)
    may name an id that now belongs to another program: that segment is never touched."""
    try:
        lines = (Path(data_dir) / "postmaster.pid").read_text().splitlines()
        postmaster, key = int(lines[0]), int(lines[6].split()[0])
        table = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except (OSError, IndexError, ValueError):
        return False
    for row in table:
        fields = row.split()
        if len(fields) > 4 and fields[1] == str(segment):
            return int(fields[0]) == key and int(fields[4]) == postmaster
    return False


def release_shared_memory(data_dir: str | Path) -> bool:
    """Remove the postmaster's System V segment (the kernel frees it once no process has
    it attached: backends still exiting keep theirs until they go). True if removed. Only a
    segment proven to be this postmaster's (``segment_is_the_postmasters``); elsewhere than
    Linux nothing is removed (a leftover of 56 bytes, which the next start on that folder
    would remove)."""
    segment = shared_memory_id(data_dir)
    if segment is None or not segment_is_the_postmasters(data_dir, segment):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.shmctl(ctypes.c_int(segment), ctypes.c_int(IPC_RMID), None) == 0
    except (OSError, AttributeError):
        return False


def forget_postgres(data_dir: str | Path) -> None:
    """Release what a stopped postmaster left: its segment, and its data folder when it
    lives outside the run folder (a root-owned lab). Safe to call twice."""
    release_shared_memory(data_dir)
    parent = Path(data_dir).parent
    if parent.name.startswith(OUTSIDE_MARK):
        shutil.rmtree(parent, ignore_errors=True)
