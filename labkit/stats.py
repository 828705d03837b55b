"""Measured samples: the one ``percentile`` of labkit, ``summarize``, and ``take_turns``, the
one yardstick the benchmark and the notebooks time operations with.

Every p50 and p99 the lab prints (the benchmark's table, the latency plot's legend, the
health alerts and dashboard) comes from here, so the same samples give the same number
everywhere.
"""
from __future__ import annotations

import math
import random
import time
from typing import Any, Callable, Mapping, Sequence

from labkit.progress import shows_progress


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least ``fraction`` of the
    samples at or below it (``fraction`` 0.99 = p99; of 1..100 that is 99, not the
    maximum). Raises ValueError for no samples or a fraction outside (0, 1]."""
    if not values:
        raise ValueError("no values to take a percentile of")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r} (0.99 means p99)")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(seconds: Sequence[float]) -> dict[str, Any]:
    """Samples in seconds → {"p50_ms", "p99_ms", "samples"}, in milliseconds rounded to
    the microsecond. Raises ValueError for no samples."""
    milliseconds = [value * 1000 for value in seconds]
    return {"p50_ms": round(percentile(milliseconds, 0.5), 3), "p99_ms": round(percentile(milliseconds, 0.99), 3),
            "samples": len(milliseconds)}


@shows_progress("timing each operation in turns", after=2.0)   # the bench's many quick calls stay silent
def take_turns(methods: Mapping[str, Callable[[], Any]], iterations: int, warm_up: int = 0,
               order: random.Random | None = None, pause: float = 0.0) -> dict[str, list[float]]:
    """The one yardstick of labkit for "which is faster": the benchmark and the notebooks'
    latency comparisons (01, 03) both time with it, so their numbers mean the same thing.

    Seconds each call of each method took: ``warm_up`` untimed calls of each first (they
    open connections and warm caches), then ``iterations`` rounds of one call of each.
    Why turns, not all the calls of one method and then the next: a burst of load on the
    machine then slows every method alike. Why a new random order every round, not a fixed
    one: a client library's threads keep working for a moment after a call returns, and in
    a fixed order that cost would always land on the method that comes next (the benchmark
    once charged one library's background work to the next method that way). The
    order comes from ``order`` (``random.Random(0)`` by default), so a run can be repeated
    exactly. ``pause``: seconds of sleep (not timed) before each call, for a
    call that comes after a quiet spell, when every thread on its path (client, server)
    has to be woken first. Whatever a method raises is raised."""
    order = order or random.Random(0)
    for method in methods.values():  # connections, first node of each path
        for _ in range(warm_up):
            method()
    samples: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for _ in range(iterations):
        order.shuffle(names)
        for name in names:
            if pause:
                time.sleep(pause)
            started = time.perf_counter()
            methods[name]()
            samples[name].append(time.perf_counter() - started)
    return samples
