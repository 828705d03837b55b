"""Plain words for what the panel shows: one sentence per event, who holds the lock, and
why it last changed hands. Pure functions of a History (no widgets, no servers), so that
the words can be tested alone and reused in a text-only notebook.

What can mislead: a killed client never says goodbye, so its hold stays open in the
history; and a paused client still believes it holds the lock after the server gave it
away. Both are named as such rather than hidden.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from labkit.record.events import Event
from labkit.record.history import FAULT_CLIENT, History

# ZooKeeper node names carry a 32-digit uuid before "-lock-": the sequence is what a
# learner needs to read
_SEQUENCE_NODE = re.compile(r"(lock-\d{10})$|(__lock__\d{10})$")

FAULT_WORDS = {
    "pause": "you paused {target} for {seconds} s (SIGSTOP: like a long garbage-collection pause)",
    "resume": "{target} runs again (SIGCONT)",
    "kill": "you killed {target} (SIGKILL: it could not say goodbye)",
    "expire_session": "you expired {target}'s ZooKeeper session: the server deletes its lock node now",
    "revoke_lease": "you revoked {target}'s etcd lease: its key is deleted with it",
    "stop_keepalive": "{target} stopped refreshing its lease: it expires after its TTL",
    "kill_leader": "you killed the leader {target}",
    "restart": "you restarted {target}",
    "clock_step": "you stepped {target}'s wall clock by {seconds} s (its monotonic clock did not move)",
    "clock_rate": "you changed how fast {target}'s wall clock runs",
    "clock_monotonic_rate": "you made {target}'s monotonic clock run {rate} times as fast: its timeouts end by it",
    "clock_reset": "{target}'s wall clock is back on the machine's, its monotonic clock at the machine's rate",
    "partition": "you partitioned the network: {target} can no longer reach each other",
    "isolate": "you cut {target} off from every other server and client",
    "cut": "you cut the link {target}",
    "delay": "you slowed {target}: {delay} ms more each way",
    "loss": "you made {target} lossy: {loss_percent} % of the chunks stall a retransmission timeout",
    "heal": "the network healed: every link is restored",
}

# what is back when a network fault ends (heal, or the panel's "slow link" clicked again)
FAULT_ENDS = {
    "partition": "the sides {target} reach each other again",
    "isolate": "{target} reaches the others again",
    "cut": "the link {target} carries bytes again",
    "delay": "no more added delay on {target}",
    "loss": "no more stalls on {target}",
}

# A fault is recorded when its call returns, and expiring a session takes a round trip or
# two: the victim may report "lost" before the fault is in the history.
FAULT_RECORD_SLACK = 1.0

# how the previous holder's hold ended, when a fault caused it: "after you ..."
FAULT_CAUSES = {
    "pause": "paused {target} for {seconds} s",
    "kill": "killed {target}",
    "expire_session": "expired {target}'s session",
    "revoke_lease": "revoked {target}'s lease",
    "stop_keepalive": "stopped {target}'s keep-alive",
    "isolate": "cut {target} off from the network",
}


def short_node(path: Any) -> str:
    """``/locks/x/9f..c1-lock-0000000007`` → ``lock-0000000007``; other paths → last part."""
    text = str(path or "")
    base = text.rstrip("/").rsplit("/", 1)[-1]
    match = _SEQUENCE_NODE.search(base)
    return match.group(0) if match else base or text


def _token_words(token: Any) -> str:
    return "no fencing token" if token is None else f"token {token}"


def describe_event(event: Event) -> str:
    """One plain sentence for one event, e.g. "client-3 woke: its predecessor
    lock-0000000007 was deleted"."""
    who, detail = event.client, event.detail
    kind = event.kind
    if kind == "fault":
        return _describe_fault(detail)
    if kind == "requested":
        return f"{who} asks for the lock"
    if kind == "created":
        if "sequence" in detail:
            return f"{who} joined the queue as {short_node(detail.get('node'))}"
        return f"{who} joined the queue: key {short_node(detail.get('key'))} (revision {detail.get('revision')})"
    if kind == "watch":
        if detail.get("what") == "parent":
            return f"{who} waits, watching every change under {detail.get('target')} (a parent watch)"
        return f"{who} waits, watching only its predecessor {short_node(detail.get('target'))}"
    if kind == "woke":
        reason, target = str(detail.get("reason", "")), short_node(detail.get("target"))
        if reason.startswith("deleted"):
            return f"{who} woke: its predecessor {target} was deleted"
        if reason == "child":
            return f"{who} woke: the queue under {detail.get('target')} changed (it re-checks whether it is first)"
        return f"{who} woke: {reason} ({target})"
    if kind == "acquired":
        return f"{who} now HOLDS the lock ({_token_words(detail.get('token'))})"
    if kind == "released":
        return f"{who} released the lock ({_token_words(detail.get('token'))})"
    if kind == "lost":
        return f"{who} LOST the lock: {detail.get('reason') or 'no reason given'}"
    if kind == "suspended":
        return f"{who} lost its connection: it may no longer hold the lock, so it must stop writing"
    if kind == "reconnected":
        return f"{who} reconnected and its session survived"
    if kind == "write":
        token = _token_words(detail.get("token"))
        if detail.get("accepted"):
            return f"{who} wrote to the store with {token}: accepted"
        return f"{who} wrote to the store with {token}: REJECTED (the store has seen a newer token, or none)"
    if kind == "timeout":
        return f"{who} gave up waiting after {_number(detail.get('waited'))} s"
    if kind == "error":
        return f"{who}: {detail.get('message', 'error')}"
    return f"{who}: {kind} {detail}"


