"""Faults you can inject into a lab: on processes (pause, kill), on sessions and leases
(expire, revoke), on a cluster (kill its leader), on Redis replication, and on one TCP
connection (a relay that can be cut). Every fault is real; nothing is simulated in a client.
"""
from labkit.faults.process import (ClientProcess, describe, freeze_process, kill, pause, record_fault, resume,
                                   thaw_process)
from labkit.faults.sessions import expire_session, kill_leader, revoke_lease

__all__ = ["ClientProcess", "describe", "expire_session", "freeze_process", "kill", "kill_leader", "pause", "record_fault",
           "resume", "revoke_lease", "thaw_process"]
