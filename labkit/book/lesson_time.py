"""How long a lesson takes a learner, estimated from its notebook's cells (issue #35).

    minutes = markdown words / 180        reading, at 180 words a minute
            + 2 × predictions             each ``predict(`` call: read the question, think, lock in
            + 15 × exercises              each ``check_exercise(`` call: write the code, run the checker
            + the run time                what the first cell says the machine needs ("runs in about
                                          three minutes"), waited through while reading

The lesson's stated minutes are the first number of minutes its first cell gives, before what it
says about its run time ("**About 50 minutes to read, predict and write the recipe yourself. The
notebook runs in about a minute.**"). A stated time fits when it lies within ±20 % of the estimate.

What the estimate cannot see: code read slowly, cards shown by a deck, a widget played with, an
exercise that is not a ``check_exercise(`` call, a discussion in a room. It is a floor for a learner
who reads every word once; tests/notebooks/test_lesson_times.py names the notebooks it cannot judge.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_MINUTE = 180
MINUTES_PER_PREDICTION = 2
MINUTES_PER_EXERCISE = 15
TOLERANCE = 0.2          # a stated time fits within ±20 % of the estimate

MINUTES = re.compile(r"(\d+)(?:\s*[–-]\s*(\d+))?\s*min(?:utes)?\b")
RUN_TIME = re.compile(r"runs in ((?:well )?(?:under|about) (?:a|an|one|two|three|four|five|six|\d+) minutes?)")
PREDICTION = re.compile(r"\bpredict\(")
EXERCISE = re.compile(r"\bcheck_exercise\(")
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
# markup a reader does not read: HTML tags, the address of a markdown link, fences
MARKUP = re.compile(r"<[^>]+>|\]\([^)]*\)|```\w*")


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def words(markdown: str) -> int:
    """Words a reader reads: whitespace-separated pieces with a letter or digit, markup left out."""
    return sum(1 for piece in MARKUP.sub(" ", markdown).split() if re.search(r"\w", piece))


def run_minutes(first_cell: str) -> float:
    """The machine's run time the first cell states: "well under a minute" 0.5, "about three
    minutes" 3, "under a minute" 1; 0 when it says nothing."""
    found = RUN_TIME.search(" ".join(first_cell.split()))
    if not found:
        return 0.0
    phrase = found.group(1)
    count = phrase.split()[-2]
    number = float(NUMBER_WORDS.get(count, count if count.isdigit() else 1))
    return number / 2 if phrase.startswith("well under") else number


def stated_minutes(first_cell: str) -> int | None:
    """The lesson's minutes as its first cell states them, before its run time; None if none."""
    before_run_time = re.split(r"notebook runs|runs in", first_cell)[0]
    found = MINUTES.search(before_run_time)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class LessonTime:
    """One notebook's estimate, part by part, against the minutes it states."""
    notebook: str
    words: int
    predictions: int
    exercises: int
    run_minutes: float
    stated: int | None

    @property
    def reading_minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE

    @property
    def minutes(self) -> float:
        return (self.reading_minutes + MINUTES_PER_PREDICTION * self.predictions
                + MINUTES_PER_EXERCISE * self.exercises + self.run_minutes)

    @property
    def off_by(self) -> float | None:
        """(stated − estimate) / estimate: +0.5 states half as much again as the estimate."""
        return None if self.stated is None else (self.stated - self.minutes) / self.minutes

    @property
    def fits(self) -> bool:
        return self.off_by is not None and abs(self.off_by) <= TOLERANCE

    def row(self) -> dict:
        return {"notebook": self.notebook, "words": self.words, "reading": round(self.reading_minutes, 1),
                "predictions": self.predictions, "exercises": self.exercises, "runs": self.run_minutes,
                "estimate": round(self.minutes), "stated": self.stated,
                "off by": None if self.off_by is None else f"{self.off_by:+.0%}"}


def lesson_time(path: Path) -> LessonTime:
    """The estimate of the notebook at ``path``, read from its cells (nothing is run)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    markdown = [source(cell) for cell in cells if cell["cell_type"] == "markdown"]
    code = "\n".join(source(cell) for cell in cells if cell["cell_type"] == "code")
    first = source(cells[0]) if cells else ""
    return LessonTime(notebook=Path(path).stem, words=sum(words(text) for text in markdown),
                      predictions=len(PREDICTION.findall(code)), exercises=len(EXERCISE.findall(code)),
                      run_minutes=run_minutes(first), stated=stated_minutes(first))
