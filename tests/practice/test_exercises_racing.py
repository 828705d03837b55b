"""The forced check-then-act race of the Redis exercises (labkit/practice/exercises/racing.py),
on the session lab's real Redis: the hook runs once, right after the server has answered the
next GET of its key (the learner got the old value, the server holds the hook's), never for
another key, another command or a second GET; a key given as bytes is the same key; the
hook's error comes out of the learner's GET; and code that checks and acts in one Lua script
sends no GET, so the window never opens. The checkers that use it: test_practice_exercises.py."""
from __future__ import annotations

import pytest

from labkit.practice.exercises.racing import RacingRedis

UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@pytest.fixture
def racing(lab, unique_name):
    client = RacingRedis(host=lab.redis.host, port=lab.redis.port, socket_timeout=5.0, **lab.redis.auth)
    other = lab.redis.client()
    keys = [f"{unique_name}:{which}" for which in ("lock", "other")]
    other.delete(*keys)
    try:
        yield client, other, keys
    finally:
        other.delete(*keys)
        client.close()
        other.close()


def test_the_hook_runs_once_after_the_next_get_of_its_key_is_answered(racing):
    client, other, (key, unrelated) = racing
    client.set(key, "mine")
    client.after_next_get(key, lambda: other.set(key, "c2's"))
    client.set(key, "mine")                 # a SET of the key: no window
    assert client.get(unrelated) is None    # a GET of another key: no window
    assert client.raced == []
    assert client.get(key) == b"mine", "the learner read the value from before the hook"
    assert other.get(key) == b"c2's" and client.raced == [key]
    other.set(key, "third")
    assert client.get(key) == b"third" and client.raced == [key], "once: the second GET runs no hook"


def test_a_key_given_as_bytes_is_the_same_key(racing):
    client, other, (key, _) = racing
    client.after_next_get(key, lambda: other.delete(key))
    client.set(key, "mine")
    assert client.get(key.encode()) == b"mine" and other.exists(key) == 0
    assert client.raced == [key]


def test_the_hooks_error_comes_out_of_the_learners_get(racing):
    client, _, (key, _) = racing

    def fails():
        raise RuntimeError("the other client could not write")

    client.after_next_get(key, fails)
    with pytest.raises(RuntimeError, match="could not write"):
        client.get(key)
    assert client.raced == [key]


def test_a_check_and_act_in_one_lua_script_opens_no_window(racing):
    client, other, (key, _) = racing
    client.set(key, "mine")
    client.after_next_get(key, lambda: other.set(key, "c2's"))
    assert client.eval(UNLOCK, 1, key, "mine") == 1
    assert client.raced == [] and other.exists(key) == 0
