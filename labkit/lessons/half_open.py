"""C30 on a true half-open connection: an advisory lock whose client vanished, packets dropped
both ways and no FIN or RST, is held until a timer of the server's own ends the session.

``half_open_holds()`` runs labkit/lessons/half_open_inside.py in a private user + network
namespace (labkit/faults/namespace.py: no root needed) with a PostgreSQL of its own, copied
from the lab's template (the same programs and initdb as ``labkit.up(postgres=True)``;
its pg_hba trusts 127.0.0.1, which only processes inside that namespace can reach). One
holder per setting of ``HALF_OPEN_SETTINGS`` takes a lock, says its last word and is cut off; an
observer on another client port sees when each lock goes. Each hold is compared with
``expected_hold``, the bound the setting itself gives (Linux and PostgreSQL's rules):

- TCP keepalive (``tcp_keepalives_idle/interval/count``): on a quiet connection the first probe
  goes out ``idle`` s after the last packet received, then one every ``interval`` s; after
  ``count`` unanswered the kernel ends it: idle + interval x count.
- ``tcp_user_timeout``: the longest a sent byte may stay unacknowledged. With data in flight
  (an answer the client never acknowledges) the connection ends that long after the data's
  first retransmission (Linux counts from there: about 0.4 s after the data left, on loopback).
  On a quiet connection it acts only through keepalive: at each probe the kernel ends the
  connection once the silence has lasted the user timeout (and at least one probe went
  unanswered), so the first probe at or after it ends it, whatever ``count`` says. Alone on a
  quiet connection it waits for the kernel's default keepalive (hours).
- ``idle_session_timeout`` (PostgreSQL 14+): the server ends a session idle (outside a
  transaction) that long, whatever the link does: a live client that stays quiet loses its lock too.
- ``client_connection_check_interval`` (14+): during a statement the server polls the socket
  and ends the session if the kernel reports it closed; a half-open socket never is.
- Nothing set: PostgreSQL turns keepalive on with the kernel's defaults, read in the namespace
  (net.ipv4.tcp_keepalive_time/intvl/probes; a new namespace starts from the kernel's own).

What can fail: LabError when this machine refuses user namespaces or lacks ``ip``/``tc``
(namespace.check_namespaces says what to change), when PostgreSQL is older than 14, or when a
step inside fails (its message); ServerNotFound without PostgreSQL's programs.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from labkit.errors import LabError
from labkit.faults import namespace
from labkit.record.plots import new_axes
from labkit.progress import shows_progress
from labkit.servers.run_folder import labkit_home
from labkit.servers.runners import discovery, versions
from labkit.servers.secret import USER
from labkit.servers.services.postgres import SETTINGS as SERVER_SETTINGS
from labkit.servers.services.postgres_template import template
from labkit.vocabulary import GUIDE_COLOUR, MARK_COLOUR, STATE_COLOURS

EARLY = 0.1     # s: a lock may show freed this much before its bound (kernel jiffies, our clock's read)
LATE = 2.0      # s: ...and this much after (a loaded 2-core machine delays the backend's exit and our poll)
NESTED_UID = 1000   # the server's uid when the owner is root: any non-zero one (PostgreSQL refuses 0)


@dataclass(frozen=True)
class Setting:
    """One holder: its session's settings, its last word (``idle``: a statement answered, then
    silence; ``reply``: a ``pg_sleep(reply_after)`` whose answer leaves after the cut; ``query``:
    a statement still running), and whether its link is cut (False: it stays, quiet)."""
    name: str
    settings: dict[str, int] = field(default_factory=dict)
    last: str = "idle"
    cut: bool = True
    reply_after: float = 0.0

    def describe(self) -> str:
        shown = ", ".join(f"{name}={value}" for name, value in self.settings.items()) or "nothing set"
        return shown + ("" if self.cut else " (link intact)")


HALF_OPEN_SETTINGS = (
    Setting("keepalive", {"tcp_keepalives_idle": 2, "tcp_keepalives_interval": 1, "tcp_keepalives_count": 2}),
    Setting("user timeout + keepalive", {"tcp_user_timeout": 2500, "tcp_keepalives_idle": 2,
                                         "tcp_keepalives_interval": 1, "tcp_keepalives_count": 10}),
    # the answer leaves 3 s after the last word: the cut must come before it, and waiting for every
    # connection to go quiet took 1.6 s at load 13 (1.5 s was too short)
    Setting("user timeout, answer in flight", {"tcp_user_timeout": 2000}, last="reply", reply_after=3.0),
    Setting("user timeout, quiet", {"tcp_user_timeout": 2000}),
    Setting("idle session timeout", {"idle_session_timeout": 2000}),
    Setting("idle session timeout, live client", {"idle_session_timeout": 2000}, cut=False),
    Setting("nothing set", {}),
    Setting("connection check, statement running", {"client_connection_check_interval": 200}, last="query"),
)


def first_retransmission(kernel: dict[str, int]) -> float:
    """Seconds from a lone segment's send to its first retransmission by timeout, which is where
    Linux starts counting tcp_user_timeout: with tail-loss probes on (early_retrans >= 3) a probe
    goes after 2 RTT + rto_min and the retransmission timeout (>= rto_min) runs again from it;
    on loopback the RTT is microseconds, so about 2 x rto_min (0.4 s by default)."""
    rto_min = kernel["rto_min_us"] / 1e6
    return 2 * rto_min if kernel["early_retrans"] >= 3 else rto_min


def first_timer(setting: Setting) -> float:
    """The soonest any timer of the setting could act (s after the last word): the cut must
    come before it, or the run measured something else."""
    given = setting.settings
    timers = [given.get("tcp_keepalives_idle") or math.inf, given.get("tcp_user_timeout", 0) / 1000 or math.inf,
              given.get("idle_session_timeout", 0) / 1000 or math.inf, setting.reply_after or math.inf]
    return min(timers)


def expected_hold(setting: Setting, kernel: dict[str, int]) -> float:
    """Seconds after the holder's last word until the server frees its lock, by the rules of
    the module's text; ``math.inf`` when nothing would ever end the session."""
    given = setting.settings
    idle = given.get("tcp_keepalives_idle") or kernel["time"]
    interval = given.get("tcp_keepalives_interval") or kernel["intvl"]
    count = given.get("tcp_keepalives_count") or kernel["probes"]
    user_timeout = given.get("tcp_user_timeout", 0) / 1000
    candidates = [math.inf]
    if setting.cut and setting.last == "reply" and user_timeout:
        candidates.append(setting.reply_after + first_retransmission(kernel) + user_timeout)
    elif setting.cut:
        probes = max(1, math.ceil((user_timeout - idle) / interval)) if user_timeout else count
        candidates.append(idle + interval * probes)
    if given.get("idle_session_timeout") and setting.last != "query":
        candidates.append(setting.reply_after + given["idle_session_timeout"] / 1000)
    return min(candidates)


