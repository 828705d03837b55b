"""EtcdSession, EtcdMutex (the port of Go's concurrency.Mutex) and python-etcd3's Lock, on a
real etcd: mutual exclusion, FIFO, wakeups per release, lease expiry, fencing, and interop
with Go's Mutex through ``etcdctl lock``."""
from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.locks.errors import Locked, LockTimeout, SessionExpired
from labkit.locks.etcd3_reference import Etcd3ReferenceLock
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import UNREACHABLE, EtcdSession
from labkit.servers.runners.discovery import find_etcdctl

from helpers import DEADLINE, Recorder, wait_until


# python3-etcd3 0.13's watch thread ends with NameError (a missing `six` import) whenever a
# client that watched is closed. It is its bug, not ours: keep it out of the report.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception in thread etcd3_watch:pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture
def etcd(lab):
    return lab.etcd


@pytest.fixture
def stack():
    with contextlib.ExitStack() as exits:
        yield exits


def new_session(stack, etcd, ttl: int = 5, on_event=None) -> EtcdSession:
    client = etcd.client(timeout=10)
    stack.callback(client.close)
    session = EtcdSession(client, ttl=ttl) if on_event is None else EtcdSession(client, ttl=ttl, on_event=on_event)
    stack.callback(session.close)
    return session


def unique(name: str) -> str:
    return f"test-{name}-{uuid.uuid4().hex[:8]}"


# -- EtcdMutex ---------------------------------------------------------------------
def test_ten_concurrent_clients_never_hold_at_once_and_tokens_rise(etcd, stack):
    prefix, clients, rounds = unique("exclusion"), 10, 2
    inside, most_inside, tokens = [0], [0], []
    counter = threading.Lock()
    mutexes = [EtcdMutex(new_session(stack, etcd), prefix, identifier=f"c{i}") for i in range(clients)]

    def work(mutex: EtcdMutex) -> None:
        for _ in range(rounds):
            token = mutex.lock(timeout=DEADLINE)
            with counter:
                inside[0] += 1
                most_inside[0] = max(most_inside[0], inside[0])
                tokens.append(token)
            # A real write, guarded by ownership, while others are queued behind us.
            write = mutex.client.transactions.put(prefix + "-data", str(token))
            accepted, _ = mutex.client.transaction(compare=[mutex.is_owner()], success=[write], failure=[])
            assert accepted, f"{mutex} holds the lock but its guarded write was refused"
            with counter:
                inside[0] -= 1
            mutex.unlock()

    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(work, mutex) for mutex in mutexes]:
            future.result(timeout=DEADLINE * 2)
    assert most_inside[0] == 1
    assert len(tokens) == clients * rounds
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "tokens must rise with every hold"
    assert etcd.client().get_prefix_response(prefix + "/").count == 0, "every key must be gone after unlock"


def queue_waiters(stack, etcd, recorder, lock_factory, count: int, watching: str):
    """A holder, then ``count`` waiters queued one after another. Returns the holder,
    the waiters in the order they queued, and the futures of their lock() calls."""
    holder = lock_factory("holder")
    holder.acquire(timeout=DEADLINE)
    pool = ThreadPoolExecutor(count)
    stack.callback(pool.shutdown, wait=True, cancel_futures=True)
    waiters, futures = [], []
    for index in range(count):
        name = f"w{index}"
        waiter = lock_factory(name)
        waiters.append(waiter)
        futures.append(pool.submit(waiter.acquire, DEADLINE))
        # The next waiter queues only once this one waits on the server: the order is known.
        # (A waiter whose lock() failed says why at once, instead of a wait that times out.)
        wait_until(lambda: futures[-1].done() or len(recorder.of("watch", name)) == 1, f"{name} watches {watching}")
        assert not futures[-1].done(), f"{name} stopped waiting: {futures[-1].result()!r}"
    return holder, waiters, futures


