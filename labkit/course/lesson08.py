"""Redlock and clocks: what notebooks/08_redlock_and_clocks.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("08")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.lessons import peers
from labkit.lessons.clock_drift import (drift_race, etcd_default_margin, etcd_drift_race,
                                        etcd_fastest_covered_rate, fastest_covered_rate, SlowClockHolder)
from labkit.lessons.common import table
from labkit.lessons.pauses_and_fencing import pause_past_timeout
from labkit.lessons.redlock_and_clocks import (clock_step_double_grant, compare_with_set_nx,
                                               etcd_lease_countdown, offer_to_a_fenced_store,
                                               pause_double_grant, plot_double_grant, restart_double_grant,
                                               survive_one_crash, zookeeper_session_across_step)
from labkit.record.plots import latency_plot
from labkit.practice.exercises import check_redlock_validity, lesson_examples
from labkit.practice.predict import predict

SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True, "redlock": 5, "clocks": True}   # lesson.lab()

__all__ = ["check_redlock_validity", "clock_step_double_grant", "compare_with_set_nx", "drift_race",
           "etcd_default_margin", "etcd_drift_race", "etcd_fastest_covered_rate", "etcd_lease_countdown",
           "fastest_covered_rate", "latency_plot", "lesson_examples", "offer_to_a_fenced_store",
           "pause_double_grant", "pause_past_timeout", "peers", "plot_double_grant", "predict",
           "restart_double_grant", "SHAPE", "SlowClockHolder", "survive_one_crash", "table",
           "zookeeper_session_across_step"]
