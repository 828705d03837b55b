"""What runs a server: its binary (found on this machine, ``discovery.py``, at the versions
the lessons need, ``versions.py``), and the runner that starts, kills, freezes and thaws
it: a local process (``process.py``) or a Docker container (``docker_container.py``, its
image ``docker_image.py``, the engine ``docker_engine.py``); and the clock shim a runner
preloads to step or drift a server's clocks (``clock.py`` + ``clock_shim.c``)."""
