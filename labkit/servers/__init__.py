"""Real ZooKeeper, etcd and Redis clusters: started, probed, broken and stopped."""
from labkit.servers.lab import Lab, attach, attach_or_up, up
from labkit.servers.state import down_all

__all__ = ["Lab", "attach", "attach_or_up", "down_all", "up"]
