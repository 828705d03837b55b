"""Checkers that judge a run by evidence, and say in plain words what they found.

``check_mutual_exclusion`` trusts the protected resource, not the clients: a client
that paused past its session timeout still *believes* it holds the lock, so its own
events prove nothing. The fenced store's write log (``FencedStore.writes()``) is the
resource's record of who wrote when, in the order it executed the writes. Two holds
overlapped when the resource shows it:

* interleaving: a hold wrote, another hold wrote, then the first wrote again;
* stale token: a write accepted with a lower token than one already accepted (the
  older hold was still writing after the newer hold had written). Fencing exists to
  make the resource reject exactly these writes; rejected writes did no damage and are
  not overlaps.

Sequential holds never overlap however close their timestamps are, because the log's
order is the order the resource ran the writes, not a clock comparison.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from labkit.record.history import FAULT_CLIENT, History
from labkit.vocabulary import WAIT_ENDS


@dataclass(frozen=True)
class Write:
    """A write as the resource saw it; ``hold`` tells holds of one client apart."""

    time: float
    client: str
    token: int | None
    accepted: bool
    hold: Any

    def describe(self, origin: float) -> str:
        return f"{_hold_name(self.client, self.token, self.hold)} wrote at t={self.time - origin:.3f} s"


@dataclass(frozen=True)
class Overlap:
    """Two holds that were acting on the resource at the same time, with the evidence."""

    first_client: str
    first_token: int | None
    second_client: str
    second_token: int | None
    pattern: str  # "interleaved" or "stale token": what the resource's record shows
    evidence: tuple[Write, ...]

    @property
    def times(self) -> tuple[float, ...]:
        return tuple(write.time for write in self.evidence)

    def explain(self, origin: float) -> str:
        steps = ", then ".join(write.describe(origin) for write in self.evidence)
        if self.pattern == "interleaved":
            return f"{steps}: both holds were writing during the same period."
        return (f"{steps} with an older token: the resource accepted a write from a hold that "
                "had already been superseded (fencing would have rejected it).")


@dataclass
class Verdict:
    """``ok``, what was checked (``claim``), the evidence, and ``explain()``."""

    ok: bool
    claim: str
    summary: str
    overlaps: list[Overlap] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    origin: float = 0.0
    most: int | None = None  # check_at_most_holders: the most holds seen acting at once

    def explain(self) -> str:
        lines = [f"{'OK' if self.ok else 'VIOLATED'}: {self.claim}. {self.summary}"]
        lines += ["  - " + overlap.explain(self.origin) for overlap in self.overlaps]
        lines += ["  - " + problem for problem in self.problems]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Verdict {self.explain()}>"


def check_mutual_exclusion(history_or_writes: History | Iterable[Any], history: History | None = None) -> Verdict:
    """Judge mutual exclusion from the resource's write record.

    Accepts ``FencedStore.writes()`` (objects or dicts with time, client, token,
    accepted), or a History whose "write" events carry token and accepted. A write
    is assigned to a hold by its (client, token). Writes without a token (a Redis lock
    has none) are assigned to the hold their client had most recently acquired, which
    needs the clients' "acquired" events: pass ``history=`` (or a History). Without it,
    ValueError, because guessing would invent overlaps between a client's own holds.
    Prefer the store's log: its order is the order the writes really ran in, while
    "write" events are stamped by each client after the store replied. An empty record
    is not OK: nothing was written, so nothing was shown.
    """
    raw, history = _raw_writes(history_or_writes, history)
    writes = _assign_holds(raw, history)
    accepted = [write for write in writes if write.accepted]
    origin = writes[0].time if writes else 0.0
    overlaps = _interleaved(accepted) + _stale_tokens(accepted)
    overlaps = _unique_pairs(overlaps)
    holds = {(write.client, write.hold) for write in accepted}
    rejected = len(writes) - len(accepted)
    if not accepted:
        return Verdict(False, "no two holds wrote to the resource during the same period",
                       f"no accepted writes ({rejected} rejected): nothing to judge; did the clients write "
                       "to the store, and is it the store they wrote to?")
    summary = (f"{len(accepted)} accepted writes by {len(holds)} holds"
               + (f", {rejected} rejected by fencing" if rejected else "") + "; "
               + (f"{len(overlaps)} overlapping pair(s) of holds." if overlaps else
                  "each hold's writes form one block and tokens never went backwards."))
    return Verdict(not overlaps, "no two holds wrote to the resource during the same period", summary,
                   overlaps=overlaps, origin=origin)


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    return {name: getattr(item, name) for name in ("time", "client", "token", "accepted")}


def _raw_writes(history_or_writes: Any, history: History | None) -> tuple[list[dict], History | None]:
    """The writes as dicts, from a history's "write" events or from the store's record (then
    ``history``, if given, is the one that tells who held when)."""
    if isinstance(history_or_writes, History):
        return ([{"time": e.time, "client": e.client, "token": e.detail.get("token"),
                  "accepted": e.detail.get("accepted", True)} for e in history_or_writes.events(kind="write")],
                history_or_writes)
    return [_as_dict(item) for item in history_or_writes], history


def _assign_holds(raw: list[dict[str, Any]], history: History | None) -> list[Write]:
    acquired: dict[str, list[float]] = {}
    if history is not None:
        for event in history.events(kind="acquired"):
            acquired.setdefault(event.client, []).append(event.time)
    writes = []
    for item in raw:
        token = item.get("token")
        if token is not None:
            hold: Any = token
        elif history is None:
            raise ValueError(f"the write of {item['client']} at {item['time']:.6f} has no fencing token, so it "
                             "cannot be told apart from that client's other holds; pass history=<the History "
                             "with the clients' 'acquired' events>")
        else:
            # number of this client's acquires up to the write: 1 for its first hold, ...
            hold = f"hold {sum(1 for t in acquired.get(item['client'], []) if t <= item['time'])}"
        accepted = bool(item.get("accepted", True))
        writes.append(Write(float(item["time"]), str(item["client"]), token, accepted, hold))
    return writes


def _interleaved(accepted: list[Write]) -> list[Overlap]:
    positions: dict[tuple[str, Any], list[int]] = {}
    for index, write in enumerate(accepted):
        positions.setdefault((write.client, write.hold), []).append(index)
    overlaps = []
    for first, first_positions in positions.items():
        for second, second_positions in positions.items():
            if first == second or not first_positions[0] < second_positions[0] < first_positions[-1]:
                continue
            middle = second_positions[0]
            before = max(p for p in first_positions if p < middle)
            after = min(p for p in first_positions if p > middle)
            evidence = (accepted[before], accepted[middle], accepted[after])
            overlaps.append(_overlap(accepted[before], accepted[middle], "interleaved", evidence))
    return overlaps


def _stale_tokens(accepted: list[Write]) -> list[Overlap]:
    overlaps = []
    newest: Write | None = None
    for write in accepted:
        if write.token is None:
            continue
        if newest is not None and write.token < newest.token:
            overlaps.append(_overlap(write, newest, "stale token", (newest, write)))
        elif newest is None or write.token > newest.token:
            newest = write
    return overlaps


def _overlap(first: Write, second: Write, pattern: str, evidence: tuple[Write, ...]) -> Overlap:
    return Overlap(first.client, first.token, second.client, second.token, pattern, evidence)


def _unique_pairs(overlaps: list[Overlap]) -> list[Overlap]:
    seen, unique = set(), []
    for overlap in overlaps:
        pair = frozenset((write.client, write.hold) for write in overlap.evidence)
        if pair not in seen:
            seen.add(pair)
            unique.append(overlap)
    return unique


def _hold_name(client: str, token: int | None, hold: Any) -> str:
    return f"{client} (token {token})" if token is not None else f"{client} ({hold})"


def check_fifo(history: History) -> Verdict:
    """Waiters are served in the order their queue entries were created.

    Each "acquired" is matched to its client's latest "created" before it; entries rank
    by their "sequence" or "revision" detail (else by time). Violated if an entry is
    served before an older one, or an older entry is passed over while its client was
    still waiting (no timeout/lost/error/release, no fault aimed at it, no newer entry).
    Raises ValueError for a history without "created" events (a Redis lock has no queue).
    """
    created = history.events(kind="created")
    if not created:
        raise ValueError("this history has no 'created' events, so there is no queue order to compare with; "
                         "FIFO applies to ZooKeeper and etcd recipes, not to a Redis lock")
    origin = history.events()[0].time
    everything = history.events()
    times = [event.time for event in everything]
    entries = [(_rank(event), event, _stopped_waiting(everything, times, event)) for event in created]
    served: list[tuple[Any, Any]] = []  # (rank, acquired event)
    problems = []
    for acquired in history.events(kind="acquired"):
        mine = [rank for rank, event, _ in entries if event.client == acquired.client and event.time <= acquired.time]
        if not mine:
            problems.append(f"{acquired.client} acquired at t={acquired.time - origin:.3f} s without a 'created' event")
            continue
        rank = mine[-1]
        if served and rank < served[-1][0]:
            problems.append(f"{acquired.client} (entry {rank}) was served after {served[-1][1].client} "
                            f"(entry {served[-1][0]}), which was created later")
        problems += [f"{acquired.client} (entry {rank}) acquired at t={acquired.time - origin:.3f} s "
                     f"while {other.client} (entry {other_rank}, older) was still waiting"
                     for other_rank, other, stopped in entries
                     if other_rank < rank and other.client != acquired.client
                     and other.time < acquired.time < stopped]
        served.append((rank, acquired))
    summary = f"{len(served)} acquisitions of {len(entries)} queue entries" + \
        ("" if problems else ", served in creation order.")
    return Verdict(not problems, "waiters acquire in the order their entries were created", summary,
                   problems=problems, origin=origin)


def _rank(created: Any) -> Any:
    for key in ("sequence", "revision"):
        if isinstance(created.detail.get(key), int):
            return created.detail[key]
    return created.time


def _stopped_waiting(events: list[Any], times: list[float], entry: Any) -> float:
    """When ``entry``'s client acquired or gave up on it (infinity: never in this history).
    A fault aimed at the client (kill, expire_session, ...) counts as giving up."""
    for event in events[bisect.bisect_right(times, entry.time):]:
        if event.client == entry.client and event.kind in ("created", *WAIT_ENDS):
            return event.time
        if event.client == FAULT_CLIENT and event.detail.get("target") == entry.client:
            return event.time
    return float("inf")


def check_wakeups(history: History, expected_per_release: int | Sequence[int] = 1,
                  clock_slack: float = 0.01) -> Verdict:
    """Each hand-off woke exactly the expected number of waiters (see
    ``History.wakeups_per_release`` for what is counted). ``expected_per_release`` is
    one number for every hand-off, or one per hand-off (a herd wakes all who remain)."""
    counts = history.wakeups_per_release(clock_slack=clock_slack)
    expected = ([expected_per_release] * len(counts) if isinstance(expected_per_release, int)
                else list(expected_per_release))
    problems = []
    if not counts:
        problems.append("no hand-off (a release followed by another client's acquire): nothing to judge")
    elif len(expected) != len(counts):
        problems.append(f"expected {len(expected)} hand-offs, the history has {len(counts)}")
    problems += [f"hand-off {number}: {count} waiter(s) woke, expected {want}"
                 for number, (count, want) in enumerate(zip(counts, expected), start=1) if count != want]
    mean = sum(counts) / len(counts) if counts else 0.0
    summary = f"{len(counts)} hand-offs, {sum(counts)} wakeups, {mean:.2f} per release."
    return Verdict(not problems, "each release woke the expected number of waiters", summary, problems=problems)


def most_holders_at_once(writes: list[Write]) -> tuple[int, int, dict[tuple[str, Any], list[int]]]:
    """(the most holds acting at once, the index in ``writes`` where that was first seen,
    each hold's span: (client, hold) -> [index of its first write, of its last]) for the
    accepted writes of a record, in the order the resource ran them."""
    spans: dict[tuple[str, Any], list[int]] = {}
    for index, write in enumerate(writes):
        spans.setdefault((write.client, write.hold), [index, index])[1] = index
    most, most_at = 0, 0
    for index, acting in enumerate(_acting_counts(spans, len(writes))):
        if acting > most:
            most, most_at = acting, index
    return most, most_at, spans


def _acting_counts(spans: dict[tuple[str, Any], list[int]], count: int) -> list[int]:
    """At each of ``count`` writes: the holds begun at or before it, minus those whose last
    write came before it."""
    starts = sorted(first for first, _ in spans.values())
    ends = sorted(last for _, last in spans.values())
    return [bisect.bisect_right(starts, index) - bisect.bisect_left(ends, index) for index in range(count)]


def holds_acting(history_or_writes: History | Iterable[Any], history: History | None = None
                 ) -> tuple[list[tuple[float, int]], dict[tuple[str, Any], tuple[float, float]]]:
    """What ``check_at_most_holders`` counts, for a graph of it: (time, holds acting) at each
    accepted write of the resource's record, in its order (the largest count is the
    Verdict's ``most``), and each hold's span, (client, hold) -> (time of its first
    accepted write, of its last)."""
    raw, history = _raw_writes(history_or_writes, history)
    accepted = [write for write in _assign_holds(raw, history) if write.accepted]
    _, _, spans = most_holders_at_once(accepted)
    counts = _acting_counts(spans, len(accepted))
    return ([(write.time, acting) for write, acting in zip(accepted, counts)],
            {hold: (accepted[first].time, accepted[last].time) for hold, (first, last) in spans.items()})


def check_at_most_holders(history_or_writes: History | Iterable[Any], limit: int,
                          history: History | None = None) -> Verdict:
    """Judge a counting semaphore from the resource's write record: never more than
    ``limit`` holds acting on the resource at once.

    The same evidence as ``check_mutual_exclusion`` (the store's log, in the order the
    resource ran the writes; writes assigned to holds by client and token) and the same
    reasoning: a hold was acting on the resource from its first accepted write to its last.
    At every write of the log the checker counts the holds whose span covers it; more than
    ``limit`` is a violation, shown with the holds involved. A holder killed before its last
    write stops counting at the last write it made: the resource saw nothing of it after.
    With ``limit=1`` this is mutual exclusion without the token order (a semaphore's N
    holders carry N different tokens, so a lower token after a higher one proves nothing).
    ``Verdict.most`` is the most holds seen acting at once.
    """
    raw, history = _raw_writes(history_or_writes, history)
    claim = f"at most {limit} hold(s) wrote to the resource during the same period"
    accepted = [write for write in _assign_holds(raw, history) if write.accepted]
    if not accepted:
        return Verdict(False, claim, "no accepted writes: nothing to judge; did the clients write to the store?")
    most, most_at, spans = most_holders_at_once(accepted)
    origin = accepted[0].time
    summary = (f"{len(accepted)} accepted writes by {len(spans)} holds; at most {most} acting at once"
               + (f" (limit {limit})." if most <= limit else f", above the limit of {limit}."))
    problems = []
    if most > limit:
        names = [_hold_name(client, accepted[first].token, hold) for (client, hold), (first, last) in spans.items()
                 if first <= most_at <= last]
        problems.append(f"at t={accepted[most_at].time - origin:.3f} s these {most} holds were all between their "
                        f"first and last write: {', '.join(names)}")
    return Verdict(most <= limit, claim, summary, problems=problems, origin=origin, most=most)
