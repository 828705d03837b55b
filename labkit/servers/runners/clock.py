"""A server's clocks, changed while it runs: ``node.clock.step(+30)`` steps its wall clock,
``node.clock.monotonic_rate(1.5)`` makes its monotonic clock run 50 % fast.

What can go wrong first. A node started without ``labkit.up(..., clocks=True)`` has no
steppable clock, and etcd never has one: etcd is a Go program, and Go reads the clock
through the kernel's vDSO, not through libc, so no preloaded library can shift it; only
root, changing the machine's own clock, could, and the lab never touches that. Both raise
ClockUnavailable, saying why. So does a machine without Linux or without a C compiler.

How it works, for real: every node that can be stepped runs with ``LD_PRELOAD`` of
labkit's small shim (``clock_shim.c``, built here with ``cc`` on first use). The shim
shifts what the server reads from the wall clocks (CLOCK_REALTIME: ``gettimeofday``,
``clock_gettime``, ``time``) by the values in a 64-byte file in the lab's run folder, read
on every call. Rewriting that file steps the clock of the running server at once, as an
operator's ``date -s`` or an NTP step would. A step leaves the monotonic clock alone: a
server's timeouts measured on it (ZooKeeper sessions) do not move, its wall-clock deadlines
(Redis key expiry) do. But a monotonic clock is immune to steps, not to drift: the same
file carries a rate for CLOCK_MONOTONIC (``monotonic_rate``), which the shim applies to the
clock and to the deadlines of the server's timed waits, so a ZooKeeper server with a rate
of 1.5 expires a session after two thirds of its timeout, in real time. The monotonic clock never jumps:
a new rate, and ``reset()``, keep the lead it has gained. A restarted node keeps its
shifted clocks: the file stays.
"""
from __future__ import annotations

import fcntl
import hashlib
import math
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from labkit.errors import ClockUnavailable, InvalidClockChange
from labkit.servers.run_folder import labkit_home
from labkit.timing import became_true

SHIM_SOURCE = Path(__file__).with_name("clock_shim.c")
CLOCK_FILE_ENV = "LABKIT_CLOCK_FILE"
# magic, sequence (odd while rewriting), anchor_real ns, anchor_fake ns, rate: the wall
# clock's part of the shim's `struct clock_file`
LAYOUT = struct.Struct("<IIqqd")
# then the monotonic clock's anchor_real ns, anchor_fake ns (CLOCK_MONOTONIC) and rate; a
# rate of 0 (all zero, as in a file written before these fields existed) leaves it untouched
MONOTONIC_LAYOUT = struct.Struct("<qqd")
MONOTONIC_OFFSET = LAYOUT.size
MAGIC = 0x4C434B4C
FILE_SIZE = 64
assert MONOTONIC_OFFSET + MONOTONIC_LAYOUT.size <= FILE_SIZE
ENABLE_HINT = "start the lab with labkit.up(..., clocks=True) (CLI: labkit up --clocks)"


def find_compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build_shim() -> Path:
    """The compiled shim, built once per version of its source into the labkit state folder."""
    if not sys.platform.startswith("linux"):
        raise ClockUnavailable(f"stepping a server's clock needs Linux (LD_PRELOAD); this is {sys.platform}",
                               "run the lab on a Linux machine (WSL works on Windows); clocks=False needs nothing")
    source = SHIM_SOURCE.read_bytes()
    built = labkit_home() / "build" / f"clock_shim-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if built.exists():
        return built
    compiler = find_compiler()
    if not compiler:
        raise ClockUnavailable("building labkit's clock shim needs a C compiler, and none was found (cc, gcc, clang)",
                               "Debian/Ubuntu: sudo apt-get install gcc libc6-dev (./lab.sh setup does it)")
    built.parent.mkdir(parents=True, exist_ok=True)
    partial = built.with_name(f"{built.name}.{os.getpid()}.tmp")  # two builders never share a file
    result = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SHIM_SOURCE), "-ldl"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ClockUnavailable(f"{compiler} could not build labkit's clock shim:\n{result.stderr.strip()[-1500:]}",
                               "Debian/Ubuntu: sudo apt-get install gcc libc6-dev (the C library's headers)")
    os.replace(partial, built)
    return built


def prepare_clock(run_dir: Path, node_name: str) -> dict:
    """Put the shim and an unshifted clock file for a node in the lab's run folder (which
    the Docker backend mounts at the same path); returns the environment the node needs."""
    shim = run_dir / "clock_shim.so"
    if not shim.exists():
        shutil.copyfile(build_shim(), shim)
    clock_file = run_dir / f"{node_name}.clock"
    clock_file.write_bytes(LAYOUT.pack(MAGIC, 0, 0, 0, 1.0).ljust(FILE_SIZE, b"\0"))
    return {"LD_PRELOAD": str(shim), CLOCK_FILE_ENV: str(clock_file)}


