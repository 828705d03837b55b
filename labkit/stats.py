"""Summaries of measured samples: the one ``percentile`` of labkit, and ``summarize``.

Every p50 and p99 the lab prints (the benchmark's table, the latency plot's legend, the
health alerts and dashboard) comes from here, so the same samples give the same number
everywhere.
"""
from __future__ import annotations

import math
from typing import Any, Sequence


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
