"""EtcdMutex through its server's faults, on real etcd: a waiter survives a restart, a release
sent as the leader freezes is sent again, and a client is back within a second of its
member's restart. The fixtures are test_etcd_mutex's."""
from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import UNREACHABLE, EtcdSession
from labkit.record.history import History

from helpers import DEADLINE, wait_until
from test_etcd_mutex import new_session, stack, unique  # noqa: F401  (stack: a fixture)

# python3-etcd3 0.13's watch thread ends with NameError (a missing `six` import) whenever a
# client that watched is closed. It is its bug, not ours: keep it out of the report.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


def answers(ask) -> int:
    """ask(), or -2 while the server cannot be reached."""
    try:
        return ask()
    except Exception:  # noqa: BLE001 — any failure while the server restarts is "not yet"
        return -2


@pytest.mark.slow
def test_a_waiter_survives_an_etcd_restart_and_acquires_after_it(stack):
    # python-etcd3 loses the watch when the stream breaks; the waiter must re-watch.
    import labkit
    own_lab = stack.enter_context(labkit.up(zookeeper=0, etcd=1, redis=False, quiet=True))
    history, prefix = History(), unique("restart")
    holder = EtcdMutex(new_session(stack, own_lab.etcd, ttl=5), prefix)
    waiter = EtcdMutex(new_session(stack, own_lab.etcd, ttl=5), prefix, on_event=history.sink("waiter"))
    holder.lock(timeout=DEADLINE)
    holder_key = holder.key
    pool = stack.enter_context(ThreadPoolExecutor(1))
    future = pool.submit(waiter.lock, DEADLINE * 2)
    wait_until(lambda: history.events(kind="watch"), "the waiter watches")
    own_lab.etcd.nodes[0].restart()
    assert not future.done()
    wait_until(lambda: answers(holder.session.server_ttl) > 0, "the holder's lease answers after the restart")
    holder.unlock()
    assert future.result(timeout=DEADLINE) == waiter.token
    assert not holder.session.done.is_set() and not waiter.session.done.is_set()
    assert [event.detail["target"] for event in history.events(kind="woke")] == [holder_key]
    waiter.unlock()


# -- a release while the leader dies -----------------------------------------------------
def lock_through_a_leader_change(mutex: EtcdMutex) -> int:
    """lock(), again if etcd answered "leader changed" to its read after the wake (lock()
    raises connection errors to its caller, as documented)."""
    deadline = time.monotonic() + DEADLINE * 2
    while True:
        try:
            return mutex.lock(timeout=max(deadline - time.monotonic(), 0.1))
        except (ConnectionError, *UNREACHABLE):
            if time.monotonic() > deadline:
                raise


@pytest.mark.slow
def test_a_release_sent_as_the_leader_freezes_is_sent_again_instead_of_waiting_out_the_request_timeout(stack):
    """A delete proposed while the leader is gone is lost with it: the member answers only
    when its request timeout runs out (5 s + 2 election timeouts). A torture run measured a 6 s
    stall with nobody holding. The mutex sends its delete again after a third of the TTL, so
    the next waiter gets the lock about one election later."""
    import labkit
    from etcd3 import etcdrpc
    from labkit.locks.etcd_session import rpc
    own_lab = stack.enter_context(labkit.up(zookeeper=0, etcd=3, redis=False, quiet=True))

    def on_a_follower(ttl: int) -> tuple[EtcdSession, EtcdSession, object]:
        """Two sessions on a follower, and the leader to freeze (the sessions' member stays up)."""
        leader = own_lab.etcd.wait_for_leader()
        follower = next(node for node in own_lab.etcd.nodes if node is not leader)
        sessions = []
        for _ in range(2):
            client = own_lab.etcd.client(node=follower, timeout=10)
            stack.callback(client.close)
            sessions.append(EtcdSession(client, ttl=ttl))
            stack.callback(sessions[-1].close)
        stack.callback(leader.resume)
        return sessions[0], sessions[1], leader

    first, second, leader = on_a_follower(ttl=6)
    prefix = unique("frozen-leader")
    holder, waiter = EtcdMutex(first, prefix), EtcdMutex(second, prefix)
    holder.lock(timeout=DEADLINE)
    pool = stack.enter_context(ThreadPoolExecutor(1))
    future = pool.submit(lock_through_a_leader_change, waiter)
    wait_until(lambda: len(holder.contenders()) == 2, "the waiter queues")
    leader.pause()
    started = time.monotonic()
    holder.unlock()
    released = time.monotonic() - started
    future.result(timeout=DEADLINE)
    granted = time.monotonic() - started
    leader.resume()
    assert waiter.is_held and not holder.is_held
    waiter.unlock()

    # The negative control: one plain delete, no deadline of its own, while the leader is frozen.
    raw, _, leader = on_a_follower(ttl=6)
    raw.client.put("/lost-proposal", "x")
    leader.pause()
    started = time.monotonic()
    with pytest.raises(Exception):  # etcdserver: request timed out (or leader changed)
        rpc(raw.client, raw.client.kvstub.DeleteRange, etcdrpc.DeleteRangeRequest(key=b"/lost-proposal"))
    plain = time.monotonic() - started
    leader.resume()
    print(f"plain delete {plain:.2f} s, unlock {released:.2f} s, next holder after {granted:.2f} s")
    assert plain >= 4.0, f"a lost proposal was answered after {plain:.1f} s: the server did not wait it out"
    assert released < plain - 2.0 and granted < plain - 1.5, (released, granted, plain)


