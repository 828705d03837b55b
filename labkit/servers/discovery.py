"""Where the server binaries are: Debian/Ubuntu packages, a ZooKeeper release tarball,
Homebrew, conda. Every lookup that fails raises ServerNotFound with the install command
for each platform, before any process is started."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass

from labkit.errors import ServerNotFound

INSTALL = {
    "java": {
        "debian": "sudo apt-get install -y default-jre-headless",
        "brew": "brew install openjdk",
        "conda": "conda install -c conda-forge openjdk",
    },
    "zookeeper": {
        "debian": "sudo apt-get install -y zookeeper",
        "brew": "brew install zookeeper",
        "conda": "(conda-forge has no ZooKeeper server) download a release from "
                 "zookeeper.apache.org, unpack it and set ZOOKEEPER_HOME to its folder",
    },
    "etcd": {
        "debian": "sudo apt-get install -y etcd-server etcd-client",
        "brew": "brew install etcd",
        "conda": "conda install -c conda-forge etcd",
    },
    "redis": {
        "debian": "sudo apt-get install -y redis-server",
        "brew": "brew install redis",
        "conda": "conda install -c conda-forge redis-server",
    },
}

DOCKER_ALTERNATIVE = "or skip local installs: start Docker and use LABKIT_BACKEND=docker (see README)"


def install_hint(what: str) -> str:
    ways = INSTALL[what]
    return (f"install it — Debian/Ubuntu: {ways['debian']}; Homebrew: {ways['brew']}; "
            f"conda: {ways['conda']}; {DOCKER_ALTERNATIVE}")


def _which(env_var: str, *names: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for folder in extra_dirs:
            candidate = os.path.join(folder, name)
            if os.access(candidate, os.X_OK):
                return candidate
    return None


BREW_BIN = ("/opt/homebrew/bin", "/usr/local/bin")


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    found = _which("LABKIT_JAVA", "java", extra_dirs=BREW_BIN)
    if not found:
        raise ServerNotFound("Java was not found: ZooKeeper is a Java program and needs it "
                             "(looked at $JAVA_HOME and PATH)", install_hint("java"))
    return found


@dataclass(frozen=True)
class ZooKeeperInstall:
    classpath: str
    where: str


def find_zookeeper() -> ZooKeeperInstall:
    """Debian's package, a release tarball in $ZOOKEEPER_HOME, or Homebrew's libexec."""
    home = os.environ.get("ZOOKEEPER_HOME")
    candidates = []
    if home:
        candidates.append(("ZOOKEEPER_HOME", home))
    candidates += [("Homebrew", p) for p in ("/opt/homebrew/opt/zookeeper/libexec",
                                             "/usr/local/opt/zookeeper/libexec")]
    if os.path.exists("/usr/share/java/zookeeper.jar"):
        conf = "/etc/zookeeper/conf" if os.path.isdir("/etc/zookeeper/conf") else ""
        classpath = ":".join(p for p in (conf, "/usr/share/java/zookeeper.jar") if p)
        if not home:
            return ZooKeeperInstall(classpath, "Debian package (/usr/share/java/zookeeper.jar)")
        candidates.append(("Debian", "/usr/share/java"))
    for where, folder in candidates:
        jars = sorted(glob.glob(os.path.join(folder, "lib", "*.jar")) + glob.glob(os.path.join(folder, "*.jar")))
        if any("zookeeper" in os.path.basename(j) for j in jars):
            conf = os.path.join(folder, "conf")
            parts = ([conf] if os.path.isdir(conf) else []) + jars
            return ZooKeeperInstall(":".join(parts), f"{where} ({folder})")
    raise ServerNotFound("the ZooKeeper server was not found (looked for Debian's "
                         "/usr/share/java/zookeeper.jar, $ZOOKEEPER_HOME/lib and Homebrew)",
                         install_hint("zookeeper"))


def find_etcd() -> str:
    found = _which("LABKIT_ETCD", "etcd", extra_dirs=BREW_BIN)
    if not found:
        raise ServerNotFound("the etcd server binary 'etcd' was not found on PATH", install_hint("etcd"))
    return found


def find_etcdctl() -> str:
    found = _which("LABKIT_ETCDCTL", "etcdctl", extra_dirs=BREW_BIN)
    if not found:
        raise ServerNotFound("'etcdctl' was not found on PATH", install_hint("etcd"))
    return found


def find_redis() -> str:
    found = _which("LABKIT_REDIS_SERVER", "redis-server", extra_dirs=BREW_BIN)
    if not found:
        raise ServerNotFound("'redis-server' was not found on PATH", install_hint("redis"))
    return found


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"? ({exc})"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else "?"


def doctor() -> list[dict]:
    """What is installed, with versions, and how to get what is missing."""
    report = []

    def check(what, finder, version_of):
        try:
            found = finder()
        except ServerNotFound as exc:
            report.append({"name": what, "ok": False, "found": None, "version": None,
                           "problem": exc.message, "fix": exc.hint})
            return
        path = found.where if isinstance(found, ZooKeeperInstall) else found
        report.append({"name": what, "ok": True, "found": path, "version": version_of(found),
                       "problem": None, "fix": None})

    check("java", find_java, lambda p: _version([p, "-version"]))
    check("zookeeper", find_zookeeper, _zookeeper_version)
    check("etcd", find_etcd, lambda p: _version([p, "--version"]))
    check("etcdctl", find_etcdctl, lambda p: _version([p, "version"]))
    check("redis", find_redis, lambda p: _version([p, "--version"]))
    report.append(_docker_check())
    return report


def _zookeeper_version(install: ZooKeeperInstall) -> str:
    for part in install.classpath.split(":"):
        folder = os.path.dirname(part) if part.endswith(".jar") else part
        for jar in glob.glob(os.path.join(folder, "zookeeper-[0-9]*.jar")):
            return os.path.basename(jar)[len("zookeeper-"):-len(".jar")]
    return "?"


def _docker_check() -> dict:
    from labkit.servers.docker_engine import engine_problem

    problem = engine_problem()
    if problem is None:
        return {"name": "docker", "ok": True, "found": "engine answers", "version": _version(["docker", "--version"]),
                "problem": None, "fix": None}
    return {"name": "docker", "ok": False, "found": None, "version": None, "problem": problem,
            "fix": "optional: the local backend needs no Docker. For containers: Debian: sudo apt-get install -y "
                   "docker.io && sudo dockerd &; macOS/Windows: start Docker Desktop"}
