"""The half-open experiment's own process, run by labkit/lessons/half_open.py as the first
process of a private user + network namespace (labkit/faults/namespace.py): it starts a
PostgreSQL of its own on that namespace's 127.0.0.1, lets each holder take an advisory lock
with its session's settings, makes the holders' connections half-open, and watches from an
observer connection (another client port, never dropped) when each lock is freed.

``python -m labkit.lessons.half_open_inside CONFIG`` (CONFIG as JSON, made by
half_open.half_open_runs) prints one JSON object: each round's holders and what was measured
of each, the kernel's TCP timers of the namespace and the server's version, or
``{"error": ..., "hint": ...}``. Rounds run one after the other on the one server, each with
new connections and keys; a round ends by ending the sessions it left holding.

Times are seconds on this process's monotonic clock from each holder's **last word**, the
moment just before it sent its last statement: the server's timers count from that statement
or later, so a lock freed by a timer of T seconds is freed no earlier than T after it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg

from labkit.errors import LabError
from labkit.faults import namespace
from labkit.timing import became_true, wait_until

LOOPBACK = "127.0.0.1"
LONG_QUERY = 600            # a statement that runs past any watch (s)
SHOWN = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout",
         "idle_session_timeout", "client_connection_check_interval")


def start_server(config: dict) -> subprocess.Popen:
    """The private PostgreSQL, as a non-zero uid of a nested user namespace (it refuses uid 0)."""
    argv = [*namespace.as_user_argv(config["uid"], config["gid"]), os.path.join(config["bin_dir"], "postgres"),
            "-D", config["data_dir"]]
    for name, value in {**config["settings"], "port": str(config["port"]), "unix_socket_directories": ""}.items():
        argv += ["-c", f"{name}={value}"]
    with open(config["log"], "ab") as log:
        server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def log_tail() -> str:
        with open(config["log"], errors="replace") as log:
            return "".join(log.readlines()[-15:])

    def answers() -> bool:
        if server.poll() is not None:
            raise LabError(f"the namespace's PostgreSQL exited while starting:\n{log_tail()}",
                           "remove $LABKIT_HOME/templates if its template is broken, and try again")
        try:
            connect(config).close()
            return True
        except psycopg.OperationalError:
            return False

    wait_until(answers, "the namespace's PostgreSQL to answer", 60, 0.02,
               error=lambda: LabError(f"the namespace's PostgreSQL did not answer in 60 s:\n{log_tail()}",
                                      "is the machine overloaded?"))
    return server


def connect(config: dict, settings: dict | None = None) -> psycopg.Connection:
    options = " ".join(f"-c {name}={value}" for name, value in (settings or {}).items())
    return psycopg.connect(host=LOOPBACK, port=config["port"], user=config["user"], dbname="postgres", autocommit=True,
                           connect_timeout=5, options=options)


def last_word(holder: dict, conn: psycopg.Connection) -> None:
    """The holder's last statement: ``idle`` runs one and waits for its answer (then the
    connection is quiet); ``reply`` sends ``pg_sleep(reply_after)`` and never reads, so the
    answer leaves the server after the cut; ``query`` sends a statement that outlasts the watch."""
    if holder["last"] == "idle":
        conn.execute("SELECT 1")
    else:
        seconds = holder["reply_after"] if holder["last"] == "reply" else LONG_QUERY
        conn.pgconn.send_query(f"SELECT pg_sleep({float(seconds)})".encode())


def quiet(holder: dict, port: int, config: dict, state: str | None) -> bool:
    """Every byte of the holder's connection acknowledged both ways, and a statement it left
    running seen running: what the cut must find, so that the timers start from a known state."""
    client = namespace.socket_state(port, config["port"])
    server = namespace.socket_state(config["port"], port)
    settled = client is not None and server is not None and client["unacked"] == 0 and server["unacked"] == 0
    return settled and (holder["last"] == "idle" or state == "active")


def run(config: dict) -> dict:
    namespace.prepare_drops()
    server = start_server(config)
    try:
        rounds = [watch(config, number) for number in range(config["rounds"])]
        with connect(config) as observer:
            version = observer.execute("SHOW server_version").fetchone()[0]
        return {"rounds": rounds, "kernel": namespace.tcp_defaults(), "server_version": version}
    finally:
        server.send_signal(signal.SIGINT)   # fast shutdown: open sessions are ended
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


def watch(config: dict, number: int) -> list[dict]:
    """One round: every holder takes its lock (key + 100 x round), says its last word, is cut
    off (or not), and the observer notes when each lock goes, for ``config["watch"]`` s."""
    observer = connect(config)
    holders = [{**holder, "key": holder["key"] + 100 * number} for holder in config["holders"]]
    conns, ports, pids, shown = {}, {}, {}, {}

    def state_of(name: str) -> str | None:
        row = observer.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pids[name],)).fetchone()
        return row and row[0]

    for holder in holders:
        conn = conns[holder["name"]] = connect(config, holder["settings"])
        conn.execute("SELECT pg_advisory_lock(%s)", (holder["key"],))
        pids[holder["name"]] = conn.info.backend_pid
        ports[holder["name"]] = observer.execute("SELECT client_port FROM pg_stat_activity WHERE pid = %s",
                                                 (conn.info.backend_pid,)).fetchone()[0]
        shown[holder["name"]] = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SHOWN}
    said = {}
    # all in a row (an answer that must leave after the cut last), then all quiet, then the cut
    for holder in sorted(holders, key=lambda holder: holder["last"] == "reply"):
        said[holder["name"]] = time.monotonic()
        last_word(holder, conns[holder["name"]])
    wait_until(lambda: all(quiet(holder, ports[holder["name"]], config, state_of(holder["name"])) for holder in holders),
               "every holder's connection to be quiet", 15)
    cut = [holder for holder in holders if holder["cut"]]
    namespace.drop_ports([ports[holder["name"]] for holder in cut])
    cut_at = time.monotonic()
    running_at_cut = {holder["name"]: state_of(holder["name"]) == "active" for holder in holders}
    for holder in cut:
        conns[holder["name"]].close()   # the client gives up and goes: its goodbye (and FIN) is dropped too
    freed: dict[str, float] = {}

    def sample() -> bool:   # a sampler: each freeing is noted when the lock is seen gone
        held = {row[0] for row in observer.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted")}
        now = time.monotonic()
        for holder in holders:
            if holder["name"] not in freed and holder["key"] not in held:
                freed[holder["name"]] = now
        return len(freed) == len(holders)

    became_true(sample, config["watch"], config["poll"])
    ended = time.monotonic()
    drops = namespace.dropped_packets()
    results = []
    for holder in holders:
        name, port = holder["name"], ports[holder["name"]]
        error = None
        if not holder["cut"]:
            try:
                conns[name].execute("SELECT 1")
            except psycopg.Error as failure:
                error = str(failure).strip().splitlines()[0]
        server_side, client_side = namespace.socket_state(config["port"], port), namespace.socket_state(port, config["port"])
        results.append({
            "name": name, "port": port, "cut_after": cut_at - said[name],
            "held": freed[name] - said[name] if name in freed else None, "watched": ended - said[name],
            "running_at_cut": running_at_cut[name], "shown": shown[name], "error": error,
            "server_socket": server_side and server_side["state"], "client_socket": client_side and client_side["state"],
            "dropped_from_client": drops.get(("sport", port), 0), "dropped_to_client": drops.get(("dport", port), 0)})
    for pid in pids.values():   # the sessions still holding end now, so that the next round starts clean
        observer.execute("SELECT pg_terminate_backend(%s)", (pid,))
    for holder in holders:
        conns[holder["name"]].close()
    observer.close()
    return results


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    try:
        print(json.dumps(run(config)), flush=True)
        return 0
    except LabError as error:
        print(json.dumps({"error": error.message, "hint": error.hint}), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
