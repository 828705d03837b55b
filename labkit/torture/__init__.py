"""Jepsen-style torture for locks: run a recipe under a seeded nemesis on real servers and
judge the history (``torture``), from the command line as ``labkit torture``.

    result = labkit.torture.torture("zookeeper", clients=8, duration=60, nemesis="pause,kill", seed=42)
    result            # the verdicts, with the timeline (inline in a notebook)
    result.save("report")   # report.json (replayable), trial-1.png, report.html
"""
from labkit.torture.linearizable import Operation, check_mutex
from labkit.torture.report import TortureResult, Trial
from labkit.torture.request import TortureError, check_request
from labkit.torture.run import read_replay, torture
from labkit.torture.schedule import NEMESES, Step, plan

__all__ = ["NEMESES", "Operation", "Step", "TortureError", "TortureResult", "Trial", "check_mutex",
           "check_request", "plan", "read_replay", "torture"]
