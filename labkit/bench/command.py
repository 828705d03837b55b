"""The benchmark: what each lock costs, and how many waiters one release wakes.

``labkit bench`` (or ``python -m labkit.bench``) with no option runs the recipes' benchmark
(``labkit.bench.recipes``) on a lab of its own, or with ``--attach`` on the one ``labkit up``
started; ``--network``, ``--scale`` and ``--processes [N]`` run one other part instead
(``network``, ``scale``, ``processes`` of this package). It prints a table and, with
``--json PATH``, writes the same numbers for the notebooks. What can fail: what each part
says it raises.
"""
from __future__ import annotations

import argparse
import json
import logging
import uuid

from labkit.bench import network, processes, recipes, scale
from labkit.servers.lab import attach, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, N = 1, 10, 50")
    parser.add_argument("--tiny", action="store_true", help="a smoke run for tests: N <= 5, a few iterations")
    parser.add_argument("--attach", action="store_true", help="use the lab `labkit up` started")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--network", action="store_true",
                        help="only what the network fault proxy costs (labkit/bench/network.py)")
    parser.add_argument("--scale", action="store_true",
                        help="only the large-N part: 1000 contenders over worker processes (labkit/bench/scale/)")
    parser.add_argument("--processes", nargs="?", const=50, type=int, metavar="N",
                        help="only the hand-off among N contender processes, 50 if N is not given (labkit/bench/processes/)")
    parser.add_argument("--rounds", type=int, default=1, help="with --processes: how many times each row runs")
    options = parser.parse_args(argv)
    if options.processes is not None:
        return processes.main(options.processes, options.rounds, options.json, options.attach)
    if options.scale:
        return scale.main("tiny" if options.tiny else "quick" if options.quick else "full", options.json, options.attach)
    if options.network:
        return network.main(iterations=20 if options.tiny else 50 if options.quick else 200)
    # kazoo warns about every connection the teardown closes on purpose
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    if options.tiny:
        settings = {"iterations": 10, "waiter_counts": (1, 3, 5), "releases": 4, "etcdctl_iterations": 2}
    elif options.quick:
        settings = {"iterations": 200, "waiter_counts": (1, 10, 50), "releases": 5, "etcdctl_iterations": 10}
    else:
        settings = {}
    # redlock=5: labkit's Redlock and pottery's on the same five primaries (an attached lab may have none)
    lab = attach() if options.attach else up(zookeeper=1, etcd=1, redis=True, redlock=5, quiet=True)
    try:
        results = recipes.run(lab, **settings)
        if lab.private:  # what the login costs: against an open lab of the same size, started here
            with up(zookeeper=1, etcd=1, redis=True, quiet=True, private=False, keep_previous=True) as open_lab:
                results["auth_cost"] = recipes.measure_auth_cost(lab, open_lab, results["iterations"], uuid.uuid4().hex[:8])
    finally:
        if not options.attach:
            lab.down()
    print(recipes.report(results))
    if options.json:
        with open(options.json, "w") as output:
            json.dump(results, output, indent=2)
        print(f"\nwrote {options.json}")
    return 0
