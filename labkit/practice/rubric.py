"""A scenario's rubric: key points scored by level, red flags that subtract, and the debrief.

Each rubric item is one key point of the model answer, on one axis (requirements and
communication, correctness, failures and recovery, operations and capacity), and says what
a mid, a senior and a staff answer to it contain. The learner (or the partner who played
the interviewer) picks the level the answer reached on each item: mid 1 point, senior 2,
staff 3, not covered 0. A red flag is something said that costs points whatever else the
answer covered ("exactly once", Redlock for payments, a timestamp as the token); the
debrief names each one raised, with why it is wrong.

    result = grade(scenario.rubric, scenario.red_flags, {0: "senior", 3: "staff"}, red_flags=[1])
    print(debrief(scenario.rubric, scenario.red_flags, result))

What can fail: ``LabError`` for an item or flag number out of range, or a level that is not
one of ``LEVELS``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from labkit.errors import LabError

# What each level of an answer scores on one rubric item; an item not covered scores 0.
LEVELS = {"mid": 1, "senior": 2, "staff": 3}
# Every scenario has at least one item on the first axis.
COMMUNICATION = "requirements and communication"
AXES = (COMMUNICATION, "correctness", "failures and recovery", "operations and capacity")


@dataclass(frozen=True)
class RubricItem:
    """One key point of the model answer (``point``), on one axis, with what a mid, a senior
    and a staff answer to it contain (``levels``, a dict keyed by the names in LEVELS)."""
    axis: str
    point: str
    levels: Mapping[str, str]

    @property
    def points(self) -> int:
        return max(LEVELS.values())


@dataclass(frozen=True)
class RedFlag:
    """A thing said that costs ``points`` whatever else the answer covers, and ``why``."""
    flag: str
    why: str
    points: int


def item_from(raw: dict, source: str) -> RubricItem:
    if raw.get("axis") not in AXES or set(raw.get("levels", {})) != set(LEVELS):
        raise LabError(f"rubric item {raw.get('point', raw)!r} needs an axis of {AXES} and the levels {list(LEVELS)}",
                       hint=f"fix {source}")
    return RubricItem(raw["axis"], raw["point"], dict(raw["levels"]))


def rubric_text(rubric: Sequence[RubricItem], red_flags: Sequence[RedFlag]) -> str:
    most = sum(item.points for item in rubric)
    lines = [f"Rubric ({most} points; on each item mid {LEVELS['mid']}, senior {LEVELS['senior']}, "
             f"staff {LEVELS['staff']}):"]
    for number, item in enumerate(rubric):
        lines.append(f"  [{number}] ({item.axis}) {item.point}")
        lines += [f"        {level:>6}: {item.levels[level]}" for level in LEVELS]
    lines.append("Red flags (each one said subtracts its points and is named in the debrief):")
    lines += [f"  [{number}] -{flag.points} pt  {flag.flag}" for number, flag in enumerate(red_flags)]
    return "\n".join(lines)


def _levels_by_number(rubric: Sequence[RubricItem], levels) -> dict[int, str]:
    """{item number: level} from a dict, or from a list of levels (None or "" for not covered)."""
    pairs = levels.items() if isinstance(levels, Mapping) else enumerate(levels)
    chosen = {int(number): level for number, level in pairs if level}
    for number, level in chosen.items():
        if not 0 <= number < len(rubric):
            raise LabError(f"rubric items are numbered 0 to {len(rubric) - 1}; got {number}")
        if level not in LEVELS:
            raise LabError(f"{level!r} is not a level", hint=f"one of {list(LEVELS)}, or leave the item out")
    return chosen


def grade(rubric: Sequence[RubricItem], red_flags: Sequence[RedFlag], levels,
          flags_raised: Iterable[int] = ()) -> dict:
    """The score of one answer: ``levels`` says the level reached per item, ``flags_raised``
    the numbers of the red flags said. Points never go below 0."""
    chosen = _levels_by_number(rubric, levels)
    raised = sorted(set(flags_raised))
    if any(not 0 <= number < len(red_flags) for number in raised):
        raise LabError(f"red flags are numbered 0 to {len(red_flags) - 1}; got {raised}")
    axes = {axis: [0, 0] for axis in AXES if any(item.axis == axis for item in rubric)}
    for number, item in enumerate(rubric):
        axes[item.axis][0] += LEVELS.get(chosen.get(number, ""), 0)
        axes[item.axis][1] += item.points
    earned = sum(got for got, _ in axes.values())
    penalty = sum(red_flags[number].points for number in raised)
    return {"points": max(0, earned - penalty), "max_points": sum(item.points for item in rubric),
            "earned": earned, "penalty": penalty, "levels": {str(n): level for n, level in sorted(chosen.items())},
            "red_flags": [red_flags[number].flag for number in raised],
            "axes": {axis: {"points": got, "max_points": most} for axis, (got, most) in axes.items()}}


def missed_points(rubric: Sequence[RubricItem], result: dict) -> list[tuple[RubricItem, str | None]]:
    """(item, level reached or None) for every key point the answer did not reach at staff level."""
    reached = result["levels"]
    return [(item, reached.get(str(number))) for number, item in enumerate(rubric)
            if reached.get(str(number)) != "staff"]


def debrief(rubric: Sequence[RubricItem], red_flags: Sequence[RedFlag], result: dict) -> str:
    """The score per axis, the red flags raised and why, and the model answer's key points missed."""
    lines = [f"Score: {result['points']}/{result['max_points']} ({result['earned']} earned"
             + (f", -{result['penalty']} for red flags)" if result["penalty"] else ")")]
    lines += [f"  {axis}: {score['points']}/{score['max_points']}" for axis, score in result["axes"].items()]
    why = {flag.flag: flag for flag in red_flags}
    if result["red_flags"]:
        lines.append("Red flags raised:")
        lines += [f"  - {name} (-{why[name].points}): {why[name].why}" for name in result["red_flags"]]
    missed = missed_points(rubric, result)
    if missed:
        lines.append("Key points of the model answer you missed or did not take to staff level:")
        for item, level in missed:
            lines.append(f"  - {item.point} [{item.axis}; yours: {level or 'not covered'}]")
            lines.append(f"      staff: {item.levels['staff']}")
    else:
        lines.append("Every key point reached staff level.")
    return "\n".join(lines)
