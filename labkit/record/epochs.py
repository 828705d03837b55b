"""One leader per epoch: the verdict an election must earn, judged like the lock's.

Which evidence it trusts: the protected resource's own record first (``FencedStore.writes()``:
every write with the client and the epoch it carried, accepted or refused), and the
clients' "acquired" events when a History is given (the epoch each client was told it won).
An epoch is the fencing token of a leader's whole term (a create revision, a czxid, the
revision of a lease record's takeover): if two clients ever act under one epoch, the
resource cannot tell them apart and fencing protects nothing. So the check is that no
epoch is claimed by two clients, in either record. That two leaders of *different* epochs
acted at once is the mutual-exclusion check's business (``checker.py``): fencing refuses
the older one's writes, and the store's record shows it.

A killed client that rejoins under its old name is the same name with new epochs, so it
passes; what fails is one epoch under two names.
"""
from __future__ import annotations

from typing import Any, Iterable

from labkit.record.checker import Verdict
from labkit.record.history import History

CLAIM = "every epoch had one leader"


def check_one_leader_per_epoch(writes: Iterable[Any], history: History | None = None) -> Verdict:
    """Judge the store's write record (objects or dicts with client, token, accepted) and,
    if given, the History's "acquired" events: OK when no epoch (token) appears under two
    clients. Writes without a token are ignored: they carry no epoch to judge (in a fenced
    store they were refused anyway). An empty record is not OK: nothing was shown."""
    owners: dict[int, dict[str, str]] = {}   # epoch -> client -> where it was seen first
    counted = 0
    for write in writes:
        client, token = _field(write, "client"), _field(write, "token")
        if token is None:
            continue
        counted += 1
        verb = "wrote" if _field(write, "accepted") else "tried to write"
        owners.setdefault(int(token), {}).setdefault(str(client), f"{verb} at {float(_field(write, 'time')):.3f}")
    elected = 0
    if history is not None:
        for event in history.events(kind="acquired"):
            token = event.detail.get("token")
            if token is None:
                continue
            elected += 1
            owners.setdefault(int(token), {}).setdefault(event.client, f"was elected at {event.time:.3f}")
    if not counted and not elected:
        return Verdict(False, CLAIM, "no write and no election carried an epoch: nothing to judge; "
                                     "did the clients write to the store with their tokens?")
    shared = {epoch: clients for epoch, clients in owners.items() if len(clients) > 1}
    problems = [f"epoch {epoch}: " + "; ".join(f"{client} {seen}" for client, seen in sorted(clients.items()))
                for epoch, clients in sorted(shared.items())]
    summary = (f"{len(owners)} epoch(s) seen in {counted} write(s)"
               + (f" and {elected} election(s)" if history is not None else "") + "; "
               + (f"{len(shared)} epoch(s) claimed by two or more clients." if shared
                  else "each epoch belonged to one client."))
    return Verdict(not shared, CLAIM, summary, problems=problems)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name)
