"""The `labkit` command: up, status, down, net, doctor, bench, torture, races, predictions."""
from __future__ import annotations

import argparse
import json
import sys
import time

from labkit.bench import peers as bench_peers
from labkit.bench.command import main as bench_main
from labkit.errors import LabError
from labkit.servers import lab as lab_module
from labkit.servers import state
from labkit.servers.runners.discovery import doctor
from labkit.servers.state import down_all
from labkit.servers.run_folder import labkit_home


def _print_status(status: dict) -> None:
    private = {True: ", private", False: ", open to every local user"}.get(status.get("private"), "")
    print(f"lab {status.get('id', '?')} ({status['backend']} backend{private})")
    for service, info in status["services"].items():
        where = info.get("connect") or ",".join(info.get("endpoints", [])) or ""
        print(f"{service}{'  ' + where if where else ''}")
        for node in info["nodes"]:
            memory = f"{node['memory_mb']:>6.0f} MB" if node.get("memory_mb") is not None else ""
            print(f"  {node['name']:<9} {node['endpoint']:<16} {node['role']:<11} {node['state']:<8}{memory}")
    sizes = [node["memory_mb"] for info in status["services"].values() for node in info["nodes"]
             if node.get("memory_mb") is not None]
    if sizes:
        print(f"memory of the servers (resident): {sum(sizes):.0f} MB")


def cmd_up(args) -> int:
    try:
        existing = lab_module.attach()
    except LabError:
        existing = None
    if existing is not None:
        print(f"a lab is already running ({existing.id}); `labkit down` stops it first. Its status:")
        _print_status(existing.status())
        return 0
    lab = lab_module.up(zookeeper=args.zookeeper, etcd=args.etcd, redis=args.redis or args.replica,
                        replica=args.replica, backend=args.backend, base_port=args.base_port, detached=True,
                        clocks=args.clocks, redlock=args.redlock, sentinels=args.sentinels,
                        network=args.network, private=not args.open, postgres=args.postgres)
    state.current_file().write_text(lab.id + "\n")
    _print_status(lab.status())
    print(f"started in {lab.started_in:.1f} s; `labkit status` shows it, `labkit down` stops it")
    return 0


def cmd_status(args) -> int:
    try:
        lab = lab_module.attach()
    except LabError as exc:
        if args.json:
            print(json.dumps({"backend": None, "services": {}, "error": exc.message}))
        else:
            print(f"{exc.message}\n  hint: {exc.hint}")
        return 1
    status = lab.status(memory=True)
    if args.json:
        print(json.dumps(status))
    else:
        _print_status(status)
    return 0


def cmd_down(args) -> int:
    stopped = down_all()
    if not stopped:
        print("no lab was running")
    return 0


def _milliseconds(text: str) -> float:
    """'50ms', '50', '0.05s' -> 50.0"""
    text = text.strip().lower()
    try:
        if text.endswith("ms"):
            return float(text[:-2])
        if text.endswith("s"):
            return float(text[:-1]) * 1000
        return float(text)
    except ValueError:
        raise LabError(f"{text!r} is not a duration", "write it like 50ms, 0.05s or 50") from None


def _print_network(status: dict) -> None:
    print(f"network: {status['links']} links, {status['connections']} open connections; "
          f"ends: {', '.join(status['ends'])}")
    if not status["rules"]:
        print("  every link is healthy")
    for link, rule in sorted(status["rules"].items()):
        print(f"  {link.replace('>', ' -> '):<24} " + ", ".join(f"{k}={v}" for k, v in sorted(rule.items())))


def cmd_net(args) -> int:
    lab = lab_module.attach()
    links = [tuple(link.split(",", 1)) if "," in link else link for link in args.link] if args.link else None
    if args.action == "partition":
        sides = [side.replace(",", " ").split() for side in " ".join(args.names).split("/")]
        lab.partition(*sides)
    elif args.action == "isolate":
        for name in args.names:
            lab.isolate(name)
    elif args.action == "cut":
        if len(args.names) != 2:
            raise LabError(f"`labkit net cut` takes two names, got {len(args.names)}", "e.g. labkit net cut zk1 zk2")
        lab.cut(*args.names, both_ways=not args.one_way)
    elif args.action == "delay":
        if len(args.names) != 1:
            raise LabError("`labkit net delay` takes one delay", "e.g. labkit net delay 50ms --jitter 5ms")
        lab.delay(_milliseconds(args.names[0]), jitter=_milliseconds(args.jitter), links=links)
    elif args.action == "loss":
        if len(args.names) != 1:
            raise LabError("`labkit net loss` takes one fraction", "e.g. labkit net loss 0.1")
        try:
            fraction = float(args.names[0])
        except ValueError:
            raise LabError(f"{args.names[0]!r} is not a fraction", "e.g. labkit net loss 0.1") from None
        lab.loss(fraction, links=links)
    elif args.action == "heal":
        lab.heal()
    _print_network(lab.network_status())
    return 0