def test_waiters_acquire_in_create_order_with_exactly_one_wakeup_per_release(etcd, stack):
    recorder, prefix, count = Recorder(), unique("fifo"), 6
    factory = lambda name: EtcdMutex(new_session(stack, etcd), prefix, identifier=name,
                                     on_event=recorder.sink(name))
    holder, waiters, futures = queue_waiters(stack, etcd, recorder, factory, count, "its predecessor")
    created = [detail["revision"] for _, detail in recorder.of("created")]
    assert created == sorted(created)
    # Each waiter watches only the key just ahead of it.
    for ahead, waiter in zip([holder, *waiters], waiters):
        assert recorder.of("watch", waiter.identifier)[0][1]["target"] == ahead.key

    holder.release()
    for waiter, future in zip(waiters, futures):
        assert future.result(timeout=DEADLINE) == waiter.token  # acquired in queue order
        waiter.release()
    acquired_by = [client for client, _ in recorder.of("acquired")]
    assert acquired_by == ["holder", *[w.identifier for w in waiters]]
    releases = len(recorder.of("released"))
    assert releases == count + 1
    assert len(recorder.of("woke")) == count  # one per release that had a waiter behind it
    assert all(len(recorder.of("woke", w.identifier)) == 1 for w in waiters)


def test_a_waiter_rewatches_when_the_waiter_ahead_leaves(etcd, stack):
    recorder, prefix = Recorder(), unique("middle")
    factory = lambda name: EtcdMutex(new_session(stack, etcd), prefix, identifier=name,
                                     on_event=recorder.sink(name))
    holder, (middle, last), (middle_future, last_future) = queue_waiters(stack, etcd, recorder, factory, 2,
                                                                         "its predecessor")
    middle.session.revoke()  # the middle waiter dies: its key goes, the holder still holds
    with pytest.raises(SessionExpired):
        middle_future.result(timeout=DEADLINE)
    wait_until(lambda: len(recorder.of("watch", "w1")) == 2, "the last waiter watches the holder")
    assert recorder.of("watch", "w1")[1][1]["target"] == holder.key
    assert not last_future.done(), "the holder still holds: the last waiter must still wait"
    holder.release()
    assert last_future.result(timeout=DEADLINE) == last.token
    last.release()


def test_stopped_keepalive_lets_the_lease_expire_and_the_next_waiter_acquire(etcd, stack):
    recorder, prefix, ttl = Recorder(), unique("expiry"), 2
    holder = EtcdMutex(new_session(stack, etcd, ttl=ttl), prefix, identifier="holder",
                       on_event=recorder.sink("holder"))
    waiter = EtcdMutex(new_session(stack, etcd, ttl=10), prefix, identifier="waiter",
                       on_event=recorder.sink("waiter"))
    held_token = holder.lock(timeout=DEADLINE)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(waiter.lock, DEADLINE)
        wait_until(lambda: recorder.of("watch", "waiter"), "the waiter watches the holder")
        stopped = time.monotonic()
        holder.session.stop_keepalive()
        token = future.result(timeout=DEADLINE)
        waited = time.monotonic() - stopped
    # The last refresh came at most ttl/3 before the stop; etcd checks expiry every 0.5 s.
    assert ttl * 2 / 3 - 0.3 <= waited <= ttl + 3, f"the lease ended {waited:.2f} s after keep-alive stopped"
    assert token == waiter.token and waiter.is_held
    wait_until(holder.session.done.is_set, "the holder's session sees its lease gone", timeout=ttl + 3)
    assert not holder.is_held and holder.token is None
    assert [detail["token"] for _, detail in recorder.of("lost", "holder")] == [held_token]
    waiter.unlock()


