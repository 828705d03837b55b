"""A private network namespace, where one TCP connection can be made half-open: its packets
are dropped both ways, and neither end is sent a FIN or a RST. The lab's proxy cannot do that
(labkit/faults/relay.py): it stops forwarding bytes but stays a live TCP endpoint, so its
kernel answers the server's keepalive probes for the client.

No root needed: ``unshare`` makes a user namespace in which the lab's owner is root (uid 0
mapped to the owner's uid), with its own network, IPC and pid namespaces. Inside, the owner
may bring the loopback interface up, add devices and filter packets, and all of it is gone
when the namespace's first process exits: the kernel kills every process of the pid
namespace, and SysV shared memory goes with the IPC namespace.

How a connection is made half-open (``drop_port``): the receive side of ``lo`` gets an
``ingress`` qdisc, and a u32 filter on the connection's client port (as source or destination)
redirects its packets to ``labkit-sink``, an ifb device whose only qdisc is a FIFO of length
0, which drops every packet. The drop happens on the receive path, after the sender's kernel
has sent the packet, so the sender sees no error. (Dropping on ``lo``'s transmit side would
not do: the sender's TCP is then told its packet was dropped, treats it as local congestion,
and retries a keepalive probe every 0.5 s without counting it, so keepalive never gives up.)

A program that refuses uid 0 (PostgreSQL) runs under a nested user namespace
(``as_user_argv``): there the same owner is a non-zero uid.

What can fail: LabError when unprivileged user namespaces are off (a sysctl, AppArmor, a
container's seccomp profile), with what to change; LabError naming the package when ``ip``,
``tc`` or ``unshare`` is missing or a step inside fails.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from labkit.errors import LabError

# the namespaces a run gets: user (owner = root inside), network, IPC, pid; --kill-child: the
# first process inside is killed when unshare dies, and with it the whole pid namespace
UNSHARE_OPTIONS = ["--user", "--map-root-user", "--net", "--ipc", "--pid", "--fork", "--kill-child"]
SINK = "labkit-sink"
SYSTEM_FOLDERS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")   # an ordinary user's PATH may lack the sbin ones
TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}
NOT_ALLOWED_HINT = (
    "unprivileged user namespaces are needed for the half-open experiment (no root is needed). "
    "On the host: `sysctl user.max_user_namespaces` must be > 0, on older Debian kernels "
    "`sysctl kernel.unprivileged_userns_clone=1`, on Ubuntu 23.10+ "
    "`sysctl kernel.apparmor_restrict_unprivileged_userns=0`; in a Docker container, Docker's default "
    "seccomp profile refuses them: run the lesson on the host, or start the container with "
    "`--security-opt seccomp=unconfined` (docker/compose.yaml does)")


def tool(name: str, package: str) -> str:
    """The path of a system program (``ip``, ``tc``, ``unshare``), looked for on PATH and in
    the sbin folders an ordinary user's PATH may lack; LabError naming its package if absent."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SYSTEM_FOLDERS))
    if found is None:
        raise LabError(f"the program {name!r} was not found (looked on PATH and in {', '.join(SYSTEM_FOLDERS)})",
                       f"install it: apt-get install {package} (or run ./lab.sh setup as root)")
    return found


def inside_argv(argv: list[str]) -> list[str]:
    """``argv`` run as the first process of a new user + network + IPC + pid namespace."""
    return [tool("unshare", "util-linux"), *UNSHARE_OPTIONS, "--", *argv]


@functools.cache
def check_namespaces() -> None:
    """Try it: make the namespaces and run ``ip`` and ``tc`` in them, once per process.
    LabError with the reason and what to change when they are not allowed here."""
    ip, tc = tool("ip", "iproute2"), tool("tc", "iproute2")
    probe = f"{ip} link set lo up && {tc} qdisc add dev lo ingress"
    try:
        done = subprocess.run(inside_argv(["/bin/sh", "-c", probe]), capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise LabError("making a network namespace took more than 30 s", "is the machine overloaded?") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-400:]
        if "unshare" in said or "Operation not permitted" in said or "Permission denied" in said:
            raise LabError(f"this machine does not let uid {os.getuid()} make a user namespace ({said})", NOT_ALLOWED_HINT)
        raise LabError(f"ip or tc failed inside a network namespace ({said})",
                       "the kernel needs the ingress qdisc, the u32 classifier, the mirred action and ifb "
                       "(CONFIG_NET_SCH_INGRESS, CONFIG_NET_CLS_U32, CONFIG_NET_ACT_MIRRED, CONFIG_IFB)")


