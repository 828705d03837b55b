"""Real ZooKeeper, etcd and Redis clusters: started, probed, broken and stopped.

Four parts: ``services/`` (each server's config, probes and cluster handle), ``runners/``
(a local process or a container, the binaries, the clock shim), ``network/`` (the fault
proxy and the lab's links), and the assembly here: ``plan.py`` lays a lab out, ``lab.py``
builds the ``Lab`` from that plan (``up``) or from the plan its state file records (``attach``).
"""
from labkit.servers.lab import Lab, attach, attach_or_up, up
from labkit.servers.state import down_all

__all__ = ["Lab", "attach", "attach_or_up", "down_all", "up"]
