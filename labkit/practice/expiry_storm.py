"""The expiry storm (scenario ``expiry-storm-incident``): a ZooKeeper leader frozen for longer
than its clients' session timeout, but not for as long as its followers wait for it, expires
every session when it wakes; every client then opens a new session and re-creates its
ephemeral node at once. This module runs that on a real 3-server ensemble and keeps the
timeline, so the scenario's learner reasons over a real run, not a drawing:

    data = expiry_storm(lab, clients=30)            # lab = labkit.up(zookeeper=3, zookeeper_settings=STORM_SETTINGS)
    reconnect_curve(load_storm())                   # the committed run (expiry_storm.json)

Why the sessions expire (ZooKeeper's ``SessionTrackerImpl`` and the leader's ping exchange
with its learners): only the leader expires sessions. A follower answers its clients' pings
itself and reports the sessions it saw to the leader in the reply to the leader's ping, every
half tick. A frozen leader sends no ping, hears no reply, and expires nothing; its followers
keep their clients connected until they have heard nothing for ``syncLimit x tickTime``
(then they drop the leader and elect another, whose session tracker tracks every session
afresh, with its full timeout: the control run). So after a pause longer than the session
timeout and shorter than the followers' patience, the leader's expiry thread wakes with
sessions overdue and closes every one it reaches before that session's follower reports it:
a race, measured here as 14 of 30 sessions expired in one run and 30 of 30 in the next. The
clients connect only to the followers, so nothing but the leader's expiry ends their sessions.

Two reconnect policies, one run each: ``immediate`` (open the new session as soon as the old
one is reported expired, what kazoo itself does) and ``jittered`` (wait a random delay drawn
uniformly in [0, spread) first: AWS's "full jitter"). The timeline holds, per client, when
it was told its session expired and when its new session and ephemeral node were back,
relative to the moment the leader was frozen. ``reconnect_curve`` plots clients back over
time and the peak reconnect rate per 100 ms.

What can fail: ``LabError`` when the lab is not a 3-server ensemble or a session does not
expire (the run then proves nothing); kazoo's errors if the ensemble does not answer.
"""
from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient, KazooState

from labkit.errors import LabError, WaitTimedOut
from labkit.timing import wait_until
from labkit.vocabulary import FAULT_BAND_COLOURS, GUIDE_COLOUR, SERVICE_COLOURS, SUCCESSOR_COLOUR

STORM_DATA = Path(__file__).with_name("expiry_storm.json")
# Followers wait syncLimit x tickTime (25 x 200 ms = 5 s) for a silent leader: longer than the
# pause, so they keep their clients and do not elect another leader (which would restart the
# session timers and save the sessions).
STORM_SETTINGS = {"syncLimit": 25}
STORM_POLICIES = ("immediate", "jittered")
BUCKET = 0.1   # s: the reconnect rate is counted per 100 ms