@dataclass
class SettingHold:
    setting: Setting
    expected: float             # expected_hold: when the server should free the lock (s after the last word)
    held: float | None          # when the observer saw it freed (s after the last word); None: held all the watch
    watched: float              # how long after the last word the watch ended
    cut_after: float            # when the packets started being dropped (s after the last word)
    running_at_cut: bool        # the holder's statement was still running after the cut
    server_socket: str | None   # the server's socket of this connection at the end (ESTABLISHED: no FIN came)
    client_socket: str | None   # the client's (FIN_WAIT1: it closed, its FIN never arrived)
    dropped_from_client: int    # packets the client sent that were dropped
    dropped_to_client: int      # packets the server sent to it that were dropped (probes, answers, RST)
    shown: dict                 # the session's settings as the server showed them
    error: str | None           # what a live client's next statement got, if its session was ended

    @property
    def cut_in_time(self) -> bool:
        """The cut came before any timer of the setting could act, and a statement meant to be
        running at the cut was: else the run did not make the fault it measures."""
        early = not self.setting.cut or self.cut_after < first_timer(self.setting)
        return early and (self.setting.last == "idle" or self.running_at_cut)

    @property
    def freed_in_watch(self) -> bool:
        """Should the lock be freed before the watch ends (its bound plus LATE within it)?"""
        return self.expected + LATE <= self.watched

    def within_bound(self) -> bool:
        """The claim of this row: freed between bound - EARLY and bound + LATE, or, if the
        bound lies past the watch, still held at its end."""
        if self.freed_in_watch:
            return self.held is not None and self.expected - EARLY <= self.held <= self.expected + LATE
        return self.held is None and self.expected > self.watched

    def explain(self) -> str:
        held = "still held" if self.held is None else f"freed after {self.held:.2f} s"
        return (f"{self.setting.name} ({self.setting.describe()}): {held}; bound {duration(self.expected)} s, "
                f"asserted within [-{EARLY:g}, +{LATE:g}] s of it; watched {self.watched:.1f} s; "
                f"cut {self.cut_after:.2f} s after the last word")


@dataclass
class HalfOpenHolds:
    holds: list[SettingHold]
    kernel: dict[str, int]     # the namespace's TCP timers (namespace.tcp_defaults)
    server_version: str
    watch: float

    def __getitem__(self, name: str) -> SettingHold:
        return next(hold for hold in self.holds if hold.setting.name == name)

    @property
    def default_keepalive(self) -> int:
        """Seconds the kernel's default keepalive takes to end a silent connection."""
        return self.kernel["time"] + self.kernel["intvl"] * self.kernel["probes"]

    def rows(self) -> list[dict]:
        return [{"setting": hold.setting.name, "session": hold.setting.describe(),
                 "bound (s)": duration(hold.expected),
                 "held (s)": f"{hold.held:.2f}" if hold.held is not None else f"> {hold.watched:.1f} (watch over)",
                 "server's packets lost": hold.dropped_to_client} for hold in self.holds]


def duration(seconds: float) -> str:
    """Seconds as the table shows them: ``4``, or ``7875 (2 h 11 min)`` when long."""
    if math.isinf(seconds):
        return "never"
    return f"{seconds:g}" if seconds < 600 else f"{seconds:g} ({in_words(seconds)})"


