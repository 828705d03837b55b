"""What every lock recipe of labkit shares beyond its protocol (docs/RECIPES.md): ``with
lock:`` acquires (waiting as long as it takes) and always releases on the way out.

What can fail: whatever the recipe's ``acquire`` and ``release`` raise. A release that
cannot reach its server leaves the lock held until the session or lease ends: the
recipe's own docstring says how long.
"""
from __future__ import annotations

from typing import Any, TypeVar

# typing.Self is Python 3.11+: a bound TypeVar says the same on 3.10 (Ubuntu 22.04's python3)
_Lock = TypeVar("_Lock", bound="HeldInside")


class HeldInside:
    """Mixin for a class with ``acquire()`` and ``release()``: the ``with`` statement."""

    def acquire(self, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Lock) -> _Lock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
