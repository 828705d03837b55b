"""Semaphores and elections: what notebooks/09_semaphores_and_elections.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("09")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record, the graphs of the runs in labkit.record.plots."""
from labkit.lessons import elections, lease_elections, semaphore_deadlines, semaphores
from labkit.lessons.common import table
from labkit.lessons.holder_safety import plot_races
from labkit.locks.curator import require_curator
from labkit.locks.etcd_election import EtcdElection
from labkit.locks.lease_election import LeaseDurations
from labkit.record.plots import holds_acting_plot, token_timeline
from labkit.practice.predict import predict
from labkit.record.checker import check_at_most_holders, holds_acting
from labkit.record.epochs import check_one_leader_per_epoch

# One ZooKeeper node is enough for a semaphore and an election; three etcd members as in
# production; Redis keeps the shared record; network=True routes client links through the fault proxy
SHAPE = {"zookeeper": 1, "etcd": 3, "redis": True, "network": True, "quiet": True}   # lesson.lab()

__all__ = ["check_at_most_holders", "check_one_leader_per_epoch", "elections", "EtcdElection", "holds_acting",
           "holds_acting_plot", "lease_elections", "LeaseDurations", "plot_races", "predict", "require_curator",
           "semaphore_deadlines", "semaphores", "SHAPE", "table", "token_timeline"]
