"""Pauses and fencing: what notebooks/04_pauses_and_fencing.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("04")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit import faults
from labkit.clients import spawn_clients
from labkit.lessons.client_deadlines import cut_off_holder
from labkit.lessons.common import table
from labkit.lessons.delayed_write import delayed_write_runs, plot_delayed_writes
from labkit.lessons.fencing_edges import late_write_schedule, sequence_restart
from labkit.lessons.pauses_and_fencing import (fenced_and_unfenced, holder_behind_link, pairs_in_order,
                                               pause_past_timeout, pause_past_timeout_at_once,
                                               redis_lock_values, sort_rank_plot, take_over_and_write)
from labkit.locks import LockError, LockTimeout
from labkit.locks.redis_lock import RedisLock
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.record.plots import hold_timeline, store_writes_plot
from labkit.practice.exercises import check_fenced_write, lesson_examples
from labkit.practice.predict import predict
from labkit.record.checker import check_mutual_exclusion
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.timing import wait_until
from labkit.widgets import LockPanel

SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True}   # lesson.lab()

__all__ = ["check_fenced_write", "check_mutual_exclusion", "cut_off_holder", "delayed_write_runs", "faults",
           "fenced_and_unfenced", "FencedStore", "History", "hold_timeline", "holder_behind_link",
           "late_write_schedule", "lesson_examples", "LockError", "LockPanel", "LockTimeout",
           "pairs_in_order", "pause_past_timeout", "pause_past_timeout_at_once", "plot_delayed_writes",
           "predict", "redis_lock_values", "RedisLock", "sequence_restart", "SHAPE", "sort_rank_plot",
           "spawn_clients", "store_writes_plot", "table", "take_over_and_write", "wait_until",
           "ZooKeeperLock"]
