"""ResourceLog: a resource in this process that writes down every use, in the order it
happened -- the record ``check_at_most_holders`` and ``check_mutual_exclusion`` judge.

For experiments whose holders all run in this process (threads, or a peer process driven
from here, like the Curator peer): no server needed. Clients in processes of their own write
to a ``FencedStore`` instead, whose log is kept by Redis. A write is a record, never
refused: judging it is the checker's work.
"""
from __future__ import annotations

import threading
import time
from typing import Any


class ResourceLog:
    """``write(client, token, value)`` records a use; ``writes()`` returns them in order,
    as dicts with time (``time.monotonic()``), client, token, value and accepted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: list[dict[str, Any]] = []

    def write(self, client: str, token: int | None, value: str = "") -> bool:
        with self._lock:   # the order of the log is the order the writes ran in
            self._writes.append({"time": time.monotonic(), "client": client, "token": token,
                                 "value": value, "accepted": True})
        return True

    def writes(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._writes)

    def reset(self) -> None:
        with self._lock:
            self._writes.clear()
