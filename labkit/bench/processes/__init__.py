"""The hand-off in the layout real systems use: ``labkit bench --processes [N]``.

N contender processes (50 by default), one session each, on a 3-member ZooKeeper ensemble
and a 3-member etcd cluster, for six rows on the same servers in the same run: labkit's
ZooKeeperLock, kazoo's Lock and Curator's InterProcessMutex (one JVM per contender), labkit's
EtcdMutex, python-etcd3's Lock, and Go's concurrency.Mutex as shipped in ``etcdctl lock`` (a
chain of etcdctl processes). The rows take turns: each round runs every row once, in a new
random order, with N contenders that hand the lock on N - 1 times (every waiter holds once).
``contenders`` runs the Python and Curator rows, ``etcdctl_chain`` Go's, ``targets`` judges and
reports. Progress lines go to stderr while the processes start (50 JVMs on 2 cores take a while).

Targets are printed as PASS or MISS, never asserted: timing depends on the machine. What can
fail: a lab that cannot start, ``BenchTimeout`` (a step that does not happen in time), a
worker or JVM that cannot start (``CrowdError``, ``CuratorPeerError``). Curator missing only
leaves its row out, with a note (``require_curator`` fails instead where Curator is expected).
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import random
import re
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from labkit.bench.processes.contenders import PYTHON_ROWS, measure_curator, measure_python
from labkit.bench.processes.etcdctl_chain import measure_etcdctl_chain
from labkit.bench.processes.targets import CURATOR, GO_MUTEX, HANDOFF_ROWS, process_targets, report
from labkit.locks.curator import require_curator
from labkit.servers.lab import attach, up

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

DEFAULT_PROCESSES = 50


def progress_printer(stream: Any = sys.stderr, every: float = 2.0) -> Callable[[str], None]:
    """``say(line)``: prints ``line`` with the seconds since the start. A line counting "k/N"
    is printed at most once per ``every`` seconds, unless k = N (a stage ends)."""
    began, last = time.monotonic(), [-every]

    def say(line: str) -> None:
        now, count = time.monotonic(), re.search(r"(\d+)/(\d+)", line)
        if count is None or count.group(1) == count.group(2) or now - last[0] >= every:
            last[0] = now
            print(f"  [{now - began:6.1f} s] {line}", file=stream, flush=True)
    return say


def merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's rounds as one row: every hand-off and wakeup, the parts' p50s as the median
    of the rounds' p50s."""
    merged = dict(rows[0])
    for key in ("spans", "handoff_ms", "raw_handoff_ms", "baseline_ms", "wakeups", "client_wakeups"):
        if rows[0].get(key) is not None:
            merged[key] = [value for row in rows for value in row[key]]
    merged["handoffs"] = sum(row["handoffs"] for row in rows)
    merged["breakdown_p50_ms"] = {part: sorted(row["breakdown_p50_ms"][part] for row in rows)[len(rows) // 2]
                                  for part in rows[0]["breakdown_p50_ms"]}
    if "baseline_p50_ms" in rows[0]:
        merged["baseline_p50_ms"] = sorted(row["baseline_p50_ms"] for row in rows)[len(rows) // 2]
    return merged


def run(lab: Lab, n: int = DEFAULT_PROCESSES, rounds: int = 1, warm_up: int = 20,
        say: Callable[[str], Any] | None = None, seed: int | None = None) -> dict[str, Any]:
    """Every row, ``rounds`` times, on ``lab``; returns the dict ``--json`` writes. ``warm_up``:
    acquire + release cycles each Curator JVM runs before it queues (its JIT). ``say``: where
    progress lines go (default: stderr)."""
    say = say or progress_printer()
    if n < 2:
        raise ValueError(f"a hand-off needs at least 2 contender processes, got {n}")
    run_id, load = uuid.uuid4().hex[:8], [round(value, 2) for value in os.getloadavg()]
    skipped = require_curator(f"the {CURATOR} row")
    measures: dict[str, Callable[[str], dict[str, Any]]] = {
        label: (lambda name, label=label: measure_python(lab, label, n, n - 1, name, say)) for label in PYTHON_ROWS}
    if not skipped:
        measures[CURATOR] = lambda name: measure_curator(lab, n, n - 1, name, warm_up, say)
    measures[GO_MUTEX] = lambda name: measure_etcdctl_chain(lab, n, n - 1, name.strip("/").replace("/", "-"), say)
    order = random.Random(seed)
    measured: dict[str, list[dict[str, Any]]] = {label: [] for label in measures}
    for number in range(rounds):
        for label in order.sample(list(measures), len(measures)):
            say(f"round {number + 1} of {rounds}: {label}")
            measured[label].append(measures[label](f"/procs-{run_id}/{HANDOFF_ROWS.index(label)}-{number}"))
    rows = {label: merge(samples) for label, samples in measured.items()}
    if skipped:
        rows[CURATOR] = {"row": CURATOR, "n": n, "handoffs": 0, "handoff_ms": [], "note": skipped}
    results = {"n": n, "rounds": rounds, "warm_up": warm_up, "rows": rows,
               "layout": f"{len(lab.zookeeper.nodes)} ZooKeeper + {len(lab.etcd.nodes)} etcd, N = {n} processes "
                         f"(one session each), {rounds} round(s) of N - 1 hand-offs per row",
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "load_average": {"start": load, "end": [round(value, 2) for value in os.getloadavg()]}}
    results["targets"] = process_targets(rows)
    return results


def main(n: int = DEFAULT_PROCESSES, rounds: int = 1, json_path: str | None = None, attached: bool = False) -> int:
    """``labkit bench --processes [N] [--rounds R] [--json PATH] [--attach]``."""
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)   # the teardown closes sessions on purpose
    lab = attach() if attached else up(zookeeper=3, etcd=3, quiet=True)
    try:
        results = run(lab, n, rounds)
    finally:
        if not attached:
            lab.down()
    print(report(results))
    if json_path:
        with open(json_path, "w") as output:
            json.dump(results, output, indent=2)
        print(f"\nwrote {json_path}")
    return 0
