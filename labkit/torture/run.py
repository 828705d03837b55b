"""``torture()``: start servers, run the workload under the nemesis, judge, report.

What can go wrong first. A request that cannot be run fails before anything starts, with
one line (``TortureError``, see ``labkit.torture.request``). A torture starts servers of
its own, because it kills leaders and steps clocks: never a learner's lab. Whatever happens, Ctrl-C included, every client and server it started is stopped
before it returns or raises.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from labkit.clients import spawn_clients
from labkit.faults.relay import TcpLink
from labkit.locks.registry import Recipe, connections_of, recipe_named
from labkit.progress import showing_progress, waiting_for
from labkit.record.fencing import FencedStore
from labkit.record.history import History
from labkit.servers import up
from labkit.timing import wait_until
from labkit.torture.nemesis import Nemesis
from labkit.torture.request import TortureError, check_request
from labkit.torture.report import TortureResult, Trial
from labkit.torture.schedule import SERVER_NEMESES, Step, plan
from labkit.torture.verdict import judge
from labkit.torture.workload import TortureWorkload

REDLOCK_INSTANCES = 5  # the algorithm's own example


@dataclass
class Rig:
    """What the nemesis acts on during one trial."""

    lab: Any
    service_name: str
    clients: Any
    history: History
    timeout: float
    relay: TcpLink | None = None
    members: dict[str, Any] = field(default_factory=dict)  # client name -> the one member it reaches

    @property
    def service(self) -> Any:
        return getattr(self.lab, self.service_name)

    def point_redis_at(self, node: Any) -> None:
        """Clients reach Redis through a relay: after a failover it leads to the new primary,
        as a Sentinel-aware client would find it."""
        if self.relay is not None:
            self.relay.target = (node.host, node.port)


def torture(recipe: Recipe | str = "zookeeper", clients: int = 8, duration: float = 60.0,
            nemesis: str | list[str] = "pause,kill", seed: int = 42, fenced: bool | None = None, trials: int = 1,
            report: str | Path | None = None, timeout: float = 2.0, hold: float = 0.1,
            replay: str | Path | None = None, quiet: bool = False, holders: int = 1) -> TortureResult:
    """Run ``recipe`` with ``clients`` lock client processes for ``duration`` seconds under
    the nemeses (names of ``NEMESES``, or "pause,kill"), on servers started for the run.

    Trial k (from 0) draws its schedule from ``seed + k``. ``fenced`` None: fence when the
    recipe gives tokens. ``timeout``: session timeout / lease TTL / Redis TTL (s). ``report``:
    a folder for report.json, trial-N.png, report.html. ``holders``: how many may hold a
    semaphore recipe at once (its verdict: never more than that many). ``replay``: a report.json (or its
    folder) whose parameters and schedules are run again. Raises TortureError before
    starting anything for a request that cannot be run.
    """
    say: Callable[[str], None] = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    schedules: list[tuple[int, list[Step]]] | None = None
    if replay is not None:
        parameters, schedules = read_replay(replay)
        recipe, clients, duration = parameters["recipe"], parameters["clients"], parameters["duration"]
        nemesis, fenced, timeout, hold = parameters["nemeses"], parameters["fenced"], parameters["timeout"], parameters["hold"]
        trials, seed = len(schedules), schedules[0][0]
        holders = parameters.get("holders", 1)
    recipe = recipe_named(recipe)   # a name from the command line, a notebook or a report
    nemeses, fenced = check_request(recipe, clients, duration, nemesis, fenced, trials, timeout, hold, holders)
    if schedules is None:
        schedules = [(seed + k, plan(seed + k, nemeses, clients, duration, timeout)) for k in range(trials)]
    parameters = {"recipe": recipe.name, "clients": clients, "duration": duration, "nemeses": nemeses, "seed": seed,
                  "fenced": fenced, "trials": trials, "timeout": timeout, "hold": hold, "holders": holders}
    service = recipe.service
    result = TortureResult(parameters, [])
    with showing_progress(f"torture of {recipe.name}", total=len(schedules)) as shown:   # until its servers are down
        lab = store_lab = relay = None
        try:
            say(f"torture: {recipe.name}{f' ({holders} holders)' if holders != 1 else ''}, {clients} clients, {duration:g} s, nemesis {','.join(nemeses) or 'none'}, "
                f"seed {seed}, {'fenced' if fenced else 'unfenced'} store")
            lab = _start_lab(service, nemeses)
            store_lab = up(zookeeper=0, etcd=0, redis=True, quiet=True, keep_previous=True)  # beside the lab under test
            if service == "redis" and lab.network is None:
                relay = TcpLink(f"{lab.redis.host}:{lab.redis.port}")
            say(f"  servers: {', '.join(f'{node.name} {node.endpoint}' for node in lab.nodes)}; "
                f"store: {store_lab.redis.primary.endpoint}")
            for number, (trial_seed, steps) in enumerate(schedules, start=1):
                say(f"trial {number}/{len(schedules)}: seed {trial_seed}, {len(steps)} faults planned")
                shown.step(f"trial, seed {trial_seed}, {len(steps)} faults planned")
                trial = _run_trial(lab, store_lab, relay, recipe, parameters, number, trial_seed, steps, say)
                result.trials.append(trial)
                for line in trial.judgement.lines():
                    say("  " + line)
        finally:
            if relay is not None:
                relay.close()
            for started in (store_lab, lab):
                if started is not None:
                    started.down()
    if report is not None:
        folder = result.save(report)
        say(f"report: {folder / 'report.html'}")
    return result


def _start_lab(service: str, nemeses: list[str]) -> Any:
    # a leader to kill or cut off, and a majority to go on without it
    cuts = any(name in SERVER_NEMESES for name in nemeses)
    size = 3 if "leader" in nemeses or cuts else 1
    return up(zookeeper=size if service == "zookeeper" else 0, etcd=size if service == "etcd" else 0,
              redis=service == "redis", replica=service == "redis" and "leader" in nemeses,
              redlock=REDLOCK_INSTANCES if service == "redlock" else 0, clocks="clock" in nemeses,
              network="partition" in nemeses or cuts, quiet=True)


def members_of(lab: Any, service: str, clients: int, nemeses: list[str]) -> dict[str, Any]:
    """For the server-side nemeses, the one member each client reaches: client-k the
    ((k - 1) mod 3)-th, so that every side of a 1|2 split has clients. Else none (a client
    reaches every member, or the recipe's usual endpoint)."""
    if not any(name in SERVER_NEMESES for name in nemeses):
        return {}
    nodes = getattr(lab, service).nodes
    return {f"client-{number}": nodes[(number - 1) % len(nodes)] for number in range(1, clients + 1)}


def _pinned_connections(lab: Any, service: str, members: dict[str, Any]) -> Callable[[str], dict[str, str]]:
    """The connections of a client that reaches its member only, through links of its own."""
    ensemble = getattr(lab, service)

    def connections_for(name: str) -> dict[str, str]:
        connections = connections_of(lab)  # the secret file, if the lab has one
        node = members[name]
        connections[service] = (ensemble.hosts_for(name, [node]) if service == "zookeeper"
                                else ensemble.endpoint_for(node, name))
        return connections
    return connections_for


def _run_trial(lab: Any, store_lab: Any, relay: TcpLink | None, recipe: Recipe, parameters: dict[str, Any],
               number: int, seed: int, steps: list[Step], say: Callable[[str], None]) -> Trial:
    service = recipe.service
    _heal(lab, relay)
    name = f"/torture/{uuid.uuid4().hex[:8]}"
    store = FencedStore(store_lab.redis.client(), f"torture-store:{name}", fenced=parameters["fenced"])
    store.reset()
    history = History()
    timeout, hold = parameters["timeout"], parameters["hold"]
    members = members_of(lab, service, parameters["clients"], parameters["nemeses"])
    pinned = _pinned_connections(lab, service, members) if members else None
    with spawn_clients(lab, recipe, n=parameters["clients"], name=name, history=history, store=store,
                       session_timeout=timeout, ttl=timeout, hold=hold, connections=_connections(lab, service, relay),
                       proxied=lab.network is not None, connections_for=pinned,
                       holders=parameters.get("holders", 1)) as clients:
        rig = Rig(lab, service, clients, history, timeout, relay, members)
        workload = TortureWorkload(clients, hold)
        nemesis = Nemesis(rig, steps, say)
        stop = threading.Event()
        interrupted = True
        start = time.time()
        runner = threading.Thread(target=nemesis.run, args=(start, stop), name="nemesis", daemon=True)
        workload.start()
        try:
            runner.start()
            # the main thread only waits, in short sleeps, so that Ctrl-C reaches it at once
            with waiting_for(f"{len(steps)} faults and the trial's end", parameters["duration"]):
                wait_until(lambda: time.time() >= start + parameters["duration"], "the end of the trial",
                           timeout=parameters["duration"] + 1.0, poll=0.1)
            interrupted = False
        finally:
            stop.set()
            end = time.time()
            # a client still waiting gets the lock once more before it stops; not after Ctrl-C
            workload.stop(timeout=0.0 if interrupted else 2 * timeout + parameters["clients"] * hold + 5.0)
            if runner.is_alive():
                runner.join(30.0)  # a server it is restarting must be ours again before the lab stops
    writes = store.writes()
    store.reset()
    store.client.close()
    judgement = judge(history, writes, nemesis.executed, recipe, timeout, timeout, start, end,
                      holders=parameters.get("holders", 1))
    return Trial(number, seed, steps, nemesis.executed, history, writes, judgement, start, end,
                 {error_name: {"count": count, "example": workload.examples.get(error_name, "")}
                  for error_name, count in workload.problems.items()}, workload.rejoined)


def _connections(lab: Any, service: str, relay: TcpLink | None) -> dict[str, str]:
    """Where the clients connect. Redis: through the relay a failover re-points. etcd:
    python-etcd3 talks to one member only, so a follower: killing the leader then tests
    the cluster's failover, not a client that lost its only server. With network faults
    each client has links of its own instead (``spawn_clients(proxied=True)``)."""
    connections = connections_of(lab)
    if relay is not None:
        connections["redis"] = relay.address
    if service == "etcd" and len(lab.etcd.nodes) > 1:
        leader = lab.etcd.wait_for_leader()
        connections["etcd"] = next(node.endpoint for node in lab.etcd.nodes if node is not leader)
    return connections


def _heal(lab: Any, relay: TcpLink | None) -> None:
    """Every node running, every link up, every clock on time, before a trial (the last one
    may have broken them)."""
    if lab.network is not None:
        lab.heal()
    for node in lab.nodes:
        if node.state == "paused":
            node.resume()
        if node.state == "stopped":
            node.start()
            node.wait_ready()
        if lab.clocks and node.clock_problem is None:
            node.clock.reset()
    for ensemble in (lab.zookeeper, lab.etcd):
        if ensemble is not None and len(ensemble.nodes) > 1:
            ensemble.wait_for_leader()
    if relay is not None:
        relay.target = (lab.redis.primary.host, lab.redis.primary.port)


def read_replay(path: str | Path) -> tuple[dict[str, Any], list[tuple[int, list[Step]]]]:
    """The parameters and the (seed, schedule) of every trial of a report.json (or its
    folder), to run them again. Raises TortureError for anything else."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    try:
        saved = json.loads(path.read_text())
        schedules = [(int(trial["seed"]), [Step.from_dict(step) for step in trial["schedule"]])
                     for trial in saved["trials"]]
        parameters = saved["parameters"]
        if not schedules:
            raise ValueError("it has no trials")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TortureError(f"cannot replay {path}: {error}; give the report.json a torture wrote") from None
    return parameters, schedules