def test_a_waiter_whose_lease_is_revoked_raises_session_expired(etcd, stack):
    recorder, prefix = Recorder(), unique("revoked")
    holder = EtcdMutex(new_session(stack, etcd), prefix, identifier="holder")
    waiter = EtcdMutex(new_session(stack, etcd, ttl=3), prefix, identifier="waiter", on_event=recorder.sink("waiter"))
    holder.lock(timeout=DEADLINE)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(waiter.lock, DEADLINE)
        wait_until(lambda: recorder.of("watch"), "the waiter watches")
        etcd.etcdctl("lease", "revoke", f"{waiter.session.lease_id:x}")  # from outside, like an operator
        with pytest.raises(SessionExpired):
            future.result(timeout=DEADLINE)
    assert holder.is_held and holder.contenders() == [holder.key]
    assert len(recorder.of("lost", "waiter")) == 1
    holder.unlock()


def test_a_waiter_whose_key_vanished_finds_out_when_it_wakes(etcd, stack):
    # Go's own check: after waitDeletes, get my key; gone means the session expired.
    recorder, prefix = Recorder(), unique("vanished")
    holder = EtcdMutex(new_session(stack, etcd), prefix, identifier="holder")
    waiter = EtcdMutex(new_session(stack, etcd), prefix, identifier="waiter", on_event=recorder.sink("waiter"))
    holder.lock(timeout=DEADLINE)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(waiter.lock, DEADLINE)
        wait_until(lambda: recorder.of("watch"), "the waiter watches")
        etcd.etcdctl("del", waiter.key)
        holder.unlock()
        with pytest.raises(SessionExpired, match="is gone"):
            future.result(timeout=DEADLINE)
    assert [kind for _, kind, _ in recorder.events][-2:] == ["woke", "lost"]


def test_try_lock_raises_locked_and_leaves_no_key(etcd, stack):
    prefix = unique("try")
    holder = EtcdMutex(new_session(stack, etcd), prefix)
    other = EtcdMutex(new_session(stack, etcd), prefix)
    token = holder.try_lock()
    assert holder.key == f"{prefix}/{holder.session.lease_id:x}" and token == holder.token
    with pytest.raises(Locked, match=holder.key):
        other.try_lock()
    assert holder.contenders() == [holder.key] and other.key is None
    holder.unlock()
    assert other.try_lock() == other.token
    other.unlock()


def test_lock_timeout_raises_and_leaves_the_queue(etcd, stack):
    recorder, prefix = Recorder(), unique("timeout")
    holder = EtcdMutex(new_session(stack, etcd), prefix)
    waiter = EtcdMutex(new_session(stack, etcd), prefix, on_event=recorder.sink("waiter"))
    holder.lock()
    with pytest.raises(LockTimeout, match=prefix) as raised:
        waiter.lock(timeout=0.3)
    assert raised.value.waited >= 0.3
    assert holder.contenders() == [holder.key] and not waiter.is_held
    assert len(recorder.of("timeout")) == 1
    holder.unlock()


def test_is_owner_guards_a_transaction_only_while_the_lock_is_held(etcd, stack):
    prefix = unique("fence")
    mutex = EtcdMutex(new_session(stack, etcd), prefix)
    client = mutex.client
    guarded_put = lambda value: client.transaction(compare=[mutex.is_owner()],
                                                   success=[client.transactions.put(prefix + "-data", value)],
                                                   failure=[])[0]
    mutex.lock()
    assert guarded_put("while held") is True
    mutex.session.revoke()  # the lease is gone: so is the lock
    assert guarded_put("after the lease was revoked") is False
    assert client.get(prefix + "-data")[0] == b"while held"
    assert not mutex.is_held and mutex.session.done.is_set()
    with pytest.raises(SessionExpired):
        mutex.lock(timeout=1)


def test_locking_on_a_lease_the_server_no_longer_knows_raises_session_expired(etcd, stack):
    mutex = EtcdMutex(new_session(stack, etcd, ttl=30), unique("unknown-lease"))
    etcd.etcdctl("lease", "revoke", f"{mutex.session.lease_id:x}")  # before the keep-alive can notice
    with pytest.raises(SessionExpired, match="start a new EtcdSession"):
        mutex.lock(timeout=DEADLINE)
    assert mutex.key is None and not mutex.is_held


