"""One module per service: its config and command line, the probes that read its role and
readiness, and the handle on its cluster (``lab.zookeeper``, ``lab.etcd``, ``lab.redis`` and
``lab.redlock``, ``lab.sentinel``). ``node.py``: the ``Node`` and ``Service`` they share."""