def _describe_fault(detail: Mapping[str, Any]) -> str:
    """A network fault's start says what it breaks (and, for a cut-off lock client, when
    its session ends unless the network heals); its end says the links are back."""
    what, target = str(detail.get("what", "fault")), str(detail.get("target", "?"))
    if detail.get("phase") == "end" and what != "heal":
        lasted = f" (it lasted {_number(detail.get('seconds'))} s)" if detail.get("seconds") is not None else ""
        back = FAULT_ENDS.get(what, "the {what} of {target} is over").format(what=what, target=target)
        return f"{f'you stopped the {what}' if detail.get('undone') else 'the network healed'}: {back}{lasted}"
    if what == "isolate" and detail.get("role"):
        return (f"you cut the {detail['role']} {target} off from the rest: the others can elect a new one "
                "if they are a majority")
    if what == "isolate" and detail.get("expires_in") is not None:
        session = str(detail.get("session") or "session")
        return (f"{target} was cut off from the servers; its {session} expires in {_number(detail['expires_in'])} s "
                "unless the network heals first (its process keeps running)")
    words = FAULT_WORDS.get(what, "fault: {what} on {target}")
    loss = detail.get("loss")
    return words.format(what=what, target=target, seconds=_number(detail.get("seconds")),
                        rate=_number(detail.get("rate")), delay=f"{detail.get('delay', 0):g}",
                        loss_percent=f"{100 * float(loss):g}" if loss is not None else "?")


def _number(value: Any) -> str:
    try:
        return f"{float(value):g}" if float(value) >= 10 else f"{float(value):.1f}"
    except (TypeError, ValueError):
        return "?"


def log_lines(history: History, origin: float, limit: int = 12, skip_accepted_writes: bool = True) -> list[str]:
    """The last ``limit`` events as "  12.3 s  sentence" lines. Accepted writes (one per
    second per holder) are left out by default: the store's counts say how many."""
    events = [event for event in history.events()
              if not (skip_accepted_writes and event.kind == "write" and event.detail.get("accepted"))]
    return [f"{event.time - origin:7.1f} s  {describe_event(event)}" for event in events[-limit:]]


def open_holds(history: History) -> list:
    """Holds with no end yet, newest first: the holder, then clients that still believe."""
    return sorted((hold for hold in history.holds() if hold.end is None), key=lambda hold: -hold.start)


def current_holder(history: History, states: Mapping[str, str]) -> str | None:
    """The client that got the lock last and has not let go, or None. A dead client
    counts: the server keeps its lock until its session, lease or TTL ends."""
    holds = open_holds(history)
    return holds[0].client if holds else None


