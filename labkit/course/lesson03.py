"""etcd: what notebooks/03_etcd_leases_and_mutex.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("03")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.lessons.client_deadlines import cut_off_holder
from labkit.lessons.common import table
from labkit.lessons.contention import race
from labkit.lessons.etcd_experiments import (careless_holder, careless_writes_plot, guarded_put,
                                             hold_past_ttl, lease_countdown_plot, queue_behind_etcdctl,
                                             sample_leases, stop_keepalive)
from labkit.lessons.etcd_leases import count_etcd_wakeups, etcd3_lock_contenders, lease_ids, mutex_contenders
from labkit.lessons.etcd_order import (cas_increment, count_with, counter_plots, member_views,
                                       plain_increment, take_turns_through_members, without_quorum,
                                       write_in_real_time_order)
from labkit.locks import SessionExpired
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.record.plots import hold_timeline, latency_plot, wakeups_per_release_plot
from labkit.practice.exercises import check_etcd_cas, lesson_examples
from labkit.practice.predict import predict
from labkit.record.checker import check_fifo
from labkit.record.history import History
from labkit.stats import take_turns
from labkit.timing import wait_until
from labkit.widgets import LockPanel, maps

SHAPE = {"zookeeper": 0, "etcd": 3, "redis": False}   # lesson.lab()

__all__ = ["careless_holder", "careless_writes_plot", "cas_increment", "check_etcd_cas", "check_fifo",
           "count_etcd_wakeups", "count_with", "counter_plots", "cut_off_holder", "etcd3_lock_contenders",
           "EtcdMutex", "EtcdSession", "guarded_put", "History", "hold_past_ttl", "hold_timeline",
           "latency_plot", "lease_countdown_plot", "lease_ids", "lesson_examples", "LockPanel", "maps",
           "member_views", "mutex_contenders", "plain_increment", "predict", "queue_behind_etcdctl", "race",
           "sample_leases", "SessionExpired", "SHAPE", "stop_keepalive", "table", "take_turns",
           "take_turns_through_members", "wait_until", "wakeups_per_release_plot", "without_quorum",
           "write_in_real_time_order"]
