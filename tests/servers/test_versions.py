"""`labkit doctor` reads each server's version without starting it, from the real binaries
and jars, and fails a server that is too old with the lesson it would break."""
import shutil
import subprocess
import zipfile

import pytest

from labkit import cli
from labkit.servers.runners import discovery, versions

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


def debian_version(package):
    """The upstream version dpkg records: an independent witness for the parsed one."""
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian system: no dpkg-query to compare with")
    found = versions.debian_package_version(package)
    if found is None:
        pytest.skip(f"{package} is not installed as a Debian package")
    return found


def output(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def test_real_binaries_and_jar_versions_match_their_packages():
    java = versions.parse_java(output([discovery.find_java(), "-version"]))
    etcd = versions.parse_etcd(output([discovery.find_etcd(), "--version"]))
    etcdctl = versions.parse_etcd(output([discovery.find_etcdctl(), "version"]))
    redis = versions.parse_redis(output([discovery.find_redis(), "--version"]))
    zookeeper = versions.zookeeper_version(discovery.find_zookeeper().classpath)
    for name, version in [("java", java), ("etcd", etcd), ("etcdctl", etcdctl), ("redis", redis),
                          ("zookeeper", zookeeper)]:
        assert version is not None and len(version) >= 2, f"could not read the {name} version"
        assert not [need for need in versions.unmet(name, version) if need.required], (name, version)
    assert etcd == etcdctl
    assert etcd == debian_version("etcd-server")[:3]
    assert redis == debian_version("redis-server")[:3]
    assert zookeeper == debian_version("libzookeeper-java")[:3]


def test_zookeeper_version_comes_from_the_jar_not_from_dpkg(monkeypatch):
    # the jar alone must say it (a release tarball has no dpkg record)
    monkeypatch.setattr(versions, "debian_package_version", lambda package: pytest.fail("dpkg asked"))
    assert versions.zookeeper_version(discovery.find_zookeeper().classpath) >= (3, 6)


@pytest.mark.parametrize("text, expected", [
    ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', (17, 0, 15)),
    ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', (8, 0, 392)),
    ('openjdk version "21" 2023-09-19', (21,)),
])
def test_java_version_formats(text, expected):
    assert versions.parse_java(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("etcd Version: 3.4.23\nGit SHA: Not provided\nGo Version: go1.19.8", (3, 4, 23)),
    ("etcd Version: 3.5.17\nGit SHA: 507c0de\nGo Version: go1.22.9", (3, 5, 17)),
    ("etcdctl version: 3.4.23\nAPI version: 3.4", (3, 4, 23)),
    ("Go Version: go1.19.8", None),
])
def test_etcd_version_formats(text, expected):
    assert versions.parse_etcd(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0", (7, 0, 15)),
    ("Redis server v=7.2.6 sha=00000000:0 malloc=libc bits=64 build=bd81cd1340e80580", (7, 2, 6)),
    ("redis-server: command not understood", None),
])
def test_redis_version_formats(text, expected):
    assert versions.parse_redis(text) == expected


def test_release_tarball_jar_without_maven_metadata(tmp_path):
    # upstream jars carry Implementation-Version; failing that, the file name says it
    with_manifest = tmp_path / "lib" / "zookeeper-3.7.2.jar"
    with_manifest.parent.mkdir()
    with zipfile.ZipFile(with_manifest, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nImplementation-Version: 3.7.2\n")
    bare = tmp_path / "zookeeper-3.5.9.jar"
    zipfile.ZipFile(bare, "w").close()
    assert versions.zookeeper_jar_version(str(with_manifest)) == (3, 7, 2)
    assert versions.zookeeper_jar_version(str(bare)) == (3, 5, 9)
    jute = tmp_path / "lib" / "zookeeper-jute-3.7.2.jar"
    zipfile.ZipFile(jute, "w").close()
    assert versions.zookeeper_version(f"{tmp_path}/conf:{jute}:{with_manifest}") == (3, 7, 2)


def test_a_too_old_server_fails_doctor_with_the_lesson_it_breaks(monkeypatch, capsys):
    real_output = discovery._output

    def old_redis(argv):
        if argv[0] == discovery.find_redis():
            return "Redis server v=4.0.14 sha=00000000:0 malloc=jemalloc-4.0.3 bits=64 build=1"
        return real_output(argv)

    monkeypatch.setattr(discovery, "_output", old_redis)
    redis = next(item for item in discovery.doctor() if item["name"] == "redis")
    assert not redis["ok"]
    assert redis["version"] == "4.0.14"
    assert "too old" in redis["problem"] and "5.0 or later" in redis["problem"] and "C8 failover" in redis["problem"]
    assert "apt-get install -y redis-server" in redis["fix"]
    cli.main(["doctor"])
    shown = capsys.readouterr().out
    assert "TOO OLD  redis" in shown
    assert "What the lessons need" in shown and "zookeeper  3.6+ for 02" in shown


def test_an_older_but_working_server_only_gets_a_note():
    assert [need.minimum for need in versions.unmet("zookeeper", (3, 6, 4))] == [(3, 7)]
    assert not versions.unmet("zookeeper", (3, 6, 4))[0].required
    assert [need.required for need in versions.unmet("zookeeper", (3, 5, 9))] == [True, False]
    assert versions.unmet("redis", None) == []  # unknown is not judged