def test_session_close_revokes_the_lease(etcd, stack):
    recorder = Recorder()
    session = new_session(stack, etcd, ttl=5, on_event=recorder.sink("session"))
    assert 0 < session.remaining_ttl() <= 5
    session.close()
    assert session.done.is_set() and session.remaining_ttl() == -1
    assert recorder.events == []  # closing on purpose is not a loss


def test_a_waiter_whose_watch_cannot_be_armed_rechecks_instead_of_failing(etcd, stack):
    # What made the restart test below flaky: the server went away between the waiter's
    # "watch" event and the watch being armed, and arming raised out of lock().
    import etcd3

    recorder, prefix = Recorder(), unique("unarmed")
    holder = EtcdMutex(new_session(stack, etcd), prefix)
    waiter = EtcdMutex(new_session(stack, etcd), prefix, on_event=recorder.sink("waiter"))
    holder.lock(timeout=DEADLINE)
    arm, refused = waiter.client.add_watch_callback, []

    def refuse_once(*args, **kwargs):
        if not refused:
            refused.append(True)
            raise etcd3.exceptions.ConnectionFailedError()
        return arm(*args, **kwargs)

    waiter.client.add_watch_callback = refuse_once
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(waiter.lock, DEADLINE)
        wait_until(lambda: refused, "arming the waiter's watch fails once")
        holder.unlock()
        assert future.result(timeout=DEADLINE) == waiter.token
    waiter.unlock()


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
    recorder, prefix = Recorder(), unique("restart")
    holder = EtcdMutex(new_session(stack, own_lab.etcd, ttl=5), prefix)
    waiter = EtcdMutex(new_session(stack, own_lab.etcd, ttl=5), prefix, on_event=recorder.sink("waiter"))
    holder.lock(timeout=DEADLINE)
    holder_key = holder.key
    pool = stack.enter_context(ThreadPoolExecutor(1))
    future = pool.submit(waiter.lock, DEADLINE * 2)
    wait_until(lambda: recorder.of("watch"), "the waiter watches")
    own_lab.etcd.nodes[0].restart()
    assert not future.done()
    wait_until(lambda: answers(holder.session.server_ttl) > 0, "the holder's lease answers after the restart")
    holder.unlock()
    assert future.result(timeout=DEADLINE) == waiter.token
    assert not holder.session.done.is_set() and not waiter.session.done.is_set()
    assert [detail["target"] for _, detail in recorder.of("woke")] == [holder_key]
    waiter.unlock()


# -- interop with Go's Mutex (etcdctl lock) --------------------------------------------
@contextlib.contextmanager
def etcdctl_lock(etcd, name: str):
    """``etcdctl lock NAME`` in the background: it prints its key once it holds the lock and
    unlocks when interrupted. Yields a queue that receives its output lines."""
    argv = [find_etcdctl(), "--endpoints", ",".join(etcd.endpoints), "lock", name]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=etcd.etcdctl_environment())
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in process.stdout], daemon=True)
    reader.start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # etcdctl unlocks and revokes on SIGINT
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        reader.join(timeout=5)


def test_our_mutex_waits_while_etcdctl_holds(etcd, stack):
    name = unique("etcdctl-holds")
    mutex = EtcdMutex(new_session(stack, etcd), name)
    with etcdctl_lock(etcd, name) as (process, lines):
        go_key = lines.get(timeout=DEADLINE)
        assert go_key.startswith(f"{name}/"), f"etcdctl printed {go_key!r}, not its lock key"
        with pytest.raises(Locked):
            mutex.try_lock()
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(mutex.lock, DEADLINE)
            wait_until(lambda: len(mutex.contenders()) == 2, "our key queues behind etcdctl's")
            assert mutex.contenders() == [go_key, mutex.key] and not future.done()
            process.send_signal(signal.SIGINT)
            assert future.result(timeout=DEADLINE) == mutex.token
        process.wait(timeout=DEADLINE)
    assert mutex.contenders() == [mutex.key]
    mutex.unlock()