def cmd_doctor(args) -> int:
    report = doctor()
    libraries = bench_peers.library_versions()
    if args.json:
        # the libraries in the servers' shape, marked "library": a missing one fails no lab
        print(json.dumps(report + [{"name": item["name"], "ok": item["version"] is not None, "library": True,
                                    "found": item["used_for"], "version": item["version"], "needs": "", "notes": [],
                                    "problem": None if item["version"] else "not installed",
                                    "fix": None if item["version"] else "./lab.sh setup (the lock file has it)"}
                                   for item in libraries], indent=1))
    else:
        for item in report:
            if item["ok"]:
                print(f"  ok       {item['name']:<10} {item['version'] or '':<9} [{item['found']}]")
            else:
                label = "TOO OLD" if item["found"] else "MISSING"
                print(f"  {label:<8} {item['name']:<10} {item['problem']}\n           fix: {item['fix']}")
            if item["needs"] and not item["ok"]:
                print(f"           needs: {item['needs']}")
            for note in item["notes"]:
                print(f"           note: {note}")
        print("\nThe libraries labkit is compared with (installed from the lock file):")
        for item in libraries:
            print(f"  {'ok' if item['version'] else 'MISSING':<8} {item['name']:<18} {item['version'] or '':<9} "
                  f"{item['used_for']}")
        print("\nWhat the lessons need (versions checked above):")
        for item in report:
            if item["needs"]:
                print(f"  {item['name']:<10} {item['needs']}")
    needed = [i for i in report if not i["ok"] and i["name"] != "docker"]
    docker_ok = any(i["ok"] for i in report if i["name"] == "docker")
    if needed and not docker_ok:
        print("\nThe local backend cannot start every server yet: install what is missing above.")
        return 1
    print("\nReady: `labkit up` starts a lab." if not needed else
          "\nSome servers are missing locally, but Docker answers: LABKIT_BACKEND=docker labkit up")
    return 0


def cmd_bench(args) -> int:
    if "--lesson10" in args.rest:
        return bench_lesson10("--tiny" in args.rest, "--quick" in args.rest)
    return bench_main(args.rest) or 0


def bench_lesson10(tiny: bool = False, quick: bool = False) -> int:
    """`labkit bench --lesson10`: the numbers of lessons 09 and 10 on one lab of its own (3 ZooKeeper, 3 etcd,
    Redis, PostgreSQL): semaphore against mutex, election failover against the lease's timeout,
    fenced against unfenced UPDATE. The measurements are the lesson's own functions (as
    `labkit races` runs the holder-safety lesson's batches), printed with PASS / MISS."""
    from labkit.lessons import databases, elections, semaphores

    iterations, runs = (10, 1) if tiny else (100, 3) if quick else (300, 5)
    with lab_module.up(zookeeper=3, etcd=3, redis=True, postgres=True, quiet=True) as lab:
        semaphore = semaphores.bench_semaphore_vs_mutex(lab, iterations=iterations)
        update = databases.measure_fenced_update(lab, iterations=iterations)
        failover = elections.measure_failover(lab, runs=runs)
    print(f"lessons 09 and 10 ({iterations} iterations, {runs} failover run(s) per recipe)")
    targets = []
    for service, row in semaphore.items():
        print(f"  {service} semaphore / mutex acquire+release p50: {row['semaphore']['p50_ms']:.3f} / "
              f"{row['mutex']['p50_ms']:.3f} ms = {row['ratio']:.2f}")
        targets.append((f"{service} semaphore <= 1.5 x the mutex", row["ratio"] <= 1.5, row["ratio"]))
    print(f"  fenced / unfenced UPDATE p50: {update['fenced']['p50_ms']:.3f} / {update['unfenced']['p50_ms']:.3f} ms"
          f" = {update['ratio']:.2f}")
    targets.append(("fenced UPDATE <= 1.2 x the unfenced one", update["ratio"] <= 1.2, update["ratio"]))
    for recipe, row in failover.items():
        print(f"  {recipe} failover p50 {row['failover_s']:.2f} s against a {row['timeout_s']:g} s timeout "
              f"= {row['ratio']:.2f} (runs {row['runs']})")
    print("targets")
    for target, met, measured in targets:
        print(f"  {'PASS' if met else 'MISS'}  {target}  (measured {measured})")
    return 0


