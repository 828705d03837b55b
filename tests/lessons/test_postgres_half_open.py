"""C30 on a real PostgreSQL in a network namespace of its own (labkit/lessons/half_open.py): a
half-open connection keeps its advisory lock until a timer of the server ends it, each
keepalive setting's bound, the kernel's default as the negative control, a port dropped on
receipt against one dropped on sending, and what a machine without user namespaces or a tool
is told."""
import json
import subprocess
import sys
import time

import pytest

from labkit.errors import LabError
from labkit.faults import namespace
from labkit.lessons import half_open


HALF_OPEN_ROUNDS = 3


@pytest.fixture(scope="module")
def half_open_rounds():
    began = time.monotonic()
    rounds = half_open.half_open_runs(HALF_OPEN_ROUNDS)
    print(f"{HALF_OPEN_ROUNDS} rounds of {len(half_open.HALF_OPEN_SETTINGS)} holders in {time.monotonic() - began:.1f} s")
    return rounds


@pytest.mark.slow   # ~45 s on a loaded 2-core machine: the namespace's server, then 3 watches of ~7 s
def test_c30_a_half_open_connection_keeps_the_lock_until_a_timer_of_the_server_ends_it(half_open_rounds):
    # Fails on the old main, whose only "cut" was the lab's proxy: it answered keepalive for
    # the client, so the lock stayed for the whole cut whatever keepalive said.
    for number, result in enumerate(half_open_rounds):
        for hold in result.holds:
            print(f"round {number}: {hold.explain()}")
            assert hold.cut_in_time, f"round {number}: the cut came too late to measure: {hold.explain()}"
            assert hold.within_bound(), f"round {number}: {hold.explain()}"
        # each timer frees within seconds, and without one the lock outlives the watch
        assert [hold.held is not None for hold in result.holds] == [True, True, True, False, True, True, False, False]


@pytest.mark.slow   # shares the rounds above
def test_c30_the_half_open_link_drops_everything_and_no_fin_reaches_the_server(half_open_rounds):
    for result in half_open_rounds:
        for hold in result.holds:
            if hold.setting.cut:
                assert hold.dropped_from_client >= 1, hold.explain()        # at least the client's goodbye and FIN
                assert hold.client_socket == "FIN_WAIT1", hold.explain()   # it closed; nothing it sent got an answer
            if hold.setting.cut and hold.held is None:
                assert hold.server_socket == "ESTABLISHED", hold.explain()  # no FIN, no RST ever came
                assert hold.dropped_to_client == 0, hold.explain()          # and the server sent nothing: no timer ran
        keepalive = result["keepalive"]
        assert keepalive.dropped_to_client >= keepalive.setting.settings["tcp_keepalives_count"]   # its probes, lost
        live = result["idle session timeout, live client"]
        assert live.dropped_to_client == 0 and "idle-session timeout" in live.error


@pytest.mark.slow   # shares the rounds above
def test_c30_without_settings_the_server_waits_for_the_kernels_default_keepalive(half_open_rounds):
    result = half_open_rounds[0]
    kernel = result.kernel   # read inside the namespace: a new network namespace starts from the kernel's defaults
    unset = result["nothing set"]
    assert unset.shown["tcp_keepalives_idle"] == str(kernel["time"])   # what the server says it uses: the kernel's
    assert unset.expected == kernel["time"] + kernel["intvl"] * kernel["probes"] == result.default_keepalive
    assert result.default_keepalive > 3600, "the kernel's default keepalive is about 2 h 11 min"
    assert result["connection check, statement running"].expected == result.default_keepalive


@pytest.mark.no_servers
def test_c30_the_bound_of_each_setting():
    kernel = {"time": 7200, "intvl": 75, "probes": 9, "rto_min_us": 200_000, "early_retrans": 3}
    bound = {setting.name: half_open.expected_hold(setting, kernel) for setting in half_open.HALF_OPEN_SETTINGS}
    assert bound["keepalive"] == 2 + 1 * 2
    assert bound["user timeout + keepalive"] == 3          # the first probe at or after 2.5 s; the count (10) ignored
    assert bound["user timeout, answer in flight"] == pytest.approx(3 + 0.4 + 2)
    assert bound["user timeout, quiet"] == 7200 + 75       # nothing in flight: only keepalive's first unanswered probe
    assert bound["idle session timeout"] == bound["idle session timeout, live client"] == 2
    assert bound["nothing set"] == bound["connection check, statement running"] == 7200 + 75 * 9
    no_probes = {**kernel, "early_retrans": 0}
    assert half_open.first_retransmission(no_probes) == 0.2


