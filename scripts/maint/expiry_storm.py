"""Run the expiry storm on real servers and write its timeline (issue #37): a 3-server
ZooKeeper whose followers wait 5 s for a silent leader, clients with 2 s sessions on the
followers, the leader frozen 3.5 s; both reconnect policies (immediate, jittered). The
scenario ``expiry-storm-incident`` reasons over the file this writes, and notebook 09 plots it
(labkit.practice.expiry_storm.reconnect_curve).

    .venv/bin/python scripts/maint/expiry_storm.py                    # 30 clients, labkit/practice/expiry_storm.json
    .venv/bin/python scripts/maint/expiry_storm.py --clients 4 --out /tmp/storm.json

Set LABKIT_HOME first if other labs run on the machine. The lab is stopped at the end.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import labkit  # noqa: E402
from labkit.practice.expiry_storm import STORM_DATA, STORM_SETTINGS, expiry_storm, peak_rate, write_storm  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--pause", type=float, default=3.5)
    parser.add_argument("--session-timeout", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=STORM_DATA)
    args = parser.parse_args(argv)
    lab = labkit.up(zookeeper=3, etcd=0, redis=False, quiet=True, zookeeper_settings=STORM_SETTINGS)
    try:
        data = expiry_storm(lab, clients=args.clients, session_timeout=args.session_timeout, pause=args.pause)
    finally:
        lab.down()
    write_storm(data, args.out)
    for run in data["runs"]:
        expired = [row["expired_at"] for row in run["clients"] if row["expired_at"] is not None]
        told = f", first told at {min(expired):.2f} s" if expired else ""
        print(f"{run['policy']}, leader frozen {run['pause']:g} s: {len(expired)}/{len(run['clients'])} sessions "
              f"expired{told} (leader resumed at {run['resumed_at']:.2f} s), "
              f"peak {peak_rate(run, data['bucket']):.0f} new sessions/s")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
