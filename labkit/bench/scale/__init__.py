"""The benchmark at scale (``labkit bench --scale``): a thousand contenders spread over
worker processes, the herd's cost on the server, hand-off throughput against the disk's
fsync and the loopback round trip, and what a quorum of 1, 3 or 5 nodes costs.

``python -m labkit.bench --scale [--quick | --tiny] [--json PATH] [--attach]`` starts its own
lab (``labkit.up(zookeeper=1, etcd=1, redis=False)``) unless ``--attach``, prints a table
with PASS/MISS targets, and with ``--json PATH`` writes the numbers and PATH's ``.png``
plots; ``load_and_plot(PATH)`` draws them again from the saved JSON (notebook 02).

What can fail: a lab that cannot start (see ``labkit.up``), a worker that cannot open its
sessions (``CrowdError``), a step that does not happen in time (``BenchTimeout``). Every
worker is stopped and every session closed on the way out.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from labkit.bench.scale.crowd_handoff import BenchTimeout, measure_crowd
from labkit.bench.scale.report import SCALE_SETTINGS, load_and_plot, plot, report, run
from labkit.servers.lab import Lab, attach, up

__all__ = ["BenchTimeout", "SCALE_SETTINGS", "load_and_plot", "main", "measure_crowd", "plot", "report", "run"]


def main(size: str = "full", json_path: str | None = None, attach_to_lab: bool = False) -> int:
    """``size``: "full" (N up to 1000, 1/3/5 nodes), "quick" (N up to 300) or "tiny" (a smoke run)."""
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)   # every close on purpose is a warning
    lab: Lab = attach() if attach_to_lab else up(zookeeper=1, etcd=1, redis=False, quiet=True)
    try:
        results = run(lab, **SCALE_SETTINGS[size])
    finally:
        if not attach_to_lab:
            lab.down()
    print(report(results))
    if json_path:
        with open(json_path, "w") as output:
            json.dump(results, output, indent=2)
        picture = Path(json_path).with_suffix(".png")
        plot(results).savefig(picture, dpi=110)
        print(f"\nwrote {json_path} and {picture}")
    return 0
