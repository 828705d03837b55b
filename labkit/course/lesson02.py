"""The ZooKeeper lock recipe, step by step: what notebooks/02_zookeeper_lock_recipe.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("02")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.bench.scale.report import load_and_plot
from labkit.lessons.common import table
from labkit.lessons.contention import race
from labkit.lessons.zookeeper_experiments import (crash_holder, crash_plot, cut_off_holder_history, herd_cost,
                                                  lost_create_reply, middle_waiter_dies, naive_queue,
                                                  queue_order_plot, share_one_path, three_implementations,
                                                  wakeup_plots)
from labkit.lessons.zookeeper_recipe import (count_zookeeper_wakeups, LosesFirstCreateReply, NaiveLock,
                                             sequence_diagram, watchers_of)
from labkit.locks.kazoo_reference import KazooReferenceLock
from labkit.locks.zookeeper import sequence_of, ZooKeeperLock
from labkit.record.plots import hold_timeline
from labkit.practice.predict import predict
from labkit.record.checker import check_fifo
from labkit.record.history import History
from labkit.servers.services.zookeeper import TICK_MS
from labkit.timing import wait_until
from labkit.widgets import LockPanel, maps

SHAPE = {"zookeeper": 3, "etcd": 0, "redis": False}   # lesson.lab()

__all__ = ["check_fifo", "count_zookeeper_wakeups", "crash_holder", "crash_plot",
           "cut_off_holder_history", "herd_cost", "History", "hold_timeline", "KazooReferenceLock",
           "load_and_plot", "LockPanel", "LosesFirstCreateReply", "lost_create_reply", "maps",
           "middle_waiter_dies", "naive_queue", "NaiveLock", "predict", "queue_order_plot", "race",
           "sequence_diagram", "sequence_of", "SHAPE", "share_one_path",
           "table", "three_implementations", "TICK_MS", "wait_until", "wakeup_plots", "watchers_of",
           "ZooKeeperLock"]