def in_words(seconds: float) -> str:
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


def postgres_major(bin_dir: str) -> int:
    said = subprocess.run([os.path.join(bin_dir, "postgres"), "--version"], capture_output=True, text=True, timeout=30)
    found = versions.parse_postgres(said.stdout)
    return found[0] if found else 0


@shows_progress("half-open connections holding a lock")
def half_open_holds(settings: tuple[Setting, ...] = HALF_OPEN_SETTINGS, poll: float = 0.02) -> HalfOpenHolds:
    """Every setting's hold, all on one private server at once: one round of half_open_runs."""
    return half_open_runs(1, settings, poll)[0]


def half_open_runs(rounds: int, settings: tuple[Setting, ...] = HALF_OPEN_SETTINGS, poll: float = 0.02,
                   timeout: float | None = None) -> list[HalfOpenHolds]:
    """``rounds`` rounds of every setting's hold, one after the other on one private server
    started once (each round watches for the last bound that ends within seconds, plus LATE:
    about 6 s; the start costs a few seconds more)."""
    namespace.check_namespaces()
    bin_dir = discovery.find_postgres()
    if postgres_major(bin_dir) < 14:
        raise LabError(f"the PostgreSQL in {bin_dir} is older than 14: it has no idle_session_timeout",
                       "install PostgreSQL 14 or newer (Debian 12 has 15), or set LABKIT_POSTGRES_BIN")
    sizing = {"time": 7200, "intvl": 75, "probes": 9, "rto_min_us": 200_000, "early_retrans": 3}  # the run reads the real ones
    watch = max([bound for bound in (expected_hold(setting, sizing) for setting in settings) if bound < 60] + [0.0])
    watch += LATE + 0.5
    home = labkit_home()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = Path(tempfile.mkdtemp(prefix="half-open-", dir=home))
    try:
        data = folder / "data"
        shutil.copytree(template(bin_dir, "local") / "data", data, symlinks=True)
        data.chmod(0o700)
        (data / "pg_hba.conf").write_text("local all all reject\nhost all all 127.0.0.1/32 trust\n")
        config = {"bin_dir": bin_dir, "data_dir": str(data), "log": str(folder / "postgres.log"),
                  "uid": os.getuid() or NESTED_UID, "gid": os.getgid() or NESTED_UID, "port": 5432, "user": USER,
                  "settings": {**SERVER_SETTINGS, "listen_addresses": "127.0.0.1"}, "watch": watch, "poll": poll,
                  "rounds": rounds,
                  "holders": [{"name": setting.name, "key": 1 + index, "settings": setting.settings,
                               "last": setting.last, "cut": setting.cut, "reply_after": setting.reply_after}
                              for index, setting in enumerate(settings)]}
        report = run_inside(config, timeout or 90 + rounds * (watch + 15))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    kernel = report["kernel"]
    return [HalfOpenHolds([SettingHold(setting, expected_hold(setting, kernel), row["held"], row["watched"], row["cut_after"],
                                row["running_at_cut"], row["server_socket"], row["client_socket"],
                                row["dropped_from_client"], row["dropped_to_client"], row["shown"], row["error"])
                           for setting, row in zip(settings, measured)], kernel, report["server_version"], watch)
            for measured in report["rounds"]]


def run_inside(config: dict, timeout: float) -> dict:
    """half_open_inside in its namespace: its report, or LabError with what went wrong."""
    argv = namespace.inside_argv([sys.executable, "-m", "labkit.lessons.half_open_inside", json.dumps(config)])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"the half-open run took more than {timeout:g} s", "is the machine overloaded?") from None
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise LabError(f"the half-open run inside the namespace failed (exit {done.returncode}): "
                       f"{done.stderr.strip()[-1500:]}", "the lines above say where") from None
    if "error" in report:
        raise LabError(report["error"], report.get("hint"))
    return report


def holds_plot(result: HalfOpenHolds, ax=None):
    """One bar per setting: how long the lock was held after the holder's last word, with the
    bound the setting gives as a tick (an arrow at the end when it lasted the whole watch)."""
    ax = new_axes(ax, 9.0, 0.45 * len(result.holds) + 1.2)
    names = [hold.setting.name for hold in result.holds][::-1]
    for row, hold in enumerate(result.holds[::-1]):
        held = hold.held if hold.held is not None else hold.watched
        ax.barh(row, held, color=STATE_COLOURS["holding"] if hold.held is not None else STATE_COLOURS["lost"], height=0.6)
        if hold.held is None:
            ax.annotate(f"held to the end (bound: {in_words(hold.expected)})", (held, row), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        else:
            ax.plot([hold.expected, hold.expected], [row - 0.4, row + 0.4], color=MARK_COLOUR, linewidth=2)
            ax.fill_betweenx([row - 0.4, row + 0.4], hold.expected - EARLY, hold.expected + LATE, color=GUIDE_COLOUR, alpha=0.2)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlim(0, result.watch * 1.45)
    ax.set_xlabel("seconds after the holder's last word (black: the bound; grey: the margin asserted)")
    ax.set_title("A half-open connection: how long the server keeps the advisory lock")
    return ax