class ClockHost:
    """What a Clock reads from its owner, for a process that is not a lab's node: a lock
    client process started under the shim (``spawn_clients(..., clocks=True)``).
    ``environment`` is what ``prepare_clock`` returned for it."""

    clock_problem = None

    def __init__(self, name: str, environment: dict):
        self.name = name
        self.runner = SimpleNamespace(env=environment)


class Clock:
    """The clocks one node's server reads. ``node.clock`` makes one.

    The wall clock: ``step(seconds)`` jumps it (forward or back), ``rate(r)`` makes it run
    r times as fast as real time from now on. The monotonic clock: ``monotonic_rate(r)``
    makes it run r times as fast (never a jump). ``reset()`` puts the wall clock back on the
    machine's and the monotonic clock back to the machine's rate (the lead it gained stays:
    a monotonic clock cannot go back). Give ``history=`` to record the change as a fault on a
    History's timeline.
    """

    def __init__(self, node):
        self.node = node

    # -- reading ------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.node.clock_problem is None and bool(self._path())

    @property
    def offset(self) -> float:
        """Seconds the server's wall clock is ahead of the machine's now (negative: behind)."""
        real = time.time_ns()
        return (self._fake(real, *self._read()[1:]) - real) / 1e9

    def now(self) -> float:
        """The server's wall-clock time now, in seconds since the epoch (like time.time())."""
        return self._fake(time.time_ns(), *self._read()[1:]) / 1e9

    @property
    def monotonic_offset(self) -> float:
        """Seconds the server's monotonic clock has gained on the machine's (negative: lost)."""
        real = time.monotonic_ns()
        return (self._fake_monotonic(real, *self._read_monotonic()) - real) / 1e9

    def monotonic_now(self) -> float:
        """The server's monotonic clock now, in seconds (on the scale of time.monotonic())."""
        return self._fake_monotonic(time.monotonic_ns(), *self._read_monotonic()) / 1e9

    def status(self) -> dict:
        _, _, _, rate = self._read()
        _, _, monotonic_rate = self._read_monotonic()
        return {"node": self.node.name, "offset": round(self.offset, 6), "rate": rate,
                "monotonic_rate": monotonic_rate or 1.0, "monotonic_offset": round(self.monotonic_offset, 6)}

    def __repr__(self) -> str:
        if not self.enabled:
            return f"<Clock {self.node.name}: not steppable>"
        status = self.status()
        monotonic = ""
        if status["monotonic_rate"] != 1.0 or status["monotonic_offset"]:
            monotonic = f"; monotonic {status['monotonic_offset']:+.3f} s, rate {status['monotonic_rate']:g}"
        return f"<Clock {self.node.name} {status['offset']:+.3f} s, rate {status['rate']:g}{monotonic}>"

    # -- changing -----------------------------------------------------------------
    def step(self, seconds: float, history=None) -> None:
        """Jump the server's wall clock by ``seconds`` (negative: back), at once."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise InvalidClockChange(f"a clock step is a finite number of seconds, not {seconds!r}",
                                   "e.g. node.clock.step(30) or node.clock.step(-30)")
        self._change(lambda real, fake, rate: (real, fake + round(seconds * 1e9), rate))
        if history is not None:
            history.record_fault("clock_step", self.node.name, seconds=seconds)

    def rate(self, rate: float, history=None) -> None:
        """From now on, the server's wall clock advances ``rate`` seconds per real second."""
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise InvalidClockChange(f"a clock rate is a positive number of seconds per second, not {rate!r}",
                                   "e.g. node.clock.rate(1.5) (fast), 0.5 (slow), 1 (normal again)")
        self._change(lambda real, fake, _: (real, fake, float(rate)))
        if history is not None:
            history.record_fault("clock_rate", self.node.name, rate=rate)

    def monotonic_rate(self, rate: float, history=None) -> None:
        """From now on, the server's monotonic clock (CLOCK_MONOTONIC: Java's System.nanoTime,
        Python's time.monotonic) advances ``rate`` seconds per real second, and its timed waits
        end by that clock: 1.25 is an oscillator 25 % fast. It goes on from where it is now:
        a monotonic clock never jumps."""
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise InvalidClockChange(f"a clock rate is a positive number of seconds per second, not {rate!r}",
                                   "e.g. node.clock.monotonic_rate(1.25) (25 % fast), 0.8 (slow), 1 (normal again)")
        self._change(monotonic=lambda real, fake, _: (real, fake, float(rate)))
        if history is not None:
            history.record_fault("clock_monotonic_rate", self.node.name, rate=rate)

    def reset(self, history=None) -> None:
        """Back to the machine's own clock: the wall clock without offset at the normal rate,
        the monotonic clock at the normal rate (keeping the lead it gained: it cannot go back)."""
        self._change(lambda real, fake, rate: (0, 0, 1.0),
                     lambda real, fake, rate: (real, fake, 1.0) if rate else (0, 0, 0.0))
        if history is not None:
            history.record_fault("clock_reset", self.node.name)

    # -- the shared file ------------------------------------------------------------
    def _path(self) -> str | None:
        return getattr(self.node.runner, "env", {}).get(CLOCK_FILE_ENV)

    def _check(self) -> str:
        problem = self.node.clock_problem
        if problem:
            raise ClockUnavailable(f"{self.node.name}'s clock cannot be stepped: {problem}",
                                   "step a Redis or ZooKeeper node instead (docs/CLOCKS.md); etcd's "
                                   "lease timers are monotonic readings, which a wall-clock step would not move")
        path = self._path()
        if not path:
            raise ClockUnavailable(f"node {self.node.name} was started without a steppable clock", ENABLE_HINT)
        if not os.path.exists(path):
            raise ClockUnavailable(f"the clock file of {self.node.name} is gone ({path}): the lab was stopped",
                                   "start a new lab")
        return path

    @staticmethod
    def _fake(real: int, anchor_real: int, anchor_fake: int, rate: float) -> int:
        """The shim's formula (see clock_shim.c), on the same integers."""
        if rate == 1.0:
            return real + (anchor_fake - anchor_real)
        return anchor_fake + int((real - anchor_real) * rate)

    @classmethod
    def _fake_monotonic(cls, real: int, anchor_real: int, anchor_fake: int, rate: float) -> int:
        """The same formula for the monotonic clock; a rate of 0 means untouched."""
        return cls._fake(real, anchor_real, anchor_fake, rate) if rate else real

    def _read_file(self) -> bytes:
        path = self._check()
        data = [b""]

        def settled() -> bool:  # odd: another process is halfway through a change
            with open(path, "rb") as file:
                data[0] = file.read(FILE_SIZE).ljust(FILE_SIZE, b"\0")
            return LAYOUT.unpack_from(data[0])[1] % 2 == 0

        became_true(settled, 1.0, poll=0.001)  # a writer killed halfway leaves it odd: after 1 s, take it
        return data[0]

    def _read(self) -> tuple[int, int, int, float]:
        """The wall clock's (sequence, anchor_real, anchor_fake, rate)."""
        return LAYOUT.unpack_from(self._read_file())[1:]

    def _read_monotonic(self) -> tuple[int, int, float]:
        """The monotonic clock's (anchor_real, anchor_fake, rate); rate 0: untouched."""
        return MONOTONIC_LAYOUT.unpack_from(self._read_file(), MONOTONIC_OFFSET)

    def _change(self, wall=None, monotonic=None) -> None:
        """Re-anchor a clock at the real now: wall(real, fake now, rate) gives its new
        (anchor_real, anchor_fake, rate) in epoch ns, monotonic(...) the same on
        CLOCK_MONOTONIC. A seqlock: the shim retries a read that overlaps."""
        fd = os.open(self._check(), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two notebooks stepping one node take turns
            data = os.pread(fd, FILE_SIZE, 0).ljust(FILE_SIZE, b"\0")
            _, sequence, anchor_real, anchor_fake, rate = LAYOUT.unpack_from(data)
            writing = (sequence + 1) & 0xFFFFFFFF | 1  # odd, even after a writer killed halfway
            os.pwrite(fd, struct.pack("<I", writing), 4)
            if wall is not None:
                real = time.time_ns()
                fields = wall(real, self._fake(real, anchor_real, anchor_fake, rate), rate)
                os.pwrite(fd, struct.pack("<qqd", *fields), 8)
            if monotonic is not None:
                anchors = MONOTONIC_LAYOUT.unpack_from(data, MONOTONIC_OFFSET)
                real = time.monotonic_ns()
                fields = monotonic(real, self._fake_monotonic(real, *anchors), anchors[2])
                os.pwrite(fd, MONOTONIC_LAYOUT.pack(*fields), MONOTONIC_OFFSET)
            os.pwrite(fd, struct.pack("<I", (writing + 1) & 0xFFFFFFFF), 4)
        finally:
            os.close(fd)
