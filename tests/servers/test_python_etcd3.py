"""python3-etcd3 0.13 is mended once, when labkit is imported: a learner's own
``etcd3.client()`` (not made by ``lab.etcd.client()``) watches, cancels and closes without
its watch thread dying of ``NameError: name 'six' is not defined``.

The check runs in a fresh interpreter, so that nothing else in this test session has
touched python-etcd3 first; it fails if any thread raises or anything mentions the NameError."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import DEADLINE

LEARNER = textwrap.dedent("""
    import sys, threading
    import labkit                       # nothing else: the mend must come with this import
    import etcd3
    from labkit.servers.secret import login_for   # the lab is private: its login, found by address

    failures = []
    threading.excepthook = lambda arguments: failures.append(repr(arguments.exc_value))
    host, port = sys.argv[1].rsplit(":", 1)
    client = etcd3.client(host=host, port=int(port), **login_for(f"{host}:{port}", "etcd"))  # a private lab
    events, cancel = client.watch("/learner/key")          # an iterator watch, cancelled
    client.put("/learner/key", "1")
    assert next(events).value == b"1"
    cancel()
    seen = threading.Event()
    client.add_watch_callback("/learner/other", lambda response: seen.set())
    client.put("/learner/other", "1")
    assert seen.wait(10), "the callback watch never fired"
    client.close()                      # ends the watch stream under a live callback watch
    for thread in threading.enumerate():
        if thread.name.startswith("etcd3_watch"):
            thread.join(10)
    print("failures:", failures)
    sys.exit(1 if failures else 0)
""")


def test_a_plain_etcd3_client_watches_and_closes_without_a_name_error(lab):
    endpoint = lab.etcd.endpoints[0]
    finished = subprocess.run([sys.executable, "-c", LEARNER, endpoint], capture_output=True, text=True,
                              timeout=DEADLINE * 3)
    output = finished.stdout + finished.stderr
    assert "NameError" not in output and "six" not in output, output
    assert finished.returncode == 0, output


def test_the_mend_is_applied_by_importing_labkit_alone():
    check = "import labkit, etcd3.watch; print(etcd3.watch.six.itervalues({1: 'x'}).__next__())"
    finished = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=DEADLINE * 3)
    assert finished.stdout.strip() == "x", finished.stdout + finished.stderr