# inside a namespace: two connections with keepalive 1 + 1 x 2 s on the server's side, the
# first dropped on receipt (namespace.drop_ports), the second on lo's transmit side; each
# client closes at once. Prints, per connection, the server socket's state after the close
# and when (or whether) the server's kernel gave up, in seconds from just before the
# connections were made (so never after the server last heard from a client).
DROPS_SCRIPT = """
import json, socket, subprocess, sys, time
from labkit.faults import namespace
namespace.prepare_drops()
tc = namespace.tool("tc", "iproute2")
listener = socket.create_server(("127.0.0.1", 7000))
pairs, began = [], time.monotonic()   # before the server's last receipt: its keepalive counts from there
for _ in range(2):
    client = socket.create_connection(("127.0.0.1", 7000))
    server, _ = listener.accept()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in ((socket.TCP_KEEPIDLE, 1), (socket.TCP_KEEPINTVL, 1), (socket.TCP_KEEPCNT, 2)):
        server.setsockopt(socket.IPPROTO_TCP, option, value)
    pairs.append((client, server, client.getsockname()[1]))
namespace.drop_ports([pairs[0][2]])
for line in ("qdisc add dev lo root handle 1: htb", "class add dev lo parent 1: classid 1:1 htb rate 1gbit",
             "qdisc add dev lo parent 1:1 handle 10: pfifo limit 0",
             f"filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport {pairs[1][2]} 0xffff flowid 1:1",
             f"filter add dev lo parent 1: protocol ip prio 1 u32 match ip dport {pairs[1][2]} 0xffff flowid 1:1"):
    namespace.run([tc, *line.split()], line)
for client, _, _ in pairs:
    client.close()
time.sleep(0.3)
states = [namespace.socket_state(7000, port)["state"] for _, _, port in pairs]
ended = [None, None]
for index, (_, server, _) in enumerate(pairs):
    server.settimeout(max(0.01, 6 - (time.monotonic() - began)))
    try:
        server.recv(1)
    except TimeoutError as error:
        if error.errno is not None:
            ended[index] = round(time.monotonic() - began, 2)
    except OSError:
        ended[index] = round(time.monotonic() - began, 2)
print(json.dumps({"states": states, "ended": ended}))
"""


def test_a_port_dropped_on_receipt_is_half_open_and_keepalive_ends_it_but_not_dropped_on_sending():
    namespace.check_namespaces()
    done = subprocess.run(namespace.inside_argv([sys.executable, "-c", DROPS_SCRIPT]), capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # both clients closed, and neither FIN reached the server: its sockets stay established
    assert seen["states"] == ["ESTABLISHED", "ESTABLISHED"], seen
    # dropped on receipt: the probes leave, nothing answers, keepalive ends it at 1 + 1 x 2 s
    assert seen["ended"][0] is not None and 3 - 0.1 <= seen["ended"][0] <= 3 + 2, seen
    # the negative control: dropped on lo's transmit side, the sender's TCP is told of the drop,
    # takes it for local congestion and retries each probe without counting it: never ends
    assert seen["ended"][1] is None, seen


@pytest.mark.no_servers
def test_no_user_namespaces_is_a_lab_error_that_says_what_to_change(monkeypatch):
    refused = ["/bin/sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1"]
    monkeypatch.setattr(namespace, "inside_argv", lambda argv: refused)
    with pytest.raises(LabError) as info:
        namespace.check_namespaces.__wrapped__()
    assert "does not let uid" in info.value.message and "user namespace" in info.value.message
    assert "user.max_user_namespaces" in info.value.hint and "seccomp" in info.value.hint


@pytest.mark.no_servers
def test_a_missing_tool_names_its_package(monkeypatch):
    monkeypatch.setattr(namespace.shutil, "which", lambda name, path=None: None)
    with pytest.raises(LabError, match="apt-get install iproute2"):
        namespace.tool("tc", "iproute2")