def as_user_argv(uid: int, gid: int) -> list[str]:
    """The prefix that runs a program, from inside the namespace, as ``uid``/``gid`` in a
    nested user namespace (both mapped to the namespace's root, that is to the lab's owner)."""
    if uid == 0:
        raise LabError("a nested user for the server must not be uid 0", "pass the lab owner's uid, or any other")
    return [tool("unshare", "util-linux"), "--user", f"--map-user={uid}", f"--map-group={gid}", "--"]


# ---- inside the namespace ------------------------------------------------------------------
def run(argv: list[str], what: str, stdin: str | None = None) -> str:
    """Run ``ip`` or ``tc`` inside the namespace; LabError with its message if it fails."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise LabError(f"{what} failed inside the network namespace: {(done.stderr or done.stdout).strip()[-400:]}",
                       "see labkit/faults/namespace.py for what the kernel must offer")
    return done.stdout


def prepare_drops() -> None:
    """Bring ``lo`` up, and make the sink (an ifb device that drops all it is given) and the
    ingress qdisc the filters of ``drop_port`` hang on."""
    ip, tc = tool("ip", "iproute2"), tool("tc", "iproute2")
    run([ip, "link", "set", "lo", "up"], "bringing lo up")
    run([ip, "link", "add", SINK, "type", "ifb"], "making the ifb sink")
    run([ip, "link", "set", SINK, "up"], "bringing the sink up")
    run([tc, "qdisc", "add", "dev", SINK, "root", "pfifo", "limit", "0"], "the sink's FIFO of length 0")
    run([tc, "qdisc", "add", "dev", "lo", "ingress"], "the ingress qdisc on lo")


def drop_ports(ports: list[int]) -> None:
    """From now on every packet to or from these local TCP ports is dropped on receipt, in
    both directions, all filters added in one ``tc`` batch (one moment for every port)."""
    lines = [f"filter add dev lo parent ffff: protocol ip prio 1 u32 match ip {side} {port} 0xffff "
             f"action mirred egress redirect dev {SINK}" for port in ports for side in ("sport", "dport")]
    run([tool("tc", "iproute2"), "-batch", "-"], "adding the drop filters", stdin="\n".join(lines) + "\n")


def dropped_packets() -> dict[tuple[str, int], int]:
    """Packets each drop filter has taken so far, by (``"sport"`` or ``"dport"``, port):
    ``("sport", p)`` counts what the client on port p sent, ``("dport", p)`` what was sent to it."""
    shown = run([tool("tc", "iproute2"), "-s", "filter", "show", "dev", "lo", "parent", "ffff:"], "reading the filters")
    counts: dict[tuple[str, int], int] = {}
    match = None
    for line in shown.splitlines():
        words = line.split()
        if words[:1] == ["match"] and words[-1] == "20":   # "match 91680000/ffff0000 at 20": the TCP ports word
            value, mask = (int(part, 16) for part in words[1].split("/"))
            match = ("sport", value >> 16) if mask == 0xFFFF0000 else ("dport", value & 0xFFFF)
        elif words[:1] == ["Sent"] and match is not None:   # "Sent 260 bytes 5 pkt (dropped 0, ...)"
            counts[match] = int(words[3])
            match = None
    return counts


def tcp_sockets() -> list[dict]:
    """This namespace's TCP sockets on IPv4: local and remote port, state, and the bytes sent
    but not yet acknowledged (``unacked``), from /proc/net/tcp."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
        found.append({"local_port": int(local.split(":")[1], 16), "remote_port": int(remote.split(":")[1], 16),
                      "state": TCP_STATES.get(int(state, 16), state), "unacked": int(queues.split(":")[0], 16)})
    return found


def socket_state(local_port: int, remote_port: int) -> dict | None:
    """The socket from ``local_port`` to ``remote_port`` in this namespace, or None."""
    return next((found for found in tcp_sockets()
                 if found["local_port"] == local_port and found["remote_port"] == remote_port), None)


def tcp_defaults() -> dict[str, int]:
    """The kernel's TCP timers in this namespace (each network namespace has its own, and a
    new one starts from the kernel's defaults, not the host's): keepalive's seconds of silence
    before the first probe (``time``), seconds between probes (``intvl``), probes unanswered
    (``probes``); the least retransmission timeout in microseconds (``rto_min_us``: 200 ms
    where the kernel has no such sysctl), and ``early_retrans`` (3 or 4: tail-loss probes on)."""
    folder = Path("/proc/sys/net/ipv4")
    found = {name: int((folder / f"tcp_keepalive_{name}").read_text()) for name in ("time", "intvl", "probes")}
    rto_min = folder / "tcp_rto_min_us"
    found["rto_min_us"] = int(rto_min.read_text()) if rto_min.exists() else 200_000
    found["early_retrans"] = int((folder / "tcp_early_retrans").read_text())
    return found
