"""What each prediction of the course is about: its lesson, and the misconception its wrong
answers stand for. The data lives in ``predictions.json`` next to this module: a list of
misconceptions (an id and one sentence each) and one entry per ``predict()`` question of
notebooks 00-11, keyed by the question's exact text.

    note("20 waiters watch the parent. How many wake on the first release?")
    # PredictionNote(lesson="02", misconception="watch-fan-out")
    MISCONCEPTIONS["watch-fan-out"]      # the sentence a calibration summary shows

A question the file does not know gets a note with ``None`` in both fields: the prediction
still works, and the calibration counts it under "not named" (tests/practice/test_predict.py fails
for every notebook question the file misses, so that does not last).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NOTES_FILE = Path(__file__).with_name("predictions.json")


@dataclass(frozen=True)
class PredictionNote:
    lesson: str | None
    misconception: str | None


def _load(path: Path = NOTES_FILE) -> tuple[dict[str, str], dict[str, PredictionNote]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    notes = {entry["question"]: PredictionNote(entry["lesson"], entry["misconception"]) for entry in raw["predictions"]}
    unknown = {n.misconception for n in notes.values()} - set(raw["misconceptions"])
    if unknown:
        raise ValueError(f"{path.name}: predictions name misconceptions that are not listed: {sorted(unknown)}")
    return dict(raw["misconceptions"]), notes


MISCONCEPTIONS, NOTES = _load()


def note(question: str) -> PredictionNote:
    return NOTES.get(question, PredictionNote(None, None))


def questions_of(lesson: str) -> list[str]:
    """The questions lesson ``lesson`` ("00" ... "11") asks, in the order of the file."""
    return [question for question, item in NOTES.items() if item.lesson == lesson]
