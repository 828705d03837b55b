"""Fencing a database: what notebooks/10_fencing_a_database.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("10")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the fenced table in
labkit.record, the exercise's checker in labkit.practice."""
from labkit.lessons import databases, half_open
from labkit.lessons.common import table
from labkit.practice.exercises import lesson_examples
from labkit.practice.exercises.fenced_sql import check_fenced_add
from labkit.practice.predict import predict
from labkit.record.fenced_table import FencedTable, InvalidToken

# PostgreSQL alone: no coordinator, the tokens stand for a lock's fencing tokens or a leader's
# epochs (lessons 04 and 09); network=True gives a client (via="client-2") a link of its own
SHAPE = {"zookeeper": 0, "etcd": 0, "redis": False, "postgres": True, "network": True, "quiet": True}   # lesson.lab()

__all__ = ["check_fenced_add", "databases", "FencedTable", "half_open", "InvalidToken", "lesson_examples", "predict",
           "SHAPE", "table"]
