"""What a torture can be asked to do: ``check_request`` turns a request into the nemeses
and the store's fencing, or says in one line why it cannot be run: an unknown recipe
(``UnknownRecipe``, the registry's one check), and with ``TortureError`` an unknown
nemesis, a nemesis the lab cannot perform on that recipe (``expire`` on
Redis, which has only a TTL; ``clock`` on etcd, which cannot be stepped; a server-side
nemesis on anything but a ZooKeeper or etcd ensemble), no clients, no time, a ZooKeeper
session too short for a 3-member ensemble. Nothing is started before the request is checked.
"""
from __future__ import annotations

import math

from labkit.errors import LabError
from labkit.locks.registry import Recipe, check_holders, recipe_named
from labkit.servers.services.zookeeper import SERVER_LAG
from labkit.torture.schedule import NEMESES, SERVER_NEMESES


# ZooKeeperLock on an ensemble gives up SERVER_LAG (1.1 s here) before its session could
# expire, so it refuses sessions shorter than ~1.8 s (HolderDeadline.check_session_is_long_enough);
# 2 s leaves a holder some time to hold.
SHORTEST_ENSEMBLE_SESSION = 2.0
ZOOKEEPER_LOCK_RECIPES = ("zookeeper", "zookeeper-parent", "zookeeper-semaphore")  # built on ZooKeeperLock


class TortureError(LabError):
    """A torture that cannot be run as asked (the message says why, in one line)."""


def _unable(recipe: Recipe, nemesis: str) -> str | None:
    """Why ``nemesis`` cannot be done to ``recipe``, or None."""
    service = recipe.service
    if nemesis == "expire" and recipe.ttl_only:
        return f"expire needs a session or a lease to end, and a {recipe.name} lock has only a TTL: use pause or kill"
    if nemesis == "clock" and service == "etcd":
        return ("clock cannot step etcd: Go reads the clock through the vDSO, not libc (docs/CLOCKS.md); "
                "use a ZooKeeper or Redis recipe")
    if nemesis in SERVER_NEMESES and service not in ("zookeeper", "etcd"):
        return (f"{nemesis} cuts a member from a ZooKeeper or etcd ensemble, and a {recipe.name} lock has none: "
                "use a ZooKeeper or etcd recipe")
    return None


def check_request(recipe: Recipe | str, clients: int, duration: float, nemesis: str | list[str], fenced: bool | None,
                  trials: int, timeout: float = 2.0, hold: float = 0.1, holders: int = 1) -> tuple[list[str], bool]:
    """The nemeses as a list and whether the store fences, or UnknownRecipe / TortureError
    saying what is wrong. ``holders``: how many may hold a semaphore recipe at once (the
    verdict checks at most that many)."""
    recipe = recipe_named(recipe)
    try:
        check_holders(recipe, holders)
    except LabError as error:
        raise TortureError(error.message) from None
    names = [name.strip() for name in nemesis.split(",")] if isinstance(nemesis, str) else list(nemesis)
    names = [name for name in names if name]
    for name in names:
        if name not in NEMESES:
            raise TortureError(f"no nemesis named {name!r}; choose from {', '.join(NEMESES)}")
        problem = _unable(recipe, name)
        if problem:
            raise TortureError(problem)
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise TortureError(f"clients must be a whole number of at least 1 (got {clients!r})")
    for what, value in (("time", duration), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise TortureError(f"{what} must be a positive number of seconds (got {value!r})")
    ensemble = "leader" in names or any(name in SERVER_NEMESES for name in names)
    if ensemble and recipe.name in ZOOKEEPER_LOCK_RECIPES and timeout < SHORTEST_ENSEMBLE_SESSION:
        raise TortureError(f"timeout {timeout:g} s is too short for {','.join(names)} on a 3-member ZooKeeper "
                           f"ensemble: ZooKeeperLock gives up the servers' lag ({SERVER_LAG:g} s) early and refuses sessions "
                           f"under ~1.8 s; use --timeout {SHORTEST_ENSEMBLE_SESSION:g} or more")
    if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not 0 <= hold < math.inf:
        raise TortureError(f"hold must be zero or more seconds (got {hold!r})")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise TortureError(f"trials must be a whole number of at least 1 (got {trials!r})")
    if "partition" in names and "leader" in names and recipe.service == "redis":
        raise TortureError("partition and leader together on redis: each client reaches the primary through links "
                           "of its own, which a failover cannot re-point; run them in two tortures")
    if recipe.primitive == "semaphore":
        # N holders write at once with N different tokens: a store that refuses any token
        # below the highest it saw would refuse the older holders' legitimate writes
        if fenced:
            raise TortureError(f"a {recipe.name} admits {holders} holders at once, each with its own token, so a fenced "
                               "store (newest token only) would refuse legitimate writes; run it unfenced (--unfenced)")
        return names, False
    gives_tokens = recipe.gives_tokens
    if fenced and not gives_tokens:
        raise TortureError(f"a {recipe.name} lock gives no fencing token, so a fenced store would refuse every write; "
                           "run it unfenced (--unfenced)")
    return names, gives_tokens if fenced is None else fenced