def cmd_torture(args) -> int:
    # here, not at the top: matplotlib and every client library take a second and more to
    # import, which `labkit status` and `labkit down` should not pay
    from labkit.torture import torture

    report = args.report or labkit_home() / "torture" / time.strftime(f"%Y%m%d-%H%M%S-{args.recipe}-seed{args.seed}")
    result = torture(args.recipe, clients=args.clients, duration=args.time, nemesis=args.nemesis, seed=args.seed,
                     fenced=args.fenced, trials=args.trials, report=report, timeout=args.timeout, hold=args.hold,
                     replay=args.replay, holders=args.holders)
    print(repr(result))
    return 0 if result.ok else 1


def cmd_races(args) -> int:
    from labkit.lessons.holder_safety import ALL_TOPOLOGIES, NEGATIVE_CONTROLS, batches

    topologies = args.topology.split(",") if args.topology else list(ALL_TOPOLOGIES)
    unknown = sorted(set(topologies) - set(ALL_TOPOLOGIES))
    if unknown:
        print(f"labkit races: unknown topology {', '.join(unknown)}; choose from {', '.join(ALL_TOPOLOGIES)}",
              file=sys.stderr)
        return 2
    rows = batches(args.recipe.split(","), topologies, args.runs, args.naive_runs, args.timeout)
    unsafe = [row for row in rows if row["rule"] not in NEGATIVE_CONTROLS and row["safe"] < row["runs"]]
    # a negative control that came out safe proves nothing about the race: say so, and fail
    blind = [row for row in rows if row["rule"] in NEGATIVE_CONTROLS and row["safe"] > 0]
    print("every holder gave up before the next one acquired" if not unsafe else f"UNSAFE: {unsafe}")
    if blind:
        print(f"NEGATIVE CONTROL SAFE in some runs (the race did not catch the wrong rule): {blind}")
    return 1 if unsafe or blind else 0


