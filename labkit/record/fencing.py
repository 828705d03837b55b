"""A fenced store: the protected resource that checks fencing tokens itself.

A lock alone cannot stop a holder that paused past its session timeout from writing
when it wakes up: it still believes it holds the lock. The resource must refuse it.
This store lives in Redis (separate from any lock) and every write runs one Lua
script, atomically: in fenced mode it rejects a token lower than the highest token it
has accepted, and it appends every attempt, accepted or not, to a write log stamped
with the server's own clock (``TIME``). That log is the resource's record of who wrote
when, which is what ``labkit.record.checker`` judges. Unfenced mode accepts everything, so a
lesson can show the damage first.

What can fail: redis.ConnectionError / TimeoutError if the Redis server is down or
paused (the write may or may not have happened; read ``writes()`` to find out).
Several processes may each create a FencedStore on the same name: they share it.
Give all of them the same ``fenced`` setting; each write records which mode it used.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

# KEYS: value, highest token, write log.  ARGV: client, token ("" = none), value, fenced ("1"/"0")
_WRITE_SCRIPT = """
local now = redis.call('TIME')
local client, token, value, fenced = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'
local highest_text = redis.call('GET', KEYS[2])
local highest = tonumber(highest_text)
local accepted, reason = true, 'accepted'
if fenced and token == nil then
  accepted, reason = false, 'no fencing token'
elseif fenced and highest ~= nil and token < highest then
  accepted, reason = false, 'token ' .. ARGV[2] .. ' < highest seen ' .. highest_text
end
if accepted then
  redis.call('SET', KEYS[1], value)
  if token ~= nil and (highest == nil or token > highest) then
    redis.call('SET', KEYS[2], ARGV[2])
  end
end
-- seconds and microseconds stay separate integers: cjson prints only 14 digits
redis.call('RPUSH', KEYS[3], cjson.encode({seconds = tonumber(now[1]), microseconds = tonumber(now[2]),
  client = client, token = ARGV[2], value = value, accepted = accepted, fenced = fenced,
  highest = highest_text or '', reason = reason}))
if accepted then return 1 else return 0 end
"""


@dataclass(frozen=True)
class StoreWrite:
    """One write attempt as the store recorded it. ``time`` is the Redis server's clock
    (seconds since the epoch); ``highest_before`` is the highest token it had accepted."""

    time: float
    client: str
    token: int | None
    accepted: bool
    value: str
    fenced: bool
    highest_before: int | None
    reason: str

    @classmethod
    def from_log(cls, raw: bytes | str) -> "StoreWrite":
        entry: dict[str, Any] = json.loads(raw)
        return cls(time=int(entry["seconds"]) + int(entry["microseconds"]) / 1e6,
                   client=entry["client"], token=_int_or_none(entry["token"]),
                   accepted=bool(entry["accepted"]), value=entry["value"], fenced=bool(entry["fenced"]),
                   highest_before=_int_or_none(entry["highest"]), reason=entry["reason"])


def _int_or_none(text: str) -> int | None:
    return int(text) if text not in ("", None) else None


class FencedStore:
    """``write(client, token, value) -> accepted``; ``writes()``, ``value()``, ``reset()``."""

    def __init__(self, redis_client: redis.Redis, name: str, fenced: bool = True):
        if not name:
            raise ValueError("a FencedStore needs a name: every process that shares the store uses it")
        self.client = redis_client
        self.name = name
        self.fenced = fenced
        self._keys = [f"{name}:value", f"{name}:highest-token", f"{name}:writes"]
        self._write = redis_client.register_script(_WRITE_SCRIPT)

    def write(self, client: str, token: int | None, value: str) -> bool:
        """Write ``value`` as ``client`` holding ``token``; True if the store accepted it.
        In fenced mode a token lower than the highest accepted one is refused, and so is
        a write without a token (a Redis lock has none: see ``labkit.locks.redis_lock``).
        A token that is not an integer raises ValueError."""
        if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
            raise ValueError(f"a fencing token is an integer (sequence number or revision), not {token!r}")
        token_text = "" if token is None else str(token)
        accepted = self._write(keys=self._keys, args=[client, token_text, str(value), "1" if self.fenced else "0"])
        return bool(accepted)

    def writes(self) -> list[StoreWrite]:
        """Every write attempt, accepted or rejected, in the order the store ran them."""
        return [StoreWrite.from_log(raw) for raw in self.client.lrange(self._keys[2], 0, -1)]

    def value(self) -> str | None:
        raw = self.client.get(self._keys[0])
        return raw.decode() if isinstance(raw, bytes) else raw

    def highest_token(self) -> int | None:
        raw = self.client.get(self._keys[1])
        return None if raw is None else int(raw)

    def reset(self) -> None:
        """Forget the value, the highest token and the write log."""
        self.client.delete(*self._keys)

    def __repr__(self) -> str:
        return f"FencedStore(name={self.name!r}, fenced={self.fenced})"
