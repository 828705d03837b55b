"""Real ZooKeeper, etcd and Redis clusters: started, probed, broken and stopped."""
from labkit.servers.lab import Lab, attach, attach_or_up, down_all, up

__all__ = ["Lab", "attach", "attach_or_up", "down_all", "up"]
