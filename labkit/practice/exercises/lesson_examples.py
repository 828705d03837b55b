"""Solutions for the lesson exercises (01, 03–08): one right answer each, and the classic
mistakes the checkers catch. Each wrong solution differs from the right one in one place,
marked "MISTAKE". The notebooks show the right ones as templates to edit.
"""
from __future__ import annotations

# ---- 01: unlock(client, name, my_value) ------------------------------------------------------
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def redis_unlock(client, name, my_value):
    """One Lua script: Redis runs it atomically, so nothing can happen between GET and DEL."""
    client.eval(COMPARE_AND_DELETE, 1, name, my_value)


def redis_unlock_get_then_del(client, name, my_value):
    if client.get(name) == my_value.encode():
        client.delete(name)         # MISTAKE: the key may have expired and changed hands since the GET


def redis_unlock_plain_del(client, name, my_value):
    client.delete(name)             # MISTAKE: deletes whoever holds the lock now


# ---- 03: add_one(client, key) on etcd ----------------------------------------------------------
def etcd_add_one(client, key):
    """Read value and mod revision; write only if the revision is unchanged; else retry."""
    while True:
        value, meta = client.get(key)
        succeeded, _ = client.transaction(compare=[client.transactions.mod(key) == meta.mod_revision],
                                          success=[client.transactions.put(key, str(int(value) + 1))],
                                          failure=[])
        if succeeded:
            return


def etcd_add_one_get_put(client, key):
    value, _ = client.get(key)
    client.put(key, str(int(value) + 1))    # MISTAKE: overwrites any write made since the get


def etcd_add_one_no_retry(client, key):
    value, meta = client.get(key)
    client.transaction(compare=[client.transactions.mod(key) == meta.mod_revision],
                       success=[client.transactions.put(key, str(int(value) + 1))],
                       failure=[])          # MISTAKE: a failed compare drops the increment


# ---- 04: fenced_put(client, name, token, value) -> bool ------------------------------------------
FENCED_PUT = """
local highest = tonumber(redis.call('GET', KEYS[2]))
local token = tonumber(ARGV[1])
if highest ~= nil and token < highest then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


def fenced_put(client, name, token, value):
    """Compare the token with the highest accepted and write, in one Lua script."""
    return bool(client.eval(FENCED_PUT, 2, f"{name}:value", f"{name}:highest-token", token, value))


def fenced_put_no_check(client, name, token, value):
    client.set(f"{name}:value", value)      # MISTAKE: the token is never compared
    return True


def fenced_put_check_then_set(client, name, token, value):
    highest = client.get(f"{name}:highest-token")
    if highest is not None and token < int(highest):
        return False
    # MISTAKE: a newer holder can write between the GET above and the SETs below
    client.set(f"{name}:highest-token", token)
    client.set(f"{name}:value", value)
    return True


# ---- 05: put_if_owner(client, lock_key, my_revision, key, value) -> bool ---------------------------
def put_if_owner(client, lock_key, my_revision, key, value):
    """Go's IsOwner(): the compare on my lock key and the put, in one transaction."""
    succeeded, _ = client.transaction(compare=[client.transactions.create(lock_key) == my_revision],
                                      success=[client.transactions.put(key, value)], failure=[])
    return succeeded


def put_if_owner_check_then_put(client, lock_key, my_revision, key, value):
    _, meta = client.get(lock_key)
    if meta is None or meta.create_revision != my_revision:
        return False
    client.put(key, value)                  # MISTAKE: the lock can be lost between the get and the put
    return True


def put_unguarded(client, lock_key, my_revision, key, value):
    client.put(key, value)                  # MISTAKE: writes whether or not the lock is still mine
    return True


# ---- 06: waiters(client, lock_path) -> int --------------------------------------------------------
def waiters(client, lock_path):
    """Every node in the queue but the lowest, which holds the lock."""
    return max(0, len(client.get_children(lock_path)) - 1)


def waiters_counting_the_holder(client, lock_path):
    return len(client.get_children(lock_path))     # MISTAKE: the holder is not waiting


# ---- 07: stop_at(sent_at, replied_at, ttl, margin) -> float ------------------------------------------
def stop_at(sent_at, replied_at, ttl, margin):
    """The server received my keep-alive no earlier than I sent it: count from the send."""
    return sent_at + ttl - margin


def stop_at_from_reply(sent_at, replied_at, ttl, margin):
    return replied_at + ttl - margin        # MISTAKE: late by the time the reply took


# ---- 08: validity_ms(ttl_ms, elapsed_ms) -> float --------------------------------------------------
def validity_ms(ttl_ms, elapsed_ms):
    """TTL minus the time spent acquiring minus the drift allowance (1 % of the TTL + 2 ms)."""
    return ttl_ms - elapsed_ms - (ttl_ms * 0.01 + 2)


def validity_without_drift(ttl_ms, elapsed_ms):
    return ttl_ms - elapsed_ms              # MISTAKE: a fast clock on an instance expires the key sooner


# ---- 10: fenced_add(conn, table, key, delta, token) -> bool -----------------------------------------
def fenced_add(conn, table, key, delta, token):
    """Claim the row with my token, then read and write it, in one transaction."""
    with conn.transaction():
        claimed = conn.execute(f"UPDATE {table} SET token = %s WHERE key = %s AND token <= %s",
                               (token, key, token)).rowcount
        if claimed != 1:
            return False                    # an equal or newer token holds the row: I am not the holder
        (value,) = conn.execute(f"SELECT value FROM {table} WHERE key = %s", (key,)).fetchone()
        conn.execute(f"UPDATE {table} SET value = %s WHERE key = %s AND token = %s", (value + delta, key, token))
    return True


def fenced_add_without_claim(conn, table, key, delta, token):
    with conn.transaction():
        (value,) = conn.execute(f"SELECT value FROM {table} WHERE key = %s", (key,)).fetchone()
        # MISTAKE: until this UPDATE the row still says the old token, and the old holder can write
        done = conn.execute(f"UPDATE {table} SET value = %s, token = %s WHERE key = %s AND token <= %s",
                            (value + delta, token, key, token)).rowcount
    return done == 1
