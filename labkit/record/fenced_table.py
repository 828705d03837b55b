"""A fenced table: a real PostgreSQL refuses a late writer by itself.

The resource a team fences is usually a database, not a Lua script. Each row carries the
highest fencing token that touched it, in a ``token`` column, and every fenced write is one
conditional statement::

    UPDATE <table> SET value = $value, token = $token WHERE key = $key AND token <= $token

The database evaluates the condition and the write together, under the row's lock, so a
writer whose token is older than the row's is refused by PostgreSQL itself: the UPDATE
matches no row, and nothing the client believes can change that. ``claim(key, token)``
records a new holder's token before it reads anything (the "claim"), so a late write of the
old holder is refused from that moment on, not only once the new holder has written;
``update(key, change, token)`` is a read-modify-write in one transaction that claims first.
``write_unfenced`` is the same UPDATE without the condition, for the lesson that shows the
damage first.

One FencedTable is one client with its own connection (several of them on the same name
share the table, like writers on a shared database). What can fail: NoPostgres for a lab
without PostgreSQL, InvalidToken for a token that is not a whole number >= 0, LabError for a
table name that is not a plain identifier, and psycopg.OperationalError when the server or
the link is down (the write may or may not have happened: read the row to find out).
"""
from __future__ import annotations

import operator
import re
from typing import Callable

import psycopg
from psycopg import sql

from labkit.errors import LabError

NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class NoPostgres(LabError):
    """A fenced table asked of a lab that runs no PostgreSQL."""


class InvalidToken(LabError):
    """A fencing token that is not a whole number >= 0."""


def check_token(token) -> int:
    """The token as an int; InvalidToken for a bool, a float, a string, a negative number."""
    if isinstance(token, bool):
        raise InvalidToken(f"fencing token {token!r} is a bool, not a number",
                           "pass the lock's token, a whole number such as the lock node's czxid or etcd's revision")
    try:
        value = operator.index(token)
    except TypeError:
        raise InvalidToken(f"fencing token {token!r} ({type(token).__name__}) is not a whole number",
                           "pass the lock's token as an int (a float or a string would compare wrongly)") from None
    if value < 0:
        raise InvalidToken(f"fencing token {value} is negative", "tokens start at 0 and only grow")
    return value


class FencedTable:
    """A table of (key, value, token) rows on the lab's PostgreSQL.

    ``FencedTable(lab, "accounts", via="client-1")``: a client of its own (through the lab's
    network when ``via`` names a client link). Values are whole numbers (a balance, a counter)."""

    def __init__(self, lab, name: str = "fenced_rows", via: str | None = None):
        service = getattr(lab, "postgres", None)
        if service is None:
            raise NoPostgres("this lab runs no PostgreSQL, so there is no database to fence",
                             "start one with labkit.up(..., postgres=True)")
        if not NAME.match(name):
            raise LabError(f"table name {name!r} is not a plain lower-case identifier",
                           "use letters, digits and _ (e.g. 'accounts'), starting with a letter")
        self.name = name
        self.table = sql.Identifier(name)
        self.conn: psycopg.Connection = service.connect(via=via)
        self.conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value bigint NOT NULL,"
                                  " token bigint NOT NULL DEFAULT 0)").format(self.table))

    # -- rows -------------------------------------------------------------------
    def put(self, key: str, value: int, token: int = 0) -> None:
        """Create the row, or reset it whatever its token (set-up, not a fenced write)."""
        token = check_token(token)
        self.conn.execute(sql.SQL("INSERT INTO {} (key, value, token) VALUES (%s, %s, %s) ON CONFLICT (key) "
                                  "DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token").format(self.table),
                          (key, value, token))

    def read(self, key: str) -> tuple[int, int]:
        """(value, token) of the row now. LabError if there is no such row."""
        row = self.conn.execute(sql.SQL("SELECT value, token FROM {} WHERE key = %s").format(self.table),
                                (key,)).fetchone()
        if row is None:
            raise LabError(f"no row {key!r} in table {self.name}", "create it first with put(key, value)")
        return row[0], row[1]

    # -- fenced -----------------------------------------------------------------
    def claim(self, key: str, token: int) -> bool:
        """Record ``token`` on the row unless it already holds a newer one; True if recorded.
        A new holder claims before it reads, so that the old holder is refused from now on."""
        token = check_token(token)
        done = self.conn.execute(sql.SQL("UPDATE {} SET token = %s WHERE key = %s AND token <= %s").format(self.table),
                                 (token, key, token))
        return done.rowcount == 1

    def write(self, key: str, value: int, token: int) -> bool:
        """The fenced write: True if PostgreSQL took it, False if it refused it because the
        row holds a newer token (or there is no such row)."""
        token = check_token(token)
        done = self.conn.execute(sql.SQL("UPDATE {} SET value = %s, token = %s WHERE key = %s AND token <= %s")
                                 .format(self.table), (value, token, key, token))
        return done.rowcount == 1

    def update(self, key: str, change: Callable[[int], int], token: int) -> bool:
        """Read-modify-write in one transaction that claims first: the claim locks the row
        and records the token, so nobody writes between the read and the write, and an
        older token is refused before anything is read. True if the change was written."""
        token = check_token(token)
        with self.conn.transaction():
            claimed = self.conn.execute(sql.SQL("UPDATE {} SET token = %s WHERE key = %s AND token <= %s "
                                                "RETURNING value").format(self.table), (token, key, token)).fetchone()
            if claimed is None:
                return False
            self.conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE key = %s AND token = %s").format(self.table),
                              (change(claimed[0]), key, token))
        return True

    # -- unfenced, for the lesson that shows the damage ---------------------------
    def write_unfenced(self, key: str, value: int) -> bool:
        """The same UPDATE without the token condition: the last writer wins, whoever it is."""
        done = self.conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE key = %s").format(self.table), (value, key))
        return done.rowcount == 1

    def drop(self) -> None:
        """Remove the table (every client's rows)."""
        self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self.table))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "FencedTable":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
