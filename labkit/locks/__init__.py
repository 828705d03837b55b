"""Lock recipes on real servers: ZooKeeper, etcd and Redis, under one event vocabulary."""
from labkit.locks.errors import InvalidSemaphoreSize, LockError, LockTimeout, Locked, PathInUse, SessionExpired

__all__ = ["InvalidSemaphoreSize", "LockError", "LockTimeout", "Locked", "PathInUse", "SessionExpired"]
