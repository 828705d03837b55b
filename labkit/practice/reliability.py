"""How well the learner's confidence matched their hit rate: a reliability table and a Brier score.

A prediction made with a confidence (``predict(..., confidence=0.9)``, or 50 / 70 / 90 % in the
widget) says "I am this sure the answer is right". Over many predictions, the answers given at
90 % should be right about 9 times in 10; right only half the time is overconfidence. Two
numbers show it:

- the **reliability table**: per confidence level, how many predictions were made at it and
  the share of them that were right (the hit rate), beside the level itself;
- the **Brier score**: the mean of (confidence − outcome)², outcome 1 when right and 0 when
  wrong. 0 is perfect; always saying 50 % scores 0.25 whatever happens; 90 % sure and wrong
  costs 0.81 for that answer, so confident mistakes weigh most.

    reliability(entries)          # journal entries of kind "prediction", one per question
    print(reliability(entries).text())

Only predictions made (not skipped) with a confidence count; the rest are counted apart so that
the summary can say how many had none. What can fail: nothing raises; with no confidence given
the score is None and the text says how to give one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.vocabulary import GUIDE_COLOUR

OVERCONFIDENT_BY = 0.15   # a level whose hit rate is this far below it, over MIN_TO_JUDGE answers
MIN_TO_JUDGE = 3


@dataclass
class Level:
    """The predictions made at one confidence level."""
    confidence: float
    made: int = 0
    right: int = 0

    @property
    def hit_rate(self) -> float:
        return self.right / self.made if self.made else 0.0


@dataclass
class Reliability:
    levels: dict[float, Level] = field(default_factory=dict)
    squared_errors: list[float] = field(default_factory=list)
    without_confidence: int = 0      # made, but with no confidence said

    @property
    def rated(self) -> int:
        return len(self.squared_errors)

    @property
    def brier(self) -> float | None:
        """Mean (confidence − outcome)² over the rated predictions; None when there is none."""
        return sum(self.squared_errors) / self.rated if self.rated else None

    def overconfident(self) -> list[Level]:
        """Levels with enough answers whose hit rate falls short of the level by OVERCONFIDENT_BY or more."""
        return [level for level in self.rows()
                if level.made >= MIN_TO_JUDGE and level.confidence - level.hit_rate >= OVERCONFIDENT_BY]

    def rows(self) -> list[Level]:
        return [self.levels[confidence] for confidence in sorted(self.levels)]

    def text(self) -> str:
        if not self.rated:
            if not self.without_confidence:
                return ""
            return (f"None of your {self.without_confidence} guesses said how sure you were: pick 50, 70 or 90 % "
                    "before you lock in, and this table shows whether your confidence matches your hits.")
        lines = ["How sure you were, against how often you were right:",
                 "  sure   made  right  hit rate"]
        lines += [f"  {level.confidence * 100:>2.0f} %  {level.made:>5} {level.right:>6}  "
                  f"{level.hit_rate * 100:>6.0f} %" for level in self.rows()]
        rated = "1 rated guess" if self.rated == 1 else f"{self.rated} rated guesses"
        lines.append(f"Brier score {self.brier:.3f} over {rated} (0 is perfect; saying 50 % every time scores 0.250)")
        for level in self.overconfident():
            lines.append(f"Overconfident at {level.confidence * 100:.0f} %: right {level.hit_rate * 100:.0f} % of the "
                         "time. Before you say 'very sure', name the experiment that would prove you wrong.")
        if self.without_confidence:
            more = "1 more guess" if self.without_confidence == 1 else f"{self.without_confidence} more guesses"
            lines.append(f"{more} said no confidence, so they are not in this table.")
        return "\n".join(lines)


def reliability(entries: list[dict]) -> Reliability:
    """The reliability of ``entries``: prediction entries, one per question (skipped ones ignored)."""
    result = Reliability()
    for entry in entries:
        if entry.get("skipped"):
            continue
        confidence = entry.get("confidence")
        if confidence is None:
            result.without_confidence += 1
            continue
        right = bool(entry.get("correct"))
        level = result.levels.setdefault(float(confidence), Level(float(confidence)))
        level.made += 1
        level.right += right
        result.squared_errors.append((float(confidence) - right) ** 2)
    return result


def plot_reliability(result: Reliability, ax=None):
    """The reliability diagram: hit rate against confidence, one dot per level (its area the
    number of answers), beside the diagonal of perfect calibration. Returns the axes."""
    if ax is None:
        from matplotlib.figure import Figure
        ax = Figure(figsize=(4.2, 4.2)).add_subplot()
    ax.plot([0, 1], [0, 1], linestyle=":", color=GUIDE_COLOUR, label="as sure as right")
    rows = result.rows()
    if rows:
        ax.scatter([level.confidence for level in rows], [level.hit_rate for level in rows],
                   s=[40 + 30 * level.made for level in rows], zorder=3, label="your guesses")
        for level in rows:
            ax.annotate(f"{level.made}", (level.confidence, level.hit_rate), textcoords="offset points",
                        xytext=(8, -4))
    ax.set(xlim=(0, 1.02), ylim=(0, 1.02), xlabel="how sure you said you were", ylabel="share right",
           title="Confidence vs hits" + (f" (Brier {result.brier:.2f})" if result.brier is not None else ""))
    ax.legend(loc="upper left", fontsize="small")
    return ax
