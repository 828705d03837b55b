"""What an exercise checker found: one verdict per property, in plain words."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LabError

PROPERTIES = ("mutual exclusion", "FIFO order", "wakeups per release", "progress", "session handling")


class ExerciseError(LabError):
    """The learner's code does not have the shape the exercise asks for."""


def learner_function(code: Any, hint: str) -> None:
    """Raise ExerciseError unless the learner's ``code`` can be called; ``hint`` says the
    signature the checker calls it with."""
    if not callable(code):
        raise ExerciseError(f"{code!r} is not a function", hint=hint)


@dataclass
class PropertyVerdict:
    """One property: did it hold, and what happened (``words``)."""

    name: str
    held: bool
    words: str
    causes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """``passed``, a verdict per property (``report["mutual exclusion"].held``), the
    ``causes`` of a failure as short codes (``"herd"``, ``"no re-check"``,
    ``"not ephemeral"``, ``"ignores session loss"``, ``"stuck"``, ``"two holders"``,
    ``"not FIFO"``, ``"raised"``) and ``explain()``: what happened, in plain words."""

    exercise: str
    verdicts: dict[str, PropertyVerdict] = field(default_factory=dict)
    causes: list[str] = field(default_factory=list)
    scenarios: list[str] = field(default_factory=list)
    wakeups: list[int] = field(default_factory=list)
    seconds: float = 0.0
    properties: tuple[str, ...] = PROPERTIES     # what this exercise judges, in the order explained
    started: float = field(default_factory=time.monotonic, repr=False)
    untouched: bool = False     # the learner's untouched skeleton (labkit.practice.exercises.ladder)

    def stop_clock(self) -> None:
        """``seconds``: how long the checking took, from the report's creation until now."""
        self.seconds = time.monotonic() - self.started

    def judge(self, name: str, held: bool, words: str, cause: str | None = None) -> None:
        """Record a verdict; a failed one adds ``cause`` (once). A property judged twice
        fails if either judgement failed, and keeps the words of every failure."""
        if name not in self.properties:
            raise ValueError(f"unknown property {name!r}; use one of {self.properties}")
        earlier = self.verdicts.get(name)
        if earlier is None or (earlier.held and not held):
            self.verdicts[name] = PropertyVerdict(name, held, words, [cause] if cause and not held else [])
        elif not earlier.held and not held and cause not in earlier.causes:
            # a second, different cause of the same failure: say it too (the same cause once)
            earlier.words += " Also: " + words
            earlier.causes.append(cause)
        if not held and cause and cause not in self.causes:
            self.causes.append(cause)

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(verdict.held for verdict in self.verdicts.values())

    def __getitem__(self, name: str) -> PropertyVerdict:
        return self.verdicts[name]

    def explain(self) -> str:
        head = f"{self.exercise}: {'PASSED' if self.passed else 'FAILED'} ({self.seconds:.1f} s on real servers)"
        lines = [head, "what was run: " + "; ".join(self.scenarios)]
        for name in self.properties:
            verdict = self.verdicts.get(name)
            if verdict is not None:
                lines.append(f"  {'ok  ' if verdict.held else 'FAIL'} {name}: {verdict.words}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.explain())
