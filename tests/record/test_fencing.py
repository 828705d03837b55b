"""The fenced store on a real Redis: it rejects stale tokens itself, atomically."""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from labkit.lessons.fencing_edges import late_write_schedule
from labkit.record.fencing import FencedStore, StaleToken

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_name():
    return f"test-store-{uuid.uuid4().hex[:8]}"


def test_fenced_store_rejects_a_lower_token(redis_client, store_name):
    store = FencedStore(redis_client, store_name)
    try:
        assert store.write("a", 5, "from a")
        assert store.write("b", 6, "from b")
        assert store.write("b", 6, "b again")  # the same hold writes more than once
        assert not store.write("a", 5, "stale a")
        assert store.value() == "b again"
        assert store.highest_token() == 6
        writes = store.writes()
        assert [(w.client, w.token, w.accepted) for w in writes] == [
            ("a", 5, True), ("b", 6, True), ("b", 6, True), ("a", 5, False)]
        assert writes[3].reason == "token 5 < highest seen 6" and writes[3].highest_before == 6
        server_seconds, _ = redis_client.time()
        assert abs(writes[0].time - server_seconds) < 60  # the server's clock, in seconds
        assert [w.time for w in writes] == sorted(w.time for w in writes)
    finally:
        store.reset()


def test_unfenced_store_accepts_the_stale_write(redis_client, store_name):
    store = FencedStore(redis_client, store_name, fenced=False)
    try:
        assert store.write("a", 5, "from a")
        assert store.write("b", 6, "from b")
        assert store.write("a", 5, "stale a")
        assert store.value() == "stale a"
        assert all(w.accepted and not w.fenced for w in store.writes())
    finally:
        store.reset()


def test_fenced_store_refuses_a_write_without_token(redis_client, store_name):
    store = FencedStore(redis_client, store_name)
    try:
        assert not store.write("redis-holder", None, "x")
        assert store.writes()[0].reason == "no fencing token"
        assert FencedStore(redis_client, store_name, fenced=False).write("redis-holder", None, "x")
        with pytest.raises(ValueError, match="integer"):
            store.write("a", "7", "x")
    finally:
        store.reset()
    assert store.writes() == [] and store.value() is None


WRITER = """
import sys, redis
from labkit.record.fencing import FencedStore
from labkit.servers.secret import login_for
store = FencedStore(redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), **login_for(f"127.0.0.1:{sys.argv[1]}", "redis")),
                    sys.argv[2])
for token in range(int(sys.argv[3]), 200, 2):
    store.write(sys.argv[4], token, f"{sys.argv[4]}:{token}")
"""


def test_writers_in_several_processes_never_make_the_token_go_backwards(lab, redis_client, store_name):
    port = lab.redis.port
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(port), store_name, str(first), f"p{first}"],
                                cwd=REPOSITORY) for first in (0, 1)]
    store = FencedStore(redis_client, store_name)
    try:
        assert [writer.wait(timeout=60) for writer in writers] == [0, 0]
        writes = store.writes()
        assert len(writes) == 200
        accepted_tokens = [w.token for w in writes if w.accepted]
        assert accepted_tokens == sorted(accepted_tokens)
        assert all(w.token < w.highest_before for w in writes if not w.accepted)
    finally:
        for writer in writers:
            writer.kill()
        store.reset()


# -- where fencing stops protecting: a read before the new holder's first write -------------
def test_a_late_write_between_the_new_holders_read_and_write_is_a_lost_update(redis_client, store_name):
    store = FencedStore(redis_client, store_name)
    try:
        outcome = late_write_schedule(store, protect="none")
        assert outcome.old_write_accepted            # the store had not seen token 6 yet
        assert outcome.new_holder_read == 0 and outcome.final_value == 10
        assert outcome.accepted_increments == [1, 10] and outcome.lost_update
    finally:
        store.reset()


@pytest.mark.parametrize("protect", ["claim", "fenced read"])
def test_showing_the_token_before_reading_makes_the_same_schedule_safe(redis_client, store_name, protect):
    store = FencedStore(redis_client, store_name)
    try:
        outcome = late_write_schedule(store, protect=protect)
        assert not outcome.old_write_accepted and not outcome.lost_update
        assert outcome.final_value == 10 and outcome.accepted_increments == [10]
        rejected = [w for w in outcome.writes if not w.accepted]
        assert [(w.client, w.reason) for w in rejected] == [("old holder", "token 5 < highest seen 6")]
    finally:
        store.reset()


def test_claim_and_fenced_read_refuse_a_token_older_than_one_seen(redis_client, store_name):
    store = FencedStore(redis_client, store_name)
    try:
        assert store.claim(7) and store.highest_token() == 7
        assert store.writes() == []                     # a claim is no write
        assert not store.claim(6) and store.highest_token() == 7
        assert store.write("b", 7, "x") and store.read(8) == "x" and store.highest_token() == 8
        with pytest.raises(StaleToken, match="has seen token 8"):
            store.read(7)
        with pytest.raises(ValueError, match="fencing token"):
            store.claim(None)
    finally:
        store.reset()
