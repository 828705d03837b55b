"""Which server versions the course needs, which lesson needs what, and how to read the
version of an installed server without starting it.

What can go wrong: a version that cannot be read (an unusual build prints something else)
is reported as unknown and not judged: `labkit doctor` says so rather than guess. A server
older than a *required* minimum makes its doctor line fail with the lesson it breaks; an
older one than a *recommended* minimum only adds a note.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import zipfile
from dataclasses import dataclass

Version = tuple[int, ...]


@dataclass(frozen=True)
class Need:
    minimum: Version
    feature: str   # what the course uses that this version brought
    lessons: str   # who needs it
    required: bool = True


# The Debian 12 packages (ZooKeeper 3.8.0, etcd 3.4.23, Redis 7.0.15, Java 17) are what the
# course is checked on; the minimums are where a lesson stops working.
NEEDS: dict[str, tuple[Need, ...]] = {
    "java": (
        Need((8,), "runs ZooKeeper 3.6+ and Curator 5", "every ZooKeeper lesson (00, 02, 04, 05, 07)"),
    ),
    "zookeeper": (
        Need((3, 6), "container nodes (lock parents that delete themselves once empty) and the 3.6 "
                     "client API Curator 5 is built on", "02 (Curator as a real peer), 04 (C25: a re-created lock parent)"),
        Need((3, 7), "enforce.auth.enabled (refuse sessions that did not authenticate)",
             "a locked-down lab (no lesson needs it yet)", required=False),
    ),
    "etcd": (
        Need((3, 4), "the v3 API by default and the metric names the dashboard reads",
             "00, 03 (leases, Mutex), 05, 06 (dashboard), 07"),
    ),
    "etcdctl": (
        Need((3, 4), "`etcdctl lock` speaking the v3 API without ETCDCTL_API=3", "03 (Go's concurrency.Mutex as a peer)"),
    ),
    "redis": (
        Need((5, 0), "REPLICAOF and CLIENT KILL TYPE replica (the failover experiments)", "01, 05 (C8 failover)"),
        Need((7, 0), "the Redis the course is checked on (6.x is end of life)", "01, 05, 07, 08", required=False),
    ),
    "postgres": (
        Need((14,), "client_connection_check_interval (a busy session notices that its client is gone)", "10 (C30)"),
    ),
}


def as_text(version: Version | None) -> str:
    return ".".join(map(str, version)) if version else "unknown"


def parse_version(text: str, pattern: str) -> Version | None:
    """The first match of ``pattern`` (its group 1 a dotted version) as a tuple of ints."""
    match = re.search(pattern, text, re.MULTILINE)
    if not match:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", match.group(1))[:3])


def parse_java(text: str) -> Version | None:
    """``openjdk version "17.0.15" 2025-04-15`` → (17, 0, 15); ``java version "1.8.0_392"`` → (8, 0, 392)."""
    match = re.search(r'version "([0-9][0-9._]*)', text)
    if not match:
        return None
    parts = [int(part) for part in re.findall(r"\d+", match.group(1))]
    if parts[0] == 1 and len(parts) > 1:  # Java 8 and older call themselves 1.x
        parts = parts[1:]
    return tuple(parts[:3])


def parse_etcd(text: str) -> Version | None:
    """``etcd Version: 3.4.23`` (etcd) or ``etcdctl version: 3.4.23`` (etcdctl) → (3, 4, 23)."""
    return parse_version(text, r"(?i)^etcd(?:ctl)? version:\s*v?([0-9][0-9.]*)")


def parse_redis(text: str) -> Version | None:
    """``Redis server v=7.0.15 sha=...`` → (7, 0, 15)."""
    return parse_version(text, r"\bv=([0-9][0-9.]*)")


def parse_postgres(text: str) -> Version | None:
    """``postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`` → (15, 18)."""
    return parse_version(text, r"\(PostgreSQL\)\s*([0-9][0-9.]*)")


def zookeeper_jar_version(jar: str) -> Version | None:
    """The version a ZooKeeper jar was built as, read from the jar itself (no server, no JVM):
    Maven's pom.properties, else the manifest's Implementation-Version, else the file name
    (``zookeeper-3.8.4.jar``)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
            pom = "META-INF/maven/org.apache.zookeeper/zookeeper/pom.properties"
            if pom in names:
                found = parse_version(archive.read(pom).decode(errors="replace"), r"^version=([0-9][0-9.]*)")
                if found:
                    return found
            if "META-INF/MANIFEST.MF" in names:
                manifest = archive.read("META-INF/MANIFEST.MF").decode(errors="replace")
                found = parse_version(manifest, r"^Implementation-Version:\s*([0-9][0-9.]*)")
                if found:
                    return found
    except (OSError, zipfile.BadZipFile):
        pass
    return parse_version(os.path.basename(os.path.realpath(jar)), r"^zookeeper-([0-9][0-9.]*[0-9])\.jar$")


def debian_package_version(package: str) -> Version | None:
    """``dpkg-query``'s upstream version of an installed package (``3.8.0-11+deb12u2`` → (3, 8, 0))."""
    try:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True,
                              timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_version(done.stdout, r"^(?:\d+:)?([0-9][0-9.]*)")


def zookeeper_version(classpath: str) -> Version | None:
    """The ZooKeeper server jar's version from a classpath (``folder:a.jar:b.jar``); Debian's
    package as a last resort."""
    jars = []
    for part in classpath.split(":"):
        if part.endswith(".jar"):
            jars.append(part)
        elif os.path.isdir(part):
            jars += glob.glob(os.path.join(part, "zookeeper-[0-9]*.jar"))
    server_jars = [j for j in jars if re.fullmatch(r"zookeeper(-[0-9.]+)?\.jar", os.path.basename(j))]
    for jar in server_jars:
        found = zookeeper_jar_version(jar)
        if found:
            return found
    if any(os.path.realpath(j).startswith("/usr/share/java/") for j in server_jars):
        return debian_package_version("libzookeeper-java")
    return None


def unmet(name: str, version: Version | None) -> list[Need]:
    """The needs of ``name`` that ``version`` does not meet (none when it is unknown)."""
    if version is None:
        return []
    return [need for need in NEEDS.get(name, ()) if version < need.minimum]


def needs_summary(name: str) -> str:
    """``3.6+ for 02, 04 (…); 3.7+ recommended for …``: what the doctor shows next to a server."""
    return "; ".join(f"{as_text(need.minimum)}+ {'for' if need.required else 'recommended for'} {need.lessons}"
                     for need in NEEDS.get(name, ()))
