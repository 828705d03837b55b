"""When each injected fault was on: the fault events of a History turned into periods.

Faults are recorded in three shapes, and a timeline must show all of them alike:
- a network fault is two events, ``phase="start"`` and ``phase="end"``, sharing a
  ``fault`` id (the end is recorded by ``heal()``); a start without its end is still on;
- a pause of some ``seconds`` is one event: it lasts that long (SIGCONT comes by itself)
  unless its target's "resume" or "kill" comes first; a pause without ``seconds`` (the
  panel's pause button) lasts until its target's "resume" or "kill", or is still on;
- everything else (kill, restart, kill_leader, clock_step, expire_session, ...) is an
  instant: a period whose ``end`` equals its ``start``.

What can mislead: an ``end`` whose start was recorded in another History (``heal(history=h)``
after ``partition()`` without one) carries ``started``: the period is rebuilt from it. A
"heal" that found nothing to end is an instant.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.record.history import FAULT_CLIENT, History


@dataclass(frozen=True)
class FaultPeriod:
    what: str              # "partition", "pause", "kill", ... (labkit.vocabulary.FAULTS)
    target: str            # what the fault names: a node, a client, "zk1 | zk2,zk3", "every link"
    start: float           # wall-clock seconds, like the history's events
    end: float | None      # None: still on when the history ends

    @property
    def instant(self) -> bool:
        return self.end is not None and self.end == self.start


def fault_periods(history: History) -> list[FaultPeriod]:
    """Every fault of ``history`` as a period, in the order the faults began."""
    periods: list[FaultPeriod] = []
    open_by_id: dict[object, int] = {}       # fault id -> index in periods
    paused: dict[str, int] = {}              # target -> index of its latest pause
    for event in history.events(client=FAULT_CLIENT, kind="fault"):
        detail, at = event.detail, event.time
        what, target = str(detail.get("what", "fault")), str(detail.get("target", ""))
        phase, fault_id = detail.get("phase"), detail.get("fault")
        if phase == "start":
            open_by_id[fault_id] = len(periods)
            periods.append(FaultPeriod(what, target, at, None))
        elif phase == "end" and fault_id in open_by_id:
            index = open_by_id.pop(fault_id)
            periods[index] = FaultPeriod(what, target, periods[index].start, at)
        elif phase == "end" and detail.get("started") is not None:
            periods.append(FaultPeriod(what, target, float(detail["started"]), at))
        elif what == "pause":
            paused[target] = len(periods)
            periods.append(FaultPeriod(what, target, at, at + float(detail["seconds"]) if detail.get("seconds")
                                       else None))
        elif what == "resume":
            end_pause(periods, paused, target, at)
        else:
            if what == "kill":   # a frozen process SIGKILLed is frozen no more
                end_pause(periods, paused, target, at)
            periods.append(FaultPeriod(what, target, at, at))
    return sorted(periods, key=lambda period: period.start)


def end_pause(periods: list[FaultPeriod], paused: dict[str, int], target: str, at: float) -> None:
    """End ``target``'s pause at ``at`` if it is still on then (a timed pause whose SIGCONT
    came on time already shows its end)."""
    if target in paused and (periods[paused[target]].end is None or periods[paused[target]].end > at):
        index = paused.pop(target)
        periods[index] = FaultPeriod("pause", target, periods[index].start, at)

