"""The targets of ``labkit bench --processes`` and its report: pure functions of the numbers
(tested with numbers in tests/bench/test_bench_processes.py), never of the machine.

Targets, each a ratio of hand-off p50s measured in the same run (PASS or MISS, never asserted):
labkit's ZooKeeperLock at most 1.2 x Curator's InterProcessMutex and at most 1.0 x kazoo's Lock;
labkit's EtcdMutex at most 1.2 x Go's concurrency.Mutex (``etcdctl lock``); and exactly one
wakeup per release (counted at the server) for labkit's two recipes. Where a target misses,
the report says where each row's time goes.
"""
from __future__ import annotations

from typing import Any

from labkit.stats import percentile

ZOOKEEPER_LOCK, KAZOO, CURATOR = "labkit ZooKeeperLock", "kazoo Lock", "Curator InterProcessMutex"
ETCD_MUTEX, PYTHON_ETCD3, GO_MUTEX = "labkit EtcdMutex", "python-etcd3 Lock", "Go concurrency.Mutex (etcdctl lock)"
HANDOFF_ROWS = (ZOOKEEPER_LOCK, KAZOO, CURATOR, ETCD_MUTEX, PYTHON_ETCD3, GO_MUTEX)
# (ours, the reference, the largest p50 ratio that meets the target)
RATIO_TARGETS = ((ZOOKEEPER_LOCK, CURATOR, 1.2), (ZOOKEEPER_LOCK, KAZOO, 1.0), (ETCD_MUTEX, GO_MUTEX, 1.2))
ONE_WAKEUP = (ZOOKEEPER_LOCK, ETCD_MUTEX)
TARGET_VERDICTS = {True: "PASS", False: "MISS", None: "----"}   # ----: not measured, or not judged


def p50_ms(row: dict[str, Any]) -> float:
    return round(percentile(row["handoff_ms"], 0.5), 3)


def p95_ms(row: dict[str, Any]) -> float:
    return round(percentile(row["handoff_ms"], 0.95), 3)


def measured(rows: dict[str, dict[str, Any]], label: str) -> bool:
    return bool(rows.get(label, {}).get("handoff_ms"))


# The Go row's correction is trusted while the baseline takes at most this share of the raw
# hand-off: at load 30-40 on 2 cores the baseline's samples spread from 1 to 33 ms and its p50
# (13.5 ms) matched the raw hand-off's (13.6 ms), leaving a difference that was only noise.
CORRECTION_SHARE = 0.5


def correction_swamps(row: dict[str, Any]) -> bool:
    """True when a row corrected by a baseline (the Go row) has a baseline p50 over
    CORRECTION_SHARE of its raw hand-off p50: its corrected p50 is then noise."""
    raw = row.get("raw_handoff_ms")
    return bool(raw) and row["baseline_p50_ms"] > CORRECTION_SHARE * percentile(raw, 0.5)


def process_targets(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target with what was measured and ``met``: True, False, or None when a row it
    needs was not measured (Curator missing, say)."""
    found = []
    for ours, theirs, limit in RATIO_TARGETS:
        target = {"target": f"hand-off p50: {ours} <= {limit} x {theirs}", "rows": [ours, theirs]}
        if measured(rows, theirs) and correction_swamps(rows[theirs]):
            go = rows[theirs]
            target.update(measured=f"not judged: the baseline's p50 ({go['baseline_p50_ms']:.2f} ms) is over "
                                   f"{CORRECTION_SHARE:g} x the raw hand-off's ({percentile(go['raw_handoff_ms'], 0.5):.2f} ms), "
                                   "so the difference is the machine's noise; run on a quieter machine", met=None)
        elif measured(rows, ours) and measured(rows, theirs):
            ratio = round(p50_ms(rows[ours]) / p50_ms(rows[theirs]), 3)
            target.update(measured=f"{ratio:.2f} x ({p50_ms(rows[ours]):.2f} / {p50_ms(rows[theirs]):.2f} ms)",
                          ratio=ratio, met=ratio <= limit)
        else:
            target.update(measured=rows.get(theirs, rows.get(ours, {})).get("note", "not measured"), met=None)
        found.append(target)
    for label in ONE_WAKEUP:
        target = {"target": f"{label}: exactly 1 wakeup per release (at the server)", "rows": [label]}
        wakeups = rows.get(label, {}).get("wakeups")
        target.update(measured=f"{wakeups_text(wakeups)} (wakeups x releases)" if wakeups else "not measured",
                      met=set(wakeups) == {1} if wakeups else None)
        found.append(target)
    return found


def wakeups_text(wakeups: list[int]) -> str:
    """[1, 1, 1] -> "1 x3"; anything else, the counts themselves (the first 12)."""
    if wakeups and len(set(wakeups)) == 1:
        return f"{wakeups[0]} x{len(wakeups)}"
    return ",".join(map(str, wakeups[:12])) + (",..." if len(wakeups) > 12 else "")


def missed_breakdown(rows: dict[str, dict[str, Any]], targets: list[dict[str, Any]]) -> list[str]:
    """For every target that missed, each of its rows' hand-off cut in parts (p50s, ms)."""
    lines = []
    for target in targets:
        if target["met"] is not False:
            continue
        lines.append(f"  MISS {target['target']} (measured {target['measured']}):")
        for label in target["rows"]:
            row = rows[label]
            parts = ", ".join(f"{part} {value:.2f}" for part, value in row.get("breakdown_p50_ms", {}).items())
            lines.append(f"    {label}: p50 {p50_ms(row):.2f} ms; {parts or 'no parts measured'}")
            if "wakeup" in target["target"]:
                lines.append(f"    wakeups per release at the server: {row['wakeups']}; "
                             f"in the clients' events: {row.get('client_wakeups')}")
    return lines


def report(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = [f"hand-off among contender processes, {results['layout']}",
             f"  {results['date']}; load average (1, 5, 15 min) at the start {results['load_average']['start']}, "
             f"at the end {results['load_average']['end']}",
             f"  {'row':<38}{'N':>4}{'hand-offs':>11}{'p50 ms':>9}{'p95 ms':>9}  wakeups per release (server)"]
    for label in HANDOFF_ROWS:
        row = rows.get(label)
        if row is None or not row.get("handoff_ms"):
            lines.append(f"  {label:<38}  {(row or {}).get('note', 'not measured')}")
            continue
        lines.append(f"  {label:<38}{row['n']:>4}{row['handoffs']:>11}{p50_ms(row):>9.2f}{p95_ms(row):>9.2f}"
                     f"  {wakeups_text(row['wakeups'])}")
    if measured(rows, GO_MUTEX):
        go = rows[GO_MUTEX]
        lines.append(f"  ({GO_MUTEX}: from the holder's command ending to the next one's starting, p50 "
                     f"{percentile(go['raw_handoff_ms'], 0.5):.2f} ms, less the command's own start and end measured "
                     f"in turns with it, p50 {go['baseline_p50_ms']:.2f} ms, fastest {min(go['baseline_ms']):.2f} ms)")
    lines.append("  Each hand-off is timed in the contenders' processes (one monotonic clock): from the holder "
                 "beginning to let go to the next holder's acquire returning.")
    targets = results["targets"]
    lines += ["", "targets"] + [f"  {TARGET_VERDICTS[t['met']]:<5} {t['target']}  (measured {t['measured']})" for t in targets]
    missed = missed_breakdown(rows, targets)
    if missed:
        lines += ["", "where the time goes, for each target missed"] + missed
    return "\n".join(lines)