@pytest.mark.slow
def test_a_client_is_back_within_a_second_of_its_member_restart(stack):
    """gRPC's default reconnect backoff (1 s, x1.6 per try, up to 2 min) kept a torture run's
    clients away for 4 s after their member was back (an 8 s gap with nobody holding). The
    lab's clients reconnect within 0.1 s and never wait more than 1 s; a client with gRPC's
    defaults, asked the same, is the negative control. Its wait depends on where in its
    backoff the restart falls (a random retry: 1.5 s was not always reached, #34), so the
    test forces that: it watches the control's connection attempts on the member's port
    (a listener that accepts and hangs up) and restarts the member right after an attempt
    that came 4 s or more after the one before; gRPC's next one is at least as far off."""
    import socket
    import labkit
    from labkit.servers.services.etcd import etcd_client
    own_lab = stack.enter_context(labkit.up(zookeeper=0, etcd=1, redis=False, quiet=True))
    node = own_lab.etcd.nodes[0]
    host, port = node.endpoint.rsplit(":", 1)
    auth = own_lab.etcd.auth

    def down_then_back(client, attempts_apart: float) -> tuple[float, list[float]]:
        """Kill the member; while it is down, ask every 0.1 s, and accept (then close) each
        connection attempt on its port; restart it once two attempts came attempts_apart s
        apart (0: after 6 s). Returns the seconds from the restart to the first answer, and
        the attempts' times relative to the restart."""
        client.get("/probe")
        node.kill()
        attempts: list[float] = []
        listener = socket.create_server((host, int(port))) if attempts_apart else None
        if listener:
            listener.settimeout(0.1)
        down_at = time.monotonic()
        while True:
            answers(lambda: client.get("/probe") and 0)
            if listener:
                with contextlib.suppress(OSError):
                    listener.accept()[0].close()
                    attempts.append(time.monotonic())
                if len(attempts) >= 2 and attempts[-1] - attempts[-2] >= attempts_apart:
                    break
                assert time.monotonic() - down_at < 90, f"no 4 s gap between attempts: {attempts}"
            else:
                time.sleep(0.1)
                if time.monotonic() - down_at >= 6.0:
                    break
        if listener:
            listener.close()
        node.restart()
        back = time.monotonic()
        wait_until(lambda: answers(lambda: client.get("/probe") and 0) == 0, "the client answers", timeout=60)
        return time.monotonic() - back, [a - back for a in attempts]

    ours = etcd_client(host, int(port), timeout=0.5, **auth)
    stack.callback(ours.close)
    took_ours, _ = down_then_back(ours, 0)
    defaults = etcd_client(host, int(port), timeout=0.5, grpc_options=[], **auth)
    stack.callback(defaults.close)
    took_defaults, attempts = down_then_back(defaults, 4.0)
    gap = attempts[-1] - attempts[-2]
    # gRPC's next interval is 1.6 x the last one's base, each jittered by 20 %: at least 1.07 x
    # the last gap; 1.0 x it, less 0.3 s for this loop's own lag in seeing an attempt
    earliest = attempts[-1] + gap - 0.3
    print(f"ours answered {took_ours:.2f} s after the restart; the defaults' attempts {attempts}, "
          f"answered {took_defaults:.2f} s after it (not before {earliest:.2f} s)")
    assert took_ours < 1.5, took_ours
    assert took_defaults >= earliest, (took_defaults, attempts)   # it waited out its backoff
    if earliest > 1.5:   # the restart took less than the backoff's gap: the contrast is forced
        assert took_defaults > 1.5 > took_ours, (took_defaults, took_ours)
