"""Lock client processes (``labkit.clients``) that queue in a known order and are served in
turn: the first acquires, each other queues only once the one before it is on the server,
then each releases as soon as it holds.

What can fail: ``TimeoutError`` when a hand-off does not come within its deadline (the
message gives every client's state); ``labkit.clients.ClientError`` when a client's command
fails.
"""
from __future__ import annotations

from labkit.clients import LockClient, LockClients
from labkit.progress import shows_progress
from labkit.timing import wait_for_value


@shows_progress("lining the clients up in the queue")
def queue_behind(clients: LockClients, timeout: float = 30.0) -> dict[str, int]:
    """The first client acquires; the others queue behind it one at a time, each only after
    the previous one's entry exists on the server, so the queue order is the client order.
    Returns {waiter name: id of its pending acquire command} (collect with ``wait_reply``)."""
    holder, *waiters = list(clients)
    holder.acquire(timeout=timeout)
    pending = {}
    for waiter in waiters:
        pending[waiter.name] = waiter.send("acquire", timeout=None)
        clients.history.wait_for("watch", client=waiter.name, timeout=timeout)
    return pending


def release_in_turn(clients: LockClients, pending: dict[str, int], timeout: float = 30.0) -> list[str]:
    """The holder releases; each waiter, once it holds, releases too. Returns the order in
    which the waiters got the lock. Raises TimeoutError if no waiter holds the lock within
    ``timeout`` seconds of the previous release, ClientError if a waiter's acquire failed."""
    holder, *waiters = list(clients)
    holder.release()
    served = []
    for _ in waiters:
        try:
            holding = wait_for_value(lambda: [w for w in waiters if w.name not in served and w.state == "holding"],
                                     "a waiter to get the lock", timeout)
        except TimeoutError as error:
            raise TimeoutError(f"{error}; client states: {clients.states()}") from None
        winner: LockClient = holding[0]
        winner.wait_reply(pending[winner.name], timeout)
        served.append(winner.name)
        winner.release()
    return served
