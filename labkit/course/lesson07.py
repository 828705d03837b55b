"""Partitions and client-side expiry: what notebooks/07_partitions_and_client_side_expiry.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("07")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.lessons import link_delays, partitions, pre_vote, split_brain
from labkit.lessons.client_deadlines import cut_off_holder
from labkit.lessons.common import table
from labkit.lessons.curator_topologies import curator_race, CURATOR_RULE
from labkit.lessons.holder_safety import plot_races, race_many, TOPOLOGIES
from labkit.practice.exercises import check_client_deadline, lesson_examples
from labkit.practice.predict import predict

SHAPE = {"zookeeper": 3, "etcd": 3, "redis": True, "replica": True, "sentinels": 3, "network": True}   # lesson.lab()

__all__ = ["check_client_deadline", "curator_race", "CURATOR_RULE", "cut_off_holder", "lesson_examples",
           "link_delays", "partitions", "plot_races", "pre_vote", "predict", "race_many", "SHAPE",
           "split_brain", "table", "TOPOLOGIES"]