def cmd_predictions(args) -> int:
    # here, not at the top: the practice package pulls IPython and the widgets in
    from labkit.practice.calibration import course_calibration, your_predictions
    from labkit.practice.journal import Journal

    journal = Journal(args.journal) if args.journal else Journal()
    if not journal.path.exists():
        print(f"labkit predictions: no journal at {journal.path}; run a lesson first, or pass --journal "
              "notebooks/practice_scores.json", file=sys.stderr)
        return 2
    if args.lesson:
        your_predictions(args.lesson, journal)
    else:
        course_calibration(journal)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labkit", description="Real lock servers for the Distributed Locks Lab.")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start a lab that outlives this command")
    up.add_argument("--zookeeper", type=int, default=1, metavar="N", help="ZooKeeper nodes: 0, 1, 3 or 5 (default 1)")
    up.add_argument("--etcd", type=int, default=1, metavar="N", help="etcd members: 0, 1, 3 or 5 (default 1)")
    up.add_argument("--redis", action="store_true", help="a Redis primary")
    up.add_argument("--replica", action="store_true", help="a Redis primary plus an asynchronous replica")
    up.add_argument("--redlock", type=int, default=0, metavar="N",
                    help="N independent Redis primaries for Redlock (3 to 9)")
    up.add_argument("--sentinels", type=int, default=0, metavar="N",
                    help="Redis Sentinels watching the primary: 1, 3 or 5 (needs --replica)")
    up.add_argument("--backend", choices=["auto", "local", "docker"], default=None,
                    help="where servers run (default: $LABKIT_BACKEND or auto)")
    up.add_argument("--base-port", type=int, default=None, help="use consecutive ports from here")
    up.add_argument("--clocks", action="store_true",
                    help="run ZooKeeper and Redis with a steppable wall clock and a monotonic clock that can drift "
                         "(node.clock.step, node.clock.monotonic_rate; needs a C compiler)")
    up.add_argument("--postgres", action="store_true",
                    help="also a PostgreSQL server, pg1 (local backend; lesson 10 fences it)")
    up.add_argument("--network", action="store_true",
                    help="every link through the lab's fault proxy, for `labkit net ...`")
    up.add_argument("--open", action="store_true",
                    help="no login: any local user may use the servers (the default is a private lab, "
                         "whose servers ask for a secret only you can read)")
    up.set_defaults(handler=cmd_up)

    net = commands.add_parser("net", help="break or heal the network of a lab started with --network",
                              description="labkit net partition zk1 / zk2,zk3 | isolate zk1 | cut a b [--one-way] | "
                                          "delay 50ms [--jitter 5ms] [--link a,b] | loss 0.1 | heal | status")
    net.add_argument("action", choices=["partition", "isolate", "cut", "delay", "loss", "heal", "status"])
    net.add_argument("names", nargs="*", help="node and client names ('/' separates partition sides), or a value")
    net.add_argument("--one-way", action="store_true", help="cut: only the direction from the first to the second")
    net.add_argument("--jitter", default="0", help="delay: up to this much more or less (e.g. 5ms)")
    net.add_argument("--link", action="append", help="delay/loss: only this link, 'a,b' (both ways) or 'a->b'")
    net.set_defaults(handler=cmd_net)

    status = commands.add_parser("status", help="roles and states of the running lab, read live")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    down = commands.add_parser("down", help="stop the lab and any lab whose owner died")
    down.set_defaults(handler=cmd_down)

    doctor = commands.add_parser("doctor", help="what is installed, and how to install what is not")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=cmd_doctor)

    bench_command = commands.add_parser("bench", help="latency and wakeup benchmark (python -m labkit.bench)")
    bench_command.add_argument("rest", nargs=argparse.REMAINDER)
    bench_command.set_defaults(handler=cmd_bench)

    torture = commands.add_parser("torture", help="run a recipe under a seeded nemesis and judge it (exit 1: violations)")
    torture.add_argument("--recipe", default="zookeeper", help="zookeeper, etcd, redis, kazoo, etcd3-lock, zookeeper-semaphore, ...")
    torture.add_argument("--clients", type=int, default=8, help="lock client processes (default 8)")
    torture.add_argument("--time", type=float, default=60.0, help="seconds of each trial (default 60)")
    torture.add_argument("--nemesis", default="pause,kill",
                         help="comma-separated: pause,kill,expire,leader,partition,clock, and on 3 members "
                              "partition-leader,split,isolate-server (ZooKeeper: --timeout 2 or more)")
    torture.add_argument("--seed", type=int, default=42, help="the seed of the fault schedule (trial k: seed + k)")
    torture.add_argument("--fenced", dest="fenced", action="store_true", default=None,
                         help="the store rejects stale tokens (default when the recipe gives tokens)")
    torture.add_argument("--unfenced", dest="fenced", action="store_false", help="the store accepts every write")
    torture.add_argument("--trials", type=int, default=1, help="runs, each with its own schedule (default 1)")
    torture.add_argument("--timeout", type=float, default=2.0, help="session timeout / lease TTL in seconds (default 2)")
    torture.add_argument("--hold", type=float, default=0.1, help="seconds each client holds the lock (default 0.1)")
    torture.add_argument("--holders", type=int, default=1,
                         help="how many may hold a semaphore recipe at once (zookeeper-semaphore, etcd-semaphore)")
    torture.add_argument("--report", default=None, help="report folder (default: $LABKIT_HOME/torture/...)")
    torture.add_argument("--replay", default=None, metavar="REPORT", help="run the schedule of a report.json again")
    torture.set_defaults(handler=cmd_torture)

    races = commands.add_parser("races", help="does a holder give up before the next one acquires? "
                                              "each topology, N runs, on a lab of its own (exit 1: unsafe)")
    races.add_argument("--recipe", default="zookeeper,etcd", help="zookeeper, etcd or both (default)")
    races.add_argument("--topology", default=None,
                       help="client-link, follower-cut, old-leader, follower-paused (ZooKeeper) (default: all)")
    races.add_argument("--runs", type=int, default=10, help="races per topology (default 10)")
    races.add_argument("--naive-runs", type=int, default=10,
                       help="ZooKeeper races of the negative controls: server_lag=0 in follower-cut, "
                            "every answer counted in follower-paused (default 10 each)")
    races.add_argument("--timeout", type=float, default=None,
                       help="session timeout / lease TTL (default 2; follower-paused: 20)")
    races.set_defaults(handler=cmd_races)

    predictions = commands.add_parser("predictions", help="your predictions read back: made, right, skipped, "
                                                          "recurring misconceptions, per lesson and for the course")
    predictions.add_argument("--journal", default=None,
                             help="the practice journal (default: $LABKIT_PRACTICE_JOURNAL or ./practice_scores.json)")
    predictions.add_argument("--lesson", default=None, metavar="NN", help="one lesson only, e.g. 02")
    predictions.set_defaults(handler=cmd_predictions)

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        # everything after `bench` belongs to the benchmark's own options (--quick, --json ...)
        args = argparse.Namespace(command="bench", rest=argv[1:], handler=cmd_bench)
    else:
        args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except LabError as exc:
        print(f"labkit {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
