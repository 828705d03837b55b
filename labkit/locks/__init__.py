"""Lock recipes on real servers: ZooKeeper, etcd and Redis, under one event vocabulary."""
from labkit.locks.errors import LockError, LockTimeout, Locked, SessionExpired

__all__ = ["LockError", "LockTimeout", "Locked", "SessionExpired"]
