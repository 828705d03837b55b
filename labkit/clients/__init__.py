"""Lock clients as real OS processes, driven from the notebook: ``spawn_clients`` starts a
group (``LockClients``) of ``LockClient`` processes (``labkit.clients.child``)."""
from labkit.clients.client import ClientError, ClientTimeout, LockClient
from labkit.clients.group import LockClients, spawn_clients
from labkit.locks.registry import RECIPES

__all__ = ["RECIPES", "ClientError", "ClientTimeout", "LockClient", "LockClients", "spawn_clients"]
