"""Lock health, observed on real servers: hold times, wait-queue depth, lost sessions and
leases, keep-alive failures, and the servers' own numbers — and what to alert on.

    sampler = HealthSampler([ZooKeeperProbe(lab, "/locks/jobs"), EtcdProbe(lab, "/locks/jobs")]).start()
    with SteadyWorkload(zookeeper_clients, hold=0.2, think=0.8):   # real client processes, looping
        ...                                                  # inject faults here
    dashboard = Dashboard({"ZooKeeper": zookeeper_clients.history, "etcd": etcd_clients.history},
                          sampler, timeouts={"ZooKeeper": 1.5, "etcd": 2})
    dashboard.draw()
    for alert in dashboard.alerts(): print(alert)
    sampler.stop()

One idea per module: ``server_numbers`` (parse mntr, wchc, wchs, /metrics), ``sampler``
(the background sampler and its probes), ``workload`` (clients looping with think time),
``signals`` (events + samples over a window), ``alerts`` (the rules), ``dashboard`` (the figure).
"""
from labkit.health.alerts import Alert, Thresholds, alerts, longest_stall, stall_limit
from labkit.health.dashboard import Dashboard, draw_dashboard
from labkit.health.sampler import EtcdProbe, HealthSampler, Sample, ZooKeeperProbe
from labkit.health.server_numbers import (ETCD_SERIES, combine_members, etcd_numbers, parse_prometheus,
                                          parse_wchc, parse_wchs, session_hex, watch_kinds,
                                          zookeeper_numbers)
from labkit.health.signals import LEASE_LOST, SESSION_EXPIRED, Fault, HealthSignals, Loss, collect_signals
from labkit.health.workload import SteadyWorkload
from labkit.servers.services.zookeeper import parse_mntr
from labkit.stats import percentile

__all__ = ["Alert", "Dashboard", "ETCD_SERIES", "EtcdProbe", "Fault", "HealthSampler", "HealthSignals", "LEASE_LOST",
           "Loss", "SESSION_EXPIRED", "Sample", "SteadyWorkload", "Thresholds", "ZooKeeperProbe", "alerts",
           "collect_signals", "combine_members", "draw_dashboard", "etcd_numbers", "longest_stall", "parse_mntr",
           "parse_prometheus", "parse_wchc", "parse_wchs", "percentile", "session_hex", "stall_limit", "watch_kinds",
           "zookeeper_numbers"]
