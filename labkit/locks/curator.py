"""A real Apache Curator ``InterProcessMutex`` (or ``InterProcessSemaphoreV2``, with
``max_leases``) as a peer process, driven from Python.

``CuratorPeer(hosts, path)`` compiles ``labkit/locks/java/CuratorPeer.java`` once against Debian's
Curator jars (cached in ``~/.cache/labkit/java``, rebuilt when the source changes), starts it
with its own ZooKeeper session and sends it ``acquire`` / ``release`` lines. It follows the
recipe contract (docs/RECIPES.md) so tests and notebooks can queue it with ZooKeeperLock.
For the benchmark it can also run N contenders of one lock as threads inside its JVM
(``queue_crowd``, ``hand_over``, ``disband``: ``labkit/locks/java/CuratorHandoff.java``) and time
each hand-off there.

What can fail: ``CuratorUnavailable`` when java, javac or a jar is missing (the message says
what to install); ``CuratorPeerError`` when the Java process dies, reports an error or does
not answer in time; ``LockTimeout`` when ``acquire(timeout)`` gives up. ``require_curator``
decides, for a lesson or a test, whether a missing Curator skips it or fails it.
"""
from __future__ import annotations

import hashlib
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from labkit.record.events import EventSink, ignore_events
from labkit.locks.errors import (GONE_HINT, CuratorLockGone, CuratorPeerError, CuratorUnavailable,  # noqa: F401
                                 LockError, LockTimeout, check_semaphore_size)
from labkit.locks.zookeeper import sequence_of
from labkit.servers.secret import LabSecret, login_for, zookeeper_client_jaas

JAR_DIRECTORY = Path("/usr/share/java")
# The classes CuratorPeer loads: Curator, the ZooKeeper client, Guava (Curator uses it), and
# SLF4J with its no-op binding to keep the peer's stdout to protocol lines.
JARS = ("curator-client", "curator-framework", "curator-recipes", "zookeeper", "zookeeper-jute",
        "guava", "slf4j-api", "slf4j-nop")
INSTALL_HINT = "apt-get install -y default-jdk-headless libcurator-recipes-java (it brings Guava, SLF4J, ZooKeeper)"
STARTUP_DEADLINE = 60.0   # a JVM start on two busy cores can take several seconds
ANSWER_MARGIN = 30.0      # beyond an acquire's own timeout, for the JVM to answer
JAVA_SOURCES = ("CuratorPeer.java", "CuratorHandoff.java")


@dataclass(frozen=True)
class StateChange:
    """A connection state Curator reported: ``state`` is SUSPENDED, RECONNECTED or LOST;
    ``at`` is ``time.monotonic()`` seconds when Curator called its listener (the JVM's
    System.nanoTime is the same clock on Linux), or when the line reached Python if the
    two clocks were found to differ."""

    state: str
    at: float


@dataclass(frozen=True)
class CuratorHandOff:
    """One hand-off inside the JVM (``CuratorPeer.hand_over``): contender ``giver`` was told to
    release at ``asked``; its release() ran from ``release_start`` to ``release_return``; the
    watch on its node fired in the next holder's client at ``woke`` (None if not seen); the
    next holder ``taker``'s acquire() returned at ``acquired``. Times are the JVM's
    System.nanoTime in seconds. ``overlaps``: moments so far with two holders (0 if correct)."""

    giver: int
    taker: int
    asked: float
    release_start: float
    release_return: float
    woke: float | None
    acquired: float
    overlaps: int


EXPECT_ENV = "LABKIT_EXPECT_CURATOR"   # 1: this run must have Curator (scripts/ci, the lab image)


def curator_expected() -> bool:
    """Does this run say Curator must be here? LABKIT_EXPECT_CURATOR=1 (set by scripts/ci/test.sh
    and the lab image) or, unset, CI=true; LABKIT_EXPECT_CURATOR=0 says no, even on CI."""
    said = os.environ.get(EXPECT_ENV, "").strip().lower()
    if said:
        return said not in ("0", "no", "false")
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_curator(what: str) -> str | None:
    """None when Curator's peer can run here (java, javac and the jars; compiles the peer once).
    Otherwise, where Curator is expected (``curator_expected``), raise CuratorUnavailable with
    what is missing and how to install it; elsewhere return a sentence saying that ``what`` is
    skipped and why, for the caller to print (or pass to pytest.skip)."""
    try:
        if shutil.which("java") is None:
            raise CuratorUnavailable("java is not on PATH", hint=INSTALL_HINT)
        compiled_peer_directory()
    except CuratorUnavailable as error:
        if curator_expected():
            raise CuratorUnavailable(f"Curator is expected in this run ({EXPECT_ENV}=1 or CI=true) but cannot run, "
                                     f"so {what} cannot: {error.message}", hint=error.hint) from None
        return f"Curator cannot run on this machine, so {what} is skipped: {error.message} (to run it: {error.hint})"
    return None


