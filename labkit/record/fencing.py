"""A fenced store: the protected resource that checks fencing tokens itself.

A lock alone cannot stop a holder that paused past its session timeout from writing
when it wakes up: it still believes it holds the lock. The resource must refuse it.
This store lives in Redis (separate from any lock) and every write runs one Lua
script, atomically: in fenced mode it rejects a token lower than the highest token it
has accepted, and it appends every attempt, accepted or not, to a write log stamped
with the server's own clock (``TIME``). That log is the resource's record of who wrote
when, which is what ``labkit.record.checker`` judges. Unfenced mode accepts everything, so a
lesson can show the damage first.

Where fencing stops protecting: the store rejects a stale token only after it has *seen*
the newer one. A new holder that reads before it writes has shown the store nothing yet,
so a late write of the old holder is still accepted, between the new holder's read and its
write, and the new holder's read-modify-write works on a value that is no longer there.
Close that gap by showing the token first: ``claim(token)`` as soon as the lock is
held (before touching the resource), or read through ``read(token)``, which
registers the token as it reads. Claims and fenced reads are not in the write log.

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

from labkit.errors import LabError

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

# KEYS: value, highest token.  ARGV: token, fenced ("1"/"0"). Registers the token unless a
# higher one was seen (fenced mode refuses it then); returns {accepted, value or false, highest}.
_CLAIM_SCRIPT = """
local token, fenced = tonumber(ARGV[1]), ARGV[2] == '1'
local highest_text = redis.call('GET', KEYS[2])
local highest = tonumber(highest_text)
if fenced and highest ~= nil and token < highest then
  return {0, false, highest_text}
end
if highest == nil or token > highest then
  redis.call('SET', KEYS[2], ARGV[1])
  highest_text = ARGV[1]
end
return {1, redis.call('GET', KEYS[1]), highest_text}
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


def _text(raw: bytes | str | None) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


def _check_token(token: int | None) -> None:
    if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
        raise ValueError(f"a fencing token is an integer (a czxid or a create revision), not {token!r}")


class StaleToken(LabError):
    """A fenced read with a token lower than one the store has already seen."""


class FencedStore:
    """``write(client, token, value) -> accepted``; ``claim(token)`` and ``read(token)``
    show a token before writing; ``writes()``, ``value()``
    (an unfenced read), ``reset()``."""

    def __init__(self, redis_client: redis.Redis, name: str, fenced: bool = True):
        if not name:
            raise ValueError("a FencedStore needs a name: every process that shares the store uses it")
        self.client = redis_client
        self.name = name
        self.fenced = fenced
        self._keys = [f"{name}:value", f"{name}:highest-token", f"{name}:writes"]
        self._write = redis_client.register_script(_WRITE_SCRIPT)
        self._claim = redis_client.register_script(_CLAIM_SCRIPT)

    def write(self, client: str, token: int | None, value: str) -> bool:
        """Write ``value`` as ``client`` holding ``token``; True if the store accepted it.
        In fenced mode a token lower than the highest accepted one is refused, and so is
        a write without a token (a Redis lock has none: see ``labkit.locks.redis_lock``).
        A token that is not an integer raises ValueError."""
        _check_token(token)
        token_text = "" if token is None else str(token)
        accepted = self._write(keys=self._keys, args=[client, token_text, str(value), "1" if self.fenced else "0"])
        return bool(accepted)

    def claim(self, token: int) -> bool:
        """Show the store ``token`` before using the resource: from now on it refuses any
        lower token. False (fenced mode) if a higher token was seen already: this holder's
        lock has passed on, so it must not use the resource."""
        accepted, _, _ = self._claim_token(token)
        return accepted

    def read(self, token: int) -> str | None:
        """A fenced read: the value, after registering ``token`` as ``claim`` does. Raises
        StaleToken (fenced mode) if a higher token was seen: do not act on this value."""
        accepted, value, highest = self._claim_token(token)
        if not accepted:
            raise StaleToken(f"a read of {self.name!r} with token {token}, but the store has seen token "
                             f"{highest}: the lock has passed on", "stop using the resource; acquire the lock again")
        return value

    def _claim_token(self, token: int) -> tuple[bool, str | None, str | None]:
        if token is None:
            raise ValueError("claim() and read() need a fencing token (an integer), not None")
        _check_token(token)
        accepted, value, highest = self._claim(keys=self._keys[:2], args=[str(token), "1" if self.fenced else "0"])
        return bool(accepted), _text(value), _text(highest)

    def writes(self) -> list[StoreWrite]:
        """Every write attempt, accepted or rejected, in the order the store ran them."""
        return [StoreWrite.from_log(raw) for raw in self.client.lrange(self._keys[2], 0, -1)]

    def value(self) -> str | None:
        """An unfenced read: the value now, whoever asks (it registers no token)."""
        return _text(self.client.get(self._keys[0]))

    def highest_token(self) -> int | None:
        raw = self.client.get(self._keys[1])
        return None if raw is None else int(raw)

    def reset(self) -> None:
        """Forget the value, the highest token and the write log."""
        self.client.delete(*self._keys)

    def __repr__(self) -> str:
        return f"FencedStore(name={self.name!r}, fenced={self.fenced})"
