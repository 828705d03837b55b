"""One module per service: its config and command line, its layout, the probes that read its
role and readiness, the handle on its cluster (``lab.zookeeper``, ``lab.etcd``, ``lab.redis`` and
``lab.redlock``, ``lab.sentinel``, ``lab.postgres``) and its entry in the table of services
(``kind.py``; the table: ``kinds.py``). ``node.py``: the ``Node`` and ``Service`` they share;
``layout.py``: what their layouts share."""
