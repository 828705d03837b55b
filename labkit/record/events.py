"""The event vocabulary shared by every lock recipe, client process and fault tool.

A recipe never prints: it calls an ``on_event(kind, **detail)`` callable, and whoever
created it decides where the event goes (a History in the notebook, a pipe from a
client process, or nowhere). Keeping the vocabulary in one place is what lets
``wakeups_per_release`` count the same thing for every recipe. The kinds and what
each means are in ``labkit.vocabulary.KINDS``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from labkit.vocabulary import KINDS



@dataclass(frozen=True)
class Event:
    """One thing that happened. ``time`` is wall-clock seconds (time.time()) so that
    events from several processes on one machine can be merged in order."""

    time: float
    client: str
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "client": self.client, "kind": self.kind, "detail": dict(self.detail)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Event":
        return cls(float(data["time"]), str(data["client"]), str(data["kind"]), dict(data.get("detail") or {}))


class EventSink(Protocol):
    def __call__(self, kind: str, **detail: Any) -> None: ...


def ignore_events(kind: str, **detail: Any) -> None:
    """The default sink: recipes work the same whether anyone listens or not."""


def sink_for(client: str, append: Callable[[Event], None]) -> EventSink:
    """An ``on_event`` callable that stamps events with the time and a client name."""

    def on_event(kind: str, **detail: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; known kinds: {', '.join(KINDS)}")
        append(Event(time.time(), client, kind, detail))

    return on_event