def class_path() -> str:
    """The jars CuratorPeer needs, joined for ``-cp``. Raises CuratorUnavailable."""
    missing = [name for name in JARS if not (JAR_DIRECTORY / f"{name}.jar").exists()]
    if missing:
        raise CuratorUnavailable(f"missing jars in {JAR_DIRECTORY}: {', '.join(missing)}", hint=INSTALL_HINT)
    return os.pathsep.join(str(JAR_DIRECTORY / f"{name}.jar") for name in JARS)


def curator_version() -> str | None:
    """The version of Curator's recipes jar (its Maven pom.properties), or None if it is not
    installed or does not say."""
    try:
        with zipfile.ZipFile(JAR_DIRECTORY / "curator-recipes.jar") as jar:
            names = [name for name in jar.namelist() if name.endswith("curator-recipes/pom.properties")]
            text = jar.read(names[0]).decode() if names else ""
    except (OSError, zipfile.BadZipFile):
        return None
    found = re.search(r"^version=(\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def compiled_peer_directory() -> Path:
    """A directory holding CuratorPeer.class (and CuratorHandoff.class, its hand-off mode),
    compiled on first use. Raises CuratorUnavailable."""
    javac = shutil.which("javac")
    if javac is None:
        raise CuratorUnavailable("javac (the Java compiler) is not on PATH", hint=INSTALL_HINT)
    sources = {name: resources.files("labkit.locks").joinpath(f"java/{name}").read_bytes() for name in JAVA_SOURCES}
    jars = class_path()
    digest = hashlib.sha256(b"".join(sources.values()) + jars.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "labkit" / "java"
    target = cache / digest
    if all((target / name.replace(".java", ".class")).exists() for name in JAVA_SOURCES):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    # Compile into a private directory and rename it into place, so that two processes
    # compiling at once never see half-written classes.
    building = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    for name, source in sources.items():
        (building / name).write_bytes(source)
    result = subprocess.run([javac, "-d", str(building), "-cp", jars, *(str(building / name) for name in JAVA_SOURCES)],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise CuratorUnavailable(f"javac could not compile {' and '.join(JAVA_SOURCES)}:\n{result.stderr.strip()}",
                                 hint=f"check the Curator version in {JAR_DIRECTORY} (5.x expected)")
    try:
        building.rename(target)
    except OSError:                               # someone else finished first: theirs is the same
        shutil.rmtree(building, ignore_errors=True)
    return target


def _jaas_file(auth: dict) -> str | None:
    """A JAAS "Client" file (0600, from mkstemp) with the login in kazoo's ``sasl_options``."""
    sasl = auth.get("sasl_options")
    if not sasl:
        return None
    descriptor, path = tempfile.mkstemp(prefix="labkit-curator-", suffix=".jaas")
    with os.fdopen(descriptor, "w") as file:
        file.write(zookeeper_client_jaas(LabSecret(sasl["username"], sasl["password"])))
    return path


class CuratorPeer:
    """Curator's InterProcessMutex on ``path``, in its own JVM with its own session.

    ``token`` is the czxid of Curator's node, as for ZooKeeperLock, so that both can fence
    one store; ``sequence`` is its place in the queue (``_c_<uuid>-lock-<seq>``).
    ``states`` lists every connection state Curator reported, with its time (StateChange);
    ``negotiated_timeout`` is the session timeout the server granted, in seconds.
    Always ``close()`` it (or use ``with``): that ends the JVM and its session.
    """

    def __init__(self, hosts: str, path: str, session_timeout: float = 4.0,
                 identifier: str = "curator", on_event: EventSink = ignore_events, auth: dict | None = None,
                 connection_timeout: float = 15.0, max_leases: int | None = None):
        """auth: ``lab.zookeeper.auth`` for a private lab (None finds this user's lab at
        ``hosts``). The JVM logs in with SASL DIGEST-MD5 from a JAAS file of its own (0600),
        as any ZooKeeper Java client does: CuratorPeer.java needs no change for it.
        connection_timeout: Curator's connection timeout (how long an operation waits for a
        connection), in seconds. max_leases: hold leases of Curator's InterProcessSemaphoreV2 on
        ``path`` (up to that many holders at once) instead of the mutex; ``token`` is then the
        lease node's czxid. Raises InvalidSemaphoreSize for a max_leases below 1."""
        if max_leases is not None:
            check_semaphore_size(max_leases, path)
        self.max_leases = max_leases
        java = shutil.which("java")
        if java is None:
            raise CuratorUnavailable("java is not on PATH", hint=INSTALL_HINT)
        classes = compiled_peer_directory()
        self.path = path.rstrip("/")
        self.identifier = identifier
        self.node: str | None = None
        self.token: int | None = None
        self.sequence: int | None = None
        self.is_suspended = False
        self._states: list[tuple[str, float, float]] = []   # (state, JVM stamp, arrival), reader thread
        self.stamps_from_jvm = False              # decided at READY: the JVM stamps are on our clock
        self._held = False
        # JVM stamps of the last acquire()'s return, release()'s start and return: hand-offs between JVMs
        self.acquired_at: float | None = None
        self.released_at: tuple[float, float] | None = None
        self._crowd = False                       # a hand-off crowd is queued in the JVM
        self._emit = on_event
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._errors = tempfile.TemporaryFile(mode="w+")   # a file, not a pipe: it can never fill up
        started = time.monotonic()
        self._login_file = _jaas_file(login_for(hosts, "zookeeper") if auth is None else auth)
        login = [f"-Djava.security.auth.login.config={self._login_file}"] if self._login_file else []
        self._process = subprocess.Popen(
            [java, "-Xmx64m", "-XX:+UseSerialGC", *login, "-cp", f"{class_path()}{os.pathsep}{classes}",
             "CuratorPeer", hosts, self.path, str(int(session_timeout * 1000)), identifier,
             str(int(connection_timeout * 1000)), str(max_leases or 0)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read_lines, name=f"curator-peer-{identifier}", daemon=True)
        self._reader.start()
        try:
            ready = self._answer(STARTUP_DEADLINE, "start")
            if not ready.startswith("READY "):
                raise CuratorPeerError(f"the Curator peer did not start: {ready}",
                                       hint=f"is ZooKeeper answering at {hosts}?")
        except BaseException:
            self.close()
            raise
        _, session, negotiated, stamp = ready.split()
        self.session_id = int(session, 16)
        self.negotiated_timeout = int(negotiated) / 1000.0
        # The JVM printed System.nanoTime() after the process started and before its line was
        # read: on the same clock as time.monotonic() it lies between the two.
        self.stamps_from_jvm = started <= int(stamp) / 1e9 <= time.monotonic()

    @property
    def is_held(self) -> bool:
        return self._held

    @property
    def states(self) -> list[StateChange]:
        """Every connection state Curator reported so far, oldest first."""
        return [StateChange(state, stamp if self.stamps_from_jvm else arrived)
                for state, stamp, arrived in list(self._states)]

    def _read_lines(self) -> None:
        # Connection states arrive whenever they happen; everything else answers a command.
        for line in self._process.stdout:
            line = line.strip()
            if line.startswith("STATE "):
                _, state, stamp = line.split()
                self._states.append((state, int(stamp) / 1e9, time.monotonic()))
            if line.startswith("STATE SUSPENDED"):
                self.is_suspended = True
                self._emit("suspended", path=self.path)
            elif line.startswith("STATE RECONNECTED"):
                self.is_suspended = False
                self._emit("reconnected", path=self.path)
            elif line.startswith("STATE LOST"):
                if self._held:
                    self._held, token, self.token = False, self.token, None
                    self._emit("lost", reason="Curator reported its session LOST", token=token)
            elif line:
                self._answers.put(line)
        self._answers.put(None)                   # the process closed its output: it is gone

    def _answer(self, timeout: float, command: str) -> str:
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise CuratorPeerError(f"the Curator peer did not answer {command!r} within {timeout:.0f} s",
                                   hint="the JVM may be overloaded; close() it and try again") from None
        if line is None:
            raise CuratorPeerError(f"the Curator peer exited during {command!r}: {self._error_tail()}")
        if line.startswith("ERROR "):
            raise CuratorPeerError(f"the Curator peer failed on {command!r}: {line[6:]}")
        return line

    def _error_tail(self) -> str:
        try:
            code = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._errors.seek(0)
        return f"exit code {code}; stderr: {self._errors.read()[-2000:].strip() or '(empty)'}"

    def _send(self, command: str, timeout: float) -> str:
        if self._process.poll() is not None:
            raise CuratorPeerError(f"the Curator peer has exited: {self._error_tail()}",
                                   hint="start a new CuratorPeer")
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._answer(timeout, command)

    def acquire(self, timeout: float | None = None) -> int:
        """Block until Curator holds the lock; return its node's czxid. Raises LockTimeout."""
        if self._held:
            # InterProcessMutex is re-entrant: a second acquire would need a second release
            raise LockError(f"this Curator peer already holds {self.path!r}; release() it first")
        seconds = 365 * 24 * 3600.0 if timeout is None else timeout
        self._emit("requested", path=self.path)
        answer = self._send(f"acquire {seconds}", seconds + ANSWER_MARGIN)
        if answer == "TIMEOUT":
            self._emit("timeout", waited=seconds)
            raise LockTimeout(self.path, seconds)
        if answer.startswith("GONE "):   # the session expired between the grant and the czxid's read
            raise CuratorLockGone(f"Curator acquired {answer[5:]}, gone by the time its czxid was read", GONE_HINT)
        _, self.node, czxid, *stamp = answer.split(" ")   # a semaphore's answer has no stamp
        self.acquired_at = int(stamp[0]) / 1e9 if stamp else None
        self.token, self.sequence = int(czxid), sequence_of(self.node) or int(self.node[-10:])
        self._held = True
        self._emit("acquired", token=self.token, node=self.node)
        return self.token

    def release(self) -> None:
        """Release Curator's hold (idempotent)."""
        if not self._held:
            return
        began, returned, *_ = self._send("release", ANSWER_MARGIN).split()[1:] + ["", ""]   # a semaphore's: none
        self.released_at = (int(began) / 1e9, int(returned) / 1e9) if returned else None
        self._held, token, self.token, self.node, self.sequence = False, self.token, None, None, None
        self._emit("released", token=token)

    def cycle(self) -> float:
        """Acquire and release once inside the JVM, no events, no czxid read; return the
        seconds it took there (System.nanoTime). For the benchmark: the time this call takes
        in Python adds two pipe crossings (``ping`` measures one round of them)."""
        if self._held:
            raise LockError(f"this Curator peer holds {self.path!r}; release() it before timing a cycle")
        _, nanoseconds = self._send("cycle", ANSWER_MARGIN).split()
        return int(nanoseconds) / 1e9

    def ping(self) -> None:
        """One line to the JVM and its answer back: what a command costs besides its work."""
        self._send("ping", ANSWER_MARGIN)

    def queue_crowd(self, n: int, shared: bool = False, timeout: float = 120.0) -> None:
        """Start ``n`` contenders of one InterProcessMutex (on this peer's path + "-handoff")
        inside the JVM: ``contender-0`` holds, the others queue. ``shared``: one Curator client
        (one session) for all of them, as a Java program usually has; else a client each, as
        labkit's contenders have. Returns once all ``n`` nodes exist. Raises CuratorPeerError."""
        if n < 2:
            raise LockError(f"a hand-off needs at least 2 contenders, got {n}")
        self._crowd = True
        self._send(f"crowd {n} {'shared' if shared else 'own'} {timeout}", timeout + ANSWER_MARGIN)

    def hand_over(self, timeout: float = 60.0) -> CuratorHandOff:
        """Once every waiter still waiting is queued, tell the holder to release, and wait for
        the next holder's acquire() to return. Raises CuratorPeerError (no crowd, or nobody
        took the lock within ``timeout``)."""
        words = self._send(f"handoff {timeout}", timeout + ANSWER_MARGIN).split()[1:]
        giver, taker, *stamps, overlaps = (int(word) for word in words)
        asked, start, end, woke, acquired = (stamp / 1e9 for stamp in stamps)
        return CuratorHandOff(giver, taker, asked, start, end, None if woke < 0 else woke, acquired, overlaps)

    def disband(self, timeout: float = 60.0) -> None:
        """Stop the crowd's threads and close its clients (``close()`` does it too): 200
        sessions closed side by side took 13 s on two loaded cores."""
        self._crowd = False
        self._send("disband", timeout)

    def close(self) -> None:
        """Quit the JVM (its session ends, so its node goes) and wait for it; kill if it hangs."""
        if self._crowd and self._process.poll() is None:
            try:
                self.disband()            # before quit: closing a crowd's sessions can outlast quit's wait
            except CuratorPeerError:
                pass                      # a dead or stuck JVM: quit, then kill, below
        if self._process.poll() is None:
            try:
                self._process.stdin.write("quit\n")
                self._process.stdin.flush()
                self._process.wait(timeout=15)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait(timeout=15)
        self._reader.join(timeout=15)            # the exit closed its stdout: the reader ends
        for stream in (self._process.stdin, self._process.stdout, self._errors):
            stream.close()
        if self._login_file:
            os.unlink(self._login_file)
            self._login_file = None
        self._held = False

    def __enter__(self) -> "CuratorPeer":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