def holder_text(history: History, states: Mapping[str, str], now: float) -> str:
    """The big line: "Holder: client-2 (since 3.1 s, token 7)" plus what is odd about it."""
    holds = open_holds(history)
    if not holds:
        waiting = sorted(name for name, state in states.items() if state == "waiting")
        queue = f" ({len(waiting)} waiting: {', '.join(waiting)})" if waiting else ""
        return f"Holder: nobody{queue}"
    holder = holds[0]
    text = f"Holder: {holder.client} (since {max(0.0, now - holder.start):.1f} s, {_token_words(holder.token)})"
    state = states.get(holder.client, "")
    if state == "paused":
        text += " is PAUSED: it does no work, yet the server keeps its lock until its session or lease runs out"
    elif state == "dead":
        text += " is DEAD: the server frees its lock only when its session, lease or TTL runs out"
    believers = [hold for hold in holds[1:] if states.get(hold.client) not in ("dead", "stopped")]
    for hold in believers:
        text += (f"; {hold.client} ({states.get(hold.client, '?')}) still believes it holds the lock "
                 f"({_token_words(hold.token)})")
    return text


def why_text(history: History, origin: float) -> str:
    """"Why it changed hands: ..." from the last hand-off in the history."""
    acquisitions = history.events(kind="acquired")
    if not acquisitions:
        return "Why it changed hands: nobody has held the lock yet."
    last = acquisitions[-1]
    if len(acquisitions) == 1:
        return f"Why it changed hands: it has not yet; {last.client} got it first, when nobody held it."
    previous = acquisitions[-2]
    ending = _hold_end(history, previous, last)
    fault = _last_fault_on(history, previous.client, previous.time, ending.time if ending else last.time)
    cause = ""
    if fault is not None:
        words = FAULT_CAUSES[fault.detail["what"]]
        cause = (f"you {words.format(target=previous.client, seconds=_number(fault.detail.get('seconds')))}"
                 f" at {fault.time - origin:.1f} s")
    if ending is None and fault is not None and fault.detail.get("what") == "kill":
        how = (f"you killed {previous.client} at {fault.time - origin:.1f} s; the server freed its lock "
               "only when its session, lease or TTL ran out")
    elif ending is None:
        how = (f"{cause + ', so ' if cause else ''}the server gave the lock away (a session, lease or TTL "
               f"ran out) while {previous.client} still believed it held it")
    elif ending.kind == "released":
        how = f"{previous.client} released it" + (f" after {cause}" if cause else " (its work was done)")
    else:
        how = f"{previous.client} lost it ({ending.detail.get('reason') or 'no reason given'})"
        how += f" after {cause}" if cause else ""
    since = ending.time if ending is not None else (fault.time if fault is not None else previous.time)
    token = _token_words(last.detail.get("token"))
    if since > last.time:  # a paused holder learns of its loss only after it runs again
        return (f"Why it changed hands: {how}; but {last.client} already had the lock ({token}) "
                f"{since - last.time:.2f} s before {previous.client} found out.")
    woke = [event for event in history.events(client=last.client, kind="woke") if since - 0.05 <= event.time <= last.time]
    because = f" because it woke: {describe_event(woke[-1]).split(': ', 1)[-1]}" if woke else ""
    return f"Why it changed hands: {how}; {last.client} got it {last.time - since:.2f} s later ({token}){because}."


def _hold_end(history: History, acquired: Event, next_acquired: Event) -> Event | None:
    """The released/lost event that ended the hold begun by ``acquired``. A paused holder
    may report "lost" after the next holder already got the lock: that still counts."""
    for event in history.events(client=acquired.client, kind=("released", "lost", "acquired")):
        if event.time <= acquired.time:
            continue
        return None if event.kind == "acquired" else event
    return None


def _last_fault_on(history: History, client: str, start: float, end: float) -> Event | None:
    faults = [event for event in history.events(client=FAULT_CLIENT, kind="fault")
              if event.detail.get("target") == client and event.detail.get("what") in FAULT_CAUSES
              and event.detail.get("phase") != "end"
              and start <= event.time <= end + FAULT_RECORD_SLACK]
    return faults[-1] if faults else None


def store_counts(events: Iterable[Event]) -> tuple[int, int]:
    """(accepted, rejected) among ``write`` events."""
    accepted = rejected = 0
    for event in events:
        if event.kind == "write":
            if event.detail.get("accepted"):
                accepted += 1
            else:
                rejected += 1
    return accepted, rejected
