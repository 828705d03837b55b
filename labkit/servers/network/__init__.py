"""A lab's network (``labkit.up(network=True)``): one proxy process per lab, every link a
port on 127.0.0.1 (``proxy.py``, a script of the standard library alone), and the lab's
side of it (``links.py``: routes, partition, isolate, cut, delay, loss, heal)."""
