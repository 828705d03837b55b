"""Make a check-then-act race happen on purpose, between a learner's read and their write.

A race between GET and DEL (or GET and SET) is real but rare: the window is one round trip.
An exercise checker cannot wait for luck, so it hands the learner a client that runs a
hook right after the server has answered the learner's next GET of one key, before the
learner's next command leaves. The hook does what another client could have done in that
window (let the key expire, take the lock, write a newer token), on the real server.

Code that checks and acts in one server-side step (a Lua script, a transaction compare)
never sends that GET, so the hook never runs: the window does not exist.

What can fail: nothing here; the hook's own errors propagate into the learner's GET.
"""
from __future__ import annotations

from typing import Any, Callable

import redis


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RacingRedis(redis.Redis):
    """A redis-py client; ``after_next_get(key, hook)`` runs ``hook()`` once, right after
    the next GET of ``key`` through this client has been answered. ``raced`` lists the keys
    whose hook ran."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._hooks: dict[str, Callable[[], None]] = {}
        self.raced: list[str] = []

    def after_next_get(self, key: str, hook: Callable[[], None]) -> None:
        self._hooks[key] = hook

    def execute_command(self, *args: Any, **options: Any) -> Any:
        result = super().execute_command(*args, **options)
        if len(args) >= 2 and _text(args[0]).upper() == "GET":
            hook = self._hooks.pop(_text(args[1]), None)
            if hook is not None:
                self.raced.append(_text(args[1]))
                hook()
        return result
