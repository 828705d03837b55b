"""The lab's network proxy (labkit/servers/network/proxy.py) in this process, in front of the
session lab's real Redis: a route forwards, a cut link resets a new connection, a heal lets
it through again, a delay holds every reply at least that long; and the rules it applies:
a connection nobody can attribute is cut only when its target is cut from every peer, and a
lost chunk waits one more retransmission timeout, doubled each time it is lost again.
(tests/servers/test_network.py drives the same proxy as the lab's own process, through Network.)"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from labkit.servers.network.proxy import RETRANSMIT, ProxyRules


@pytest.fixture
def proxy(tmp_path):
    """ProxyRules on an event loop of its own thread; ``ask(request)`` sends it a control
    request as the lab's process would and returns the reply."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="proxy-loop", daemon=True)
    thread.start()
    rules = asyncio.run_coroutine_threadsafe(make_rules(tmp_path), loop).result(10)

    def ask(request: dict) -> dict:
        return asyncio.run_coroutine_threadsafe(rules.handle(request), loop).result(10)
    try:
        yield rules, ask
    finally:
        asyncio.run_coroutine_threadsafe(close(rules), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def make_rules(run_dir):
    return ProxyRules(run_dir)


async def close(rules: ProxyRules) -> None:
    """Stop listening and end every connection the proxy still carries."""
    for route in rules.routes.values():
        route["server"].close()
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


@pytest.fixture
def through(lab):
    """through(port): a Redis client of the session lab's primary, dialing ``port``; closed after."""
    made = []

    def client(port: int) -> redis.Redis:
        made.append(redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, **lab.redis.auth))
        return made[-1]
    yield client
    for each in made:
        each.close()


def test_a_route_forwards_a_cut_resets_and_a_heal_lets_through(lab, proxy, through):
    rules, ask = proxy
    port = ask({"op": "route", "src": "client", "dst": "redis", "target": lab.redis.primary.port})["port"]
    assert port != lab.redis.primary.port
    assert through(port).ping() is True
    status = ask({"op": "set", "links": {"client>redis": {"cut": True}}})
    assert status["rules"] == {"client>redis": {"cut": True}}
    with pytest.raises(redis.ConnectionError):
        through(port).ping()                 # a new connection across a cut is reset
    status = ask({"op": "heal"})
    assert status["rules"] == {} and [route["port"] for route in status["routes"]] == [port]
    assert through(port).ping() is True


def test_a_delay_holds_every_reply_at_least_that_long(lab, proxy, through):
    _, ask = proxy
    port = ask({"op": "route", "src": "client", "dst": "redis", "target": lab.redis.primary.port})["port"]
    client = through(port)
    assert client.ping() is True                  # connected (and logged in) before the delay
    ask({"op": "set", "links": {"redis>client": {"delay": 150}}})
    began = time.monotonic()
    assert client.ping() is True
    assert time.monotonic() - began >= 0.15       # held by the proxy: never sooner
    assert ask({"op": "set", "links": {"redis>client": {"delay": 0}}})["rules"] == {}   # a rule of zeros is gone


@pytest.mark.no_servers
def test_an_unattributed_connection_is_cut_only_when_its_end_is_cut_from_every_peer(tmp_path):
    rules = ProxyRules(tmp_path)
    rules.rules = {"m1>m3": {"cut": True}}
    assert rules.rule(None, "m3", peers=["m1", "m2"]) == {"cut": False}    # m2 still reaches m3
    rules.rules["m2>m3"] = {"cut": True}
    assert rules.rule(None, "m3", peers=["m1", "m2"]) == {"cut": True}
    assert rules.rule(None, "m3", peers=[]) == {"cut": False}              # no peers: nothing to judge by
    assert rules.rule("m3", None, peers=["m1"]) == {"cut": False}          # m3 -> m1 is not cut
    assert rules.rule("m1", "m3") == {"cut": True} and rules.rule("m3", "m1") == {}


@pytest.mark.no_servers
def test_hold_time_is_the_delay_within_its_jitter_and_a_loss_waits_doubling_timeouts(tmp_path):
    rules = ProxyRules(tmp_path)
    assert rules.hold_time({}) == 0 and rules.hold_time({"delay": 40}) == pytest.approx(0.040)
    held = [rules.hold_time({"delay": 20, "jitter": 5}) for _ in range(200)]
    assert all(0.015 <= seconds <= 0.025 for seconds in held) and len(set(held)) > 1
    wide = [rules.hold_time({"delay": 1, "jitter": 50}) for _ in range(200)]
    assert min(wide) == 0 and max(wide) > 0.001                            # a negative hold is none
    # lost every time: 0.2 + 0.4 + ... until the timeout would pass 60 s (Linux's RTO doubling)
    timeouts, timeout = [], RETRANSMIT
    while timeout < 60:
        timeouts.append(timeout)
        timeout *= 2
    assert rules.hold_time({"loss": 1.0}) == pytest.approx(sum(timeouts))
