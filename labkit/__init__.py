"""labkit: real ZooKeeper, etcd and Redis clusters, lock recipes, faults and graphs for the
Distributed Locks Lab course."""
from labkit.errors import LabError
from labkit.servers import Lab, attach, attach_or_up, down_all, up

__all__ = ["Lab", "LabError", "attach", "attach_or_up", "down_all", "up"]
__version__ = "0.1.0"
