"""Where the server binaries are: Debian/Ubuntu packages, a ZooKeeper release tarball,
Homebrew, conda. Every lookup that fails raises ServerNotFound with the install command
for each platform, before any process is started. ``doctor()`` also checks each version
against what the lessons need (labkit/servers/runners/versions.py)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass

from labkit.errors import ServerNotFound
from labkit.servers.runners import versions
from labkit.servers.runners.docker_engine import engine_problem

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
    "postgres": {
        "debian": "sudo apt-get install -y postgresql",
        "brew": "brew install postgresql@15",
        "conda": "conda install -c conda-forge postgresql",
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


def find_postgres() -> str:
    """The folder of PostgreSQL's server programs (initdb, postgres, psql): $LABKIT_POSTGRES_BIN,
    the folder of an ``initdb`` on PATH, Debian's /usr/lib/postgresql/<newest>/bin, Homebrew's."""
    explicit = os.environ.get("LABKIT_POSTGRES_BIN")
    folders = [explicit] if explicit else []
    on_path = shutil.which("initdb")
    if not explicit and on_path:
        folders.append(os.path.dirname(os.path.realpath(on_path)))   # Debian links some into /usr/local/bin
    if not explicit:
        debian = glob.glob("/usr/lib/postgresql/*/bin")
        major = lambda folder: int(folder.split("/")[-2]) if folder.split("/")[-2].isdigit() else 0  # noqa: E731
        folders += sorted(debian, key=major, reverse=True)   # the newest PostgreSQL first
        folders += sorted(glob.glob("/opt/homebrew/opt/postgresql*/bin") + glob.glob("/usr/local/opt/postgresql*/bin"),
                          reverse=True)
    for folder in folders:
        if all(os.access(os.path.join(folder, name), os.X_OK) for name in ("initdb", "postgres")):
            return folder
    where = f"$LABKIT_POSTGRES_BIN={explicit}" if explicit else "PATH, /usr/lib/postgresql/*/bin and Homebrew"
    ways = INSTALL["postgres"]
    raise ServerNotFound(f"PostgreSQL's initdb and postgres were not found (looked at {where})",
                         f"install it — Debian/Ubuntu: {ways['debian']}; Homebrew: {ways['brew']}; "
                         f"conda: {ways['conda']}; or set LABKIT_POSTGRES_BIN to the folder that has them; "
                         f"or run the servers in Docker (LABKIT_BACKEND=docker)")


def _output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


def doctor() -> list[dict]:
    """What is installed, with versions, whether each is new enough for the lessons, and how
    to get what is missing or too old. A server older than a required minimum is not ``ok``."""
    report = []

    def check(what, finder, version_of):
        needs = versions.needs_summary(what)
        try:
            found = finder()
        except ServerNotFound as exc:
            report.append({"name": what, "ok": False, "found": None, "version": None, "needs": needs,
                           "notes": [], "problem": exc.message, "fix": exc.hint})
            return
        path = found.where if isinstance(found, ZooKeeperInstall) else found
        version = version_of(found)
        item = {"name": what, "ok": True, "found": path, "version": versions.as_text(version), "needs": needs,
                "notes": [], "problem": None, "fix": None}
        if version is None:
            item["notes"].append("could not read its version: not checked against what the lessons need")
        for need in versions.unmet(what, version):
            if need.required:
                item["ok"] = False
                item["problem"] = (f"{what} {item['version']} is too old: the course needs {versions.as_text(need.minimum)} "
                                   f"or later for {need.feature} (lessons {need.lessons})")
                item["fix"] = "a newer one: " + install_hint("etcd" if what == "etcdctl" else what)
            else:
                item["notes"].append(f"{versions.as_text(need.minimum)} or later recommended: {need.feature} "
                                     f"({need.lessons})")
        report.append(item)

    check("java", find_java, lambda p: versions.parse_java(_output([p, "-version"])))
    check("zookeeper", find_zookeeper, lambda install: versions.zookeeper_version(install.classpath))
    check("etcd", find_etcd, lambda p: versions.parse_etcd(_output([p, "--version"])))
    check("etcdctl", find_etcdctl, lambda p: versions.parse_etcd(_output([p, "version"])))
    check("redis", find_redis, lambda p: versions.parse_redis(_output([p, "--version"])))
    check("postgres", find_postgres, lambda folder: versions.parse_postgres(_output([os.path.join(folder, "postgres"),
                                                                                      "--version"])))
    report.append(_docker_check())
    return report


def _docker_check() -> dict:
    problem = engine_problem()
    if problem is None:
        version = (_output(["docker", "--version"]).strip().splitlines() or ["?"])[0]
        return {"name": "docker", "ok": True, "found": "engine answers", "version": version, "needs": "",
                "notes": [], "problem": None, "fix": None}
    return {"name": "docker", "ok": False, "found": None, "version": None, "needs": "", "notes": [], "problem": problem,
            "fix": "optional: the local backend needs no Docker. For containers: Debian: sudo apt-get install -y "
                   "docker.io && sudo dockerd &; macOS/Windows: start Docker Desktop"}