class StormClient:
    """One client in a thread of its own: a session on the followers, one ephemeral node;
    told its session expired, it opens a new session (after its policy's delay) and makes
    the node again."""

    def __init__(self, name: str, hosts: str, auth: dict, timeout: float, delay: float, origin: float):
        self.name, self.hosts, self.auth, self.timeout = name, hosts, auth, timeout
        self.delay, self.origin = delay, origin
        self.expired_at: float | None = None
        self.back_at: float | None = None
        self.sessions: list[int] = []
        self._lost = threading.Event()
        self._done = threading.Event()
        self._client = self._connect()

    def _connect(self) -> KazooClient:
        client = KazooClient(hosts=self.hosts, timeout=self.timeout, **self.auth)
        client.start(timeout=15)
        client.create(f"/storm/{self.name}", ephemeral=True, makepath=True)
        self.sessions.append(client.client_id[0])
        client.add_listener(self._state)
        return client

    def _state(self, state: str) -> None:
        if state == KazooState.LOST and self.expired_at is None and not self._done.is_set():
            self.expired_at = time.monotonic() - self.origin
            self._lost.set()

    def start(self) -> None:
        threading.Thread(target=self._reconnect, name=f"storm-{self.name}", daemon=True).start()

    def _reconnect(self) -> None:
        self._lost.wait()
        if self._done.is_set():
            return
        old, self._client = self._client, None
        old.stop()
        old.close()
        self._done.wait(self.delay)        # the policy's backoff, not a poll
        if self._done.is_set():
            return
        self._client = self._connect()
        self.back_at = time.monotonic() - self.origin

    def stop(self) -> None:
        self._done.set()
        self._lost.set()
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def row(self) -> dict:
        return {"client": self.name, "expired_at": _round(self.expired_at), "delay": round(self.delay, 3),
                "back_at": _round(self.back_at), "sessions": len(set(self.sessions))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def storm_run(lab: Any, policy: str, clients: int = 30, session_timeout: float = 2.0, pause: float = 3.5,
              spread: float = 2.0, seed: int = 1, storm: bool = True) -> dict:
    """One run: ``clients`` sessions on the followers, the leader frozen ``pause`` s, every
    client reconnecting by ``policy``; times are seconds from the freeze. ``storm=False``: a
    pause past the followers' patience, where no session should expire (the run waits a
    session timeout after the new leader is in place and records whatever expired)."""
    if policy not in STORM_POLICIES:
        raise LabError(f"no reconnect policy {policy!r}", hint=f"one of {STORM_POLICIES}")
    ensemble = lab.zookeeper
    if len(ensemble.nodes) != 3:
        raise LabError("the expiry storm needs a 3-server ZooKeeper ensemble",
                       hint="labkit.up(zookeeper=3, zookeeper_settings=STORM_SETTINGS)")
    leader = ensemble.wait_for_leader()
    followers = [node for node in ensemble.nodes if node is not leader]
    hosts = ",".join(node.endpoint for node in followers)
    draw = random.Random(seed)
    origin = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    storm_clients = [StormClient(f"{tag}-c{number:03d}", hosts, ensemble.auth, session_timeout,
                         draw.uniform(0, spread) if policy == "jittered" else 0.0, origin)
             for number in range(clients)]
    try:
        for client in storm_clients:
            client.start()
        frozen_at = time.monotonic()
        leader.pause()
        try:
            threading.Event().wait(pause)  # the fault's length: the leader is frozen this long
        finally:
            # stamped before the call: the leader may act the moment SIGCONT lands, before resume()
            # returns (a client was told 27 ms before a stamp taken after it, on a loaded machine)
            resumed_at = time.monotonic()
            leader.resume()
        if not storm:
            ensemble.wait_for_leader(timeout=30)
            threading.Event().wait(2 * session_timeout)   # long enough for any expiry to be told
        else:
            try:
                wait_until(lambda: all(c.expired_at is not None for c in storm_clients), "every storm client to be "
                           "told its session expired", timeout=session_timeout + 5, poll=0.05)
            except WaitTimedOut:
                if not any(c.expired_at is not None for c in storm_clients):
                    raise LabError("no session expired after the leader's pause: this run shows no storm",
                                   hint="the followers' reports reached the leader first, or the followers gave up "
                                        "on it (an election restarts the timers): pause longer than the session "
                                        "timeout and shorter than syncLimit x tickTime") from None
        wait_until(lambda: all(c.back_at is not None for c in storm_clients if c.expired_at is not None),
                   "every expired client to be back with a new session", timeout=spread + 20, poll=0.05)
    finally:
        for client in storm_clients:
            client.stop()
    shift = frozen_at - origin
    rows = [dict(c.row(), expired_at=_round(c.expired_at - shift) if c.expired_at is not None else None,
                 back_at=_round(c.back_at - shift) if c.back_at is not None else None) for c in storm_clients]
    return {"policy": policy, "storm": storm, "pause": pause, "frozen_at": 0.0,
            "resumed_at": round(resumed_at - frozen_at, 3), "clients": rows}


def expiry_storm(lab: Any, clients: int = 30, session_timeout: float = 2.0, pause: float = 3.5,
                 spread: float = 2.0, seed: int = 1) -> dict:
    """Both policies on the same lab, then the control (a pause past the followers'
    patience, no storm expected), and the settings that shaped the runs."""
    conf = lab.zookeeper.four_letter("conf")
    tick = int(conf.split("tickTime=")[1].split()[0])
    sync = int(conf.split("syncLimit=")[1].split()[0])
    runs = [storm_run(lab, policy, clients, session_timeout, pause, spread, seed) for policy in STORM_POLICIES]
    # the control: frozen past the followers' patience, they elect a new leader and the sessions live
    runs.append(storm_run(lab, "immediate", clients, session_timeout, tick * sync / 1000 + 1.5, spread, seed,
                          storm=False))
    version = lab.zookeeper.four_letter("srvr").splitlines()[0].split(":", 1)[1].split("-")[0].strip()
    return {"zookeeper": version, "servers": 3, "tick_ms": tick, "sync_limit": sync,
            "followers_wait": round(tick * sync / 1000, 3), "session_timeout": session_timeout,
            "pause": pause, "spread": spread, "bucket": BUCKET, "runs": runs}


def write_storm(data: dict, path: Path = STORM_DATA) -> Path:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def load_storm(path: Path = STORM_DATA) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def reconnects_per_bucket(run: dict, bucket: float = BUCKET) -> dict[int, int]:
    """{bucket number from the freeze: new sessions that came back in it}."""
    counts: dict[int, int] = {}
    for row in run["clients"]:
        if row["back_at"] is not None:
            slot = int(row["back_at"] // bucket)
            counts[slot] = counts.get(slot, 0) + 1
    return counts


def peak_rate(run: dict, bucket: float = BUCKET) -> float:
    """The most reconnects in one bucket, per second."""
    counts = reconnects_per_bucket(run, bucket)
    return max(counts.values(), default=0) / bucket


def reconnect_curve(data: dict, ax=None):
    """Clients back over time, one line per policy, the leader's freeze shaded and the
    session timeout marked; the legend gives each policy's peak reconnect rate."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4), layout="constrained")
    colours = {"immediate": SERVICE_COLOURS["Redis"], "jittered": SERVICE_COLOURS["ZooKeeper"]}
    end = 0.0
    storms = [run for run in data["runs"] if run["storm"]]
    for run in storms:
        times = sorted(row["back_at"] for row in run["clients"] if row["back_at"] is not None)
        end = max([end, run["resumed_at"], *times])
        ax.step([0.0, *times], range(len(times) + 1), where="post", color=colours[run["policy"]],
                label=f"{run['policy']} reconnect: peak {peak_rate(run, data['bucket']):.0f} new sessions/s")
        expired = sorted(row["expired_at"] for row in run["clients"] if row["expired_at"] is not None)
        ax.plot(expired, range(1, len(expired) + 1), ".", color=colours[run["policy"]], alpha=0.5, markersize=4)
    for run in data["runs"]:
        if not run["storm"]:
            expired = sum(row["expired_at"] is not None for row in run["clients"])
            ax.plot([], [], " ", label=f"control: frozen {run['pause']:g} s, past the followers' patience: "
                                       f"{expired}/{len(run['clients'])} expired")
    resumed = storms[0]["resumed_at"]
    ax.axvspan(0, resumed, color=FAULT_BAND_COLOURS["pause"], label=f"leader frozen ({resumed:.1f} s)")
    ax.axvline(data["session_timeout"], color=GUIDE_COLOUR, linestyle="--",
               label=f"session timeout ({data['session_timeout']:g} s)")
    ax.axvline(data["followers_wait"], color=SUCCESSOR_COLOUR, linestyle=":",
               label=f"followers give up on the leader ({data['followers_wait']:g} s)")
    ax.set_xlim(-0.2, max(end, data["followers_wait"]) + 0.5)
    ax.set_title(f"Expiry storm on a real {data['servers']}-server ZooKeeper {data['zookeeper']}: "
                 "dots, told expired; lines, back with a new session")
    ax.set_xlabel("seconds since the leader froze")
    ax.set_ylabel("clients (count)")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def run_facts(run: dict, bucket: float = BUCKET) -> dict:
    """What a learner reads off one run: how many sessions expired, when the first client was
    told and the last was back (s from the freeze), the leader's resume, the peak rate."""
    expired = [row["expired_at"] for row in run["clients"] if row["expired_at"] is not None]
    back = [row["back_at"] for row in run["clients"] if row["back_at"] is not None]
    return {"clients": len(run["clients"]), "expired": len(expired), "survived": len(run["clients"]) - len(expired),
            "first_told": min(expired, default=None), "last_back": max(back, default=None),
            "resumed_at": run["resumed_at"], "pause": run["pause"], "peak_rate": peak_rate(run, bucket)}


def storm_facts(data: dict | None = None) -> dict[str, dict]:
    """``run_facts`` of each run of ``data`` (the committed run by default), by name:
    "immediate", "jittered", "control"."""
    data = load_storm() if data is None else data
    return {(run["policy"] if run["storm"] else "control"): run_facts(run, data["bucket"]) for run in data["runs"]}
