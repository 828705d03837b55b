"""Calibration: the prediction journal read back, per lesson and for the course.

How many predictions were asked, how many the learner made (locked a guess in), how many
were right, how many were skipped, and which misconceptions the wrong answers stand for,
most frequent first. A misconception that comes back in two or more wrong answers is one to
work on: the summary names it with its sentence from ``predictions.json``. Where the learner
said how sure they were, the summary adds the reliability table and the Brier score
(``labkit.practice.reliability``), per lesson and for the course.

How the journal is counted. Each question counts once, by its newest answer: a guess locked
in on an earlier run stays counted when a later "Run All" skips the same question; a question
never answered counts as skipped, neither right nor wrong.

    your_predictions("02")        # the "your predictions" cell at the end of lesson 02
    course_calibration()          # notebook 11's summary: every lesson, then the course

What can fail: nothing raises for an empty or partial journal (every count is then 0); a
corrupt journal file is set aside by ``Journal`` with a warning.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from labkit.practice.journal import Journal
from labkit.practice.predict import REVEALED
from labkit.practice.prediction_notes import MISCONCEPTIONS, NOTES
from labkit.practice.reliability import Reliability, reliability

# every lesson that asks a prediction, from predictions.json (a fixed list once left a lesson out)
LESSONS = tuple(sorted({item.lesson for item in NOTES.values() if item.lesson}))
RECUR = 2     # wrong answers on one misconception that make it "recurring"


@dataclass
class Calibration:
    """The counts for one lesson (``lesson``) or for the course (``lesson`` None)."""
    lesson: str | None
    asked: int = 0
    made: int = 0
    right: int = 0
    skipped: int = 0
    wrong_by_misconception: Counter = field(default_factory=Counter)
    questions: set = field(default_factory=set)
    missing: list = field(default_factory=list)    # see your_predictions
    reliability: Reliability = field(default_factory=Reliability)

    @property
    def wrong(self) -> int:
        return self.made - self.right

    def recurring(self, at_least: int = RECUR) -> list[tuple[str, int]]:
        """(misconception id, wrong answers) for those at or above ``at_least``, most first."""
        return [(name, count) for name, count in self.wrong_by_misconception.most_common() if count >= at_least]

    def line(self) -> str:
        share = f" ({100 * self.right / self.made:.0f} % of those made)" if self.made else ""
        return (f"{self.asked} asked, {self.made} made, {self.right} right{share}, {self.wrong} wrong, "
                f"{self.skipped} skipped")

    def text(self) -> str:
        where = "the course" if self.lesson is None else f"lesson {self.lesson}"
        lines = [f"Your predictions in {where}: {self.line()}."]
        if self.wrong_by_misconception:
            lines.append("Wrong answers, by the misconception they stand for:")
            lines += [f"  {count} x {name}: {MISCONCEPTIONS.get(name, 'not named')}"
                      for name, count in self.wrong_by_misconception.most_common()]
        elif self.made:
            lines.append("No wrong answer yet.")
        if self.reliability.text():
            lines.append(self.reliability.text())
        if self.skipped:
            lines.append("Skipped ones count neither way: run the lesson again and lock a guess in before each "
                         "experiment.")
        return "\n".join(lines)


def newest_per_question(entries: list[dict]) -> list[dict]:
    """One entry per question: its newest answered one, else its newest (skipped) one."""
    chosen: dict[str, dict] = {}
    for entry in entries:                       # the journal is oldest first
        question = entry.get("question")
        earlier = chosen.get(question)
        if earlier is None or not entry.get("skipped") or earlier.get("skipped"):
            chosen[question] = entry
    return list(chosen.values())


def count(entries: list[dict], lesson: str | None = None) -> Calibration:
    """Calibration of ``entries`` (journal entries of kind "prediction"), for one lesson or all."""
    result = Calibration(lesson)
    chosen = newest_per_question([e for e in entries if lesson is None or e.get("lesson") == lesson])
    result.reliability = reliability(chosen)
    for entry in chosen:
        result.asked += 1
        result.questions.add(entry.get("question"))
        if entry.get("skipped"):
            result.skipped += 1
            continue
        result.made += 1
        if entry.get("correct"):
            result.right += 1
        else:
            result.wrong_by_misconception[entry.get("misconception") or "not named"] += 1
    return result


def calibration(lesson: str | None = None, journal: Journal | None = None) -> Calibration:
    return count((journal or Journal()).entries("prediction"), lesson)


def your_predictions(lesson: str, journal: Journal | None = None) -> Calibration:
    """Print and return lesson ``lesson``'s calibration. ``missing`` on the result lists the
    questions this kernel revealed for the lesson that the journal does not hold (a lesson's
    summary cell asserts it is empty)."""
    result = calibration(lesson, journal)
    result.missing = sorted({p.question for p in REVEALED if p.lesson == lesson} - result.questions)
    print(result.text())
    return result


def course_calibration(journal: Journal | None = None) -> dict[str | None, Calibration]:
    """Print every lesson's line, the course's, and the misconceptions that recur; return
    {lesson: Calibration, None: the course}."""
    entries = (journal or Journal()).entries("prediction")
    found = {lesson: count(entries, lesson) for lesson in LESSONS}
    found[None] = course = count(entries)
    print("lesson  " + "asked  made  right  skipped  Brier")
    for lesson in LESSONS:
        row = found[lesson]
        print(f"  {lesson}    {row.asked:>5} {row.made:>5} {row.right:>6} {row.skipped:>8}  {_brier(row)}")
    print(f"course  {course.asked:>5} {course.made:>5} {course.right:>6} {course.skipped:>8}  {_brier(course)}")
    if course.reliability.text():
        print("\n" + course.reliability.text())
    recurring = course.recurring()
    if recurring:
        print(f"\nMisconceptions behind {RECUR} or more of your wrong answers (work on these first):")
        for name, wrong in recurring:
            lessons = sorted({e.get("lesson") for e in newest_per_question(entries)
                              if e.get("misconception") == name and not e.get("skipped") and not e.get("correct")})
            print(f"  {wrong} x {name} (lessons {', '.join(map(str, lessons))}): {MISCONCEPTIONS.get(name, '')}")
    elif course.made:
        print("\nNo misconception is behind two or more of your wrong answers.")
    else:
        print("\nNo prediction made yet: lock a guess in before each experiment, and this table fills up.")
    return found


def _brier(row: Calibration) -> str:
    score = row.reliability.brier
    return "    -" if score is None else f"{score:.3f}"