def test_etcdctl_waits_while_our_mutex_holds(etcd, stack):
    name = unique("ours-holds")
    mutex = EtcdMutex(new_session(stack, etcd), name)
    mutex.lock()
    with etcdctl_lock(etcd, name) as (process, lines):
        wait_until(lambda: len(mutex.contenders()) == 2, "etcdctl's key queues behind ours")
        with pytest.raises(queue.Empty):
            lines.get(timeout=1.0)  # etcdctl must not claim the lock while we hold it
        assert process.poll() is None
        mutex.unlock()
        assert lines.get(timeout=DEADLINE).startswith(f"{name}/")


# -- python-etcd3's Lock, the reference -----------------------------------------------
def test_reference_lock_excludes_and_gives_the_create_revision_as_token(etcd, stack):
    name, clients = unique("reference"), 5
    inside, most_inside = [0], [0]
    counter = threading.Lock()
    locks = []
    for index in range(clients):
        client = etcd.client(timeout=10)
        stack.callback(client.close)
        locks.append(Etcd3ReferenceLock(client, name, ttl=30, identifier=f"c{index}"))

    def work(lock: Etcd3ReferenceLock) -> None:
        token = lock.acquire(timeout=DEADLINE)
        with counter:
            inside[0] += 1
            most_inside[0] = max(most_inside[0], inside[0])
        _, metadata = lock.client.get(lock.key)
        assert metadata.create_revision == token
        with counter:
            inside[0] -= 1
        lock.release()

    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(work, lock) for lock in locks]:
            future.result(timeout=DEADLINE * 2)
    assert most_inside[0] == 1


def test_reference_lock_wakes_every_waiter_on_each_release(etcd, stack):
    recorder, name, count = Recorder(), unique("herd"), 5

    def factory(identifier):
        client = etcd.client(timeout=10)
        stack.callback(client.close)
        return Etcd3ReferenceLock(client, name, ttl=30, identifier=identifier, on_event=recorder.sink(identifier))

    holder, waiters, futures = queue_waiters(stack, etcd, recorder, factory, count, "the lock key")
    holder.release()
    waiting = list(waiters)
    for released in range(1, count + 1):
        wait_until(lambda: any(w.token is not None for w in waiting), "a waiter holds")
        winner = next(w for w in waiting if w.token is not None)
        waiting.remove(winner)
        # Release only once every loser has woken for this release (the winner can hold
        # before the others' wake-ups arrive) and watches again, so each release meets them all.
        wait_until(lambda: all(len(recorder.of("woke", w.identifier)) == released
                               and len(recorder.of("watch", w.identifier)) == released + 1
                               for w in waiting), "the other waiters woke and watch again")
        winner.release()
    for future in futures:
        future.result(timeout=DEADLINE)
    releases = len(recorder.of("released"))
    wakeups = len(recorder.of("woke"))
    assert releases == count + 1
    # The first release alone wakes all five waiters; in all, a release wakes every
    # waiter still waiting: 5 + 4 + 3 + 2 + 1.
    assert wakeups == count * (count + 1) // 2, f"{wakeups} wakeups for {releases} releases"


def test_reference_lock_timeout(etcd, stack):
    name = unique("reference-timeout")
    client = etcd.client(timeout=10)
    stack.callback(client.close)
    holder = Etcd3ReferenceLock(client, name, ttl=30)
    other = Etcd3ReferenceLock(client, name, ttl=30)
    holder.acquire()
    with pytest.raises(LockTimeout):
        other.acquire(timeout=0.3)
    assert holder.is_held and not other.is_held
    holder.release()
    assert not holder.is_held


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
