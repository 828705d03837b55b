"""Private labs on a shared host: another Unix user can neither read a lab's folder nor talk
to its servers, and two users' labs never collide.

The other user is real: ``labkit-peer``, created with ``useradd`` when the tests run as root
(CI does). Its commands run with Debian's /usr/bin/python3 (the venv's python may sit
under root's home, which other users cannot execute) and a readable copy of labkit; its
refusal checks use raw sockets and HTTP, so they need no client library. Skipped, with
the reason, where there is no root or no /usr/bin/python3.
"""
import importlib.util
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import redis

import labkit
from labkit.servers.secret import SECRET_FILE

PEER = "labkit-peer"
SYSTEM_PYTHON = "/usr/bin/python3"
LABKIT_SOURCE = Path(labkit.__file__).parent


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class Peer:
    """Runs Python code as the other user, with its own HOME (so its own LABKIT_HOME)."""

    def __init__(self, name: str, python_path: str):
        self.name = name
        self.home = pwd.getpwnam(name).pw_dir
        self.python_path = python_path

    def run(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        environment = {"HOME": self.home, "PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": self.python_path,
                       "LABKIT_BACKEND": "local"}
        return subprocess.run([SYSTEM_PYTHON, "-c", textwrap.dedent(code)], user=self.name, group=self.name,
                              extra_groups=[], env=environment, cwd="/tmp", capture_output=True, text=True,
                              timeout=timeout)

    def json(self, code: str, timeout: float = 120):
        done = self.run(code, timeout)
        assert done.returncode == 0, f"{self.name}'s python failed:\n{done.stderr[-3000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def peer():
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second Unix user (labkit-peer) and runs commands as it")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"needs Debian's {SYSTEM_PYTHON} to run code as another user")
    try:
        pwd.getpwnam(PEER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", PEER], check=True)
    copy = tempfile.mkdtemp(prefix="labkit-peer-code-")
    shutil.copytree(LABKIT_SOURCE, Path(copy) / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    # the venv's packages, linked (or copied) where the peer can read them: the venv may sit
    # under root's home. Not redis: the lock's redis wants async-timeout before Python 3.11.3,
    # and Debian's python3-redis serves (same minor version, so compiled gRPC loads too).
    site = Path(importlib.util.find_spec("kazoo").origin).parent.parent
    shutil.copytree(site, Path(copy), dirs_exist_ok=True, copy_function=link_or_copy,
                    ignore=shutil.ignore_patterns("__pycache__", "redis", "redis-*", "labkit*", "*.pth"))
    for folder, _, files in os.walk(copy):
        os.chmod(folder, 0o755)
    yield Peer(PEER, copy)
    shutil.rmtree(copy, ignore_errors=True)


def test_the_lab_folder_and_its_secret_are_the_owners_alone(lab, peer):
    assert lab.private
    assert stat.S_IMODE(lab.run_dir.stat().st_mode) == 0o700
    for name in (SECRET_FILE, "zookeeper.jaas", "redis-acl.conf", "etcd-jwt.key"):
        assert stat.S_IMODE((lab.run_dir / name).stat().st_mode) == 0o600, name
    seen = peer.json(f"""
        import json, os
        found = {{}}
        for what, action in [("list", lambda: os.listdir({str(lab.run_dir)!r})),
                             ("read", lambda: open({str(lab.run_dir / SECRET_FILE)!r}).read())]:
            try:
                action()
                found[what] = "allowed"
            except PermissionError:
                found[what] = "refused"
        print(json.dumps(found))
    """)
    assert seen == {"list": "refused", "read": "refused"}


PROBES = """
import base64, json, socket, struct, urllib.error, urllib.request

def redis_reply(port, *words):
    payload = f"*{len(words)}\\r\\n".encode() + b"".join(
        f"${len(w)}\\r\\n{w}\\r\\n".encode() for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(payload)
        return conn.recv(1000).decode(errors="replace").strip()

def etcd_reply(port, path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return {"status": reply.status, "body": reply.read().decode()}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}

def zookeeper_children_error(port, path=b"/"):
    # ZooKeeper's wire protocol by hand: a new session, then getChildren (opcode 8)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        def send(payload):
            conn.sendall(struct.pack(">i", len(payload)) + payload)
        def frame():
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                data += chunk
            return data[4:]
        send(struct.pack(">iqiqi", 0, 0, 4000, 0, 16) + bytes(16) + b"\\0")
        if frame() is None:
            return "closed"
        send(struct.pack(">iii", 1, 8, len(path)) + path + b"\\0")
        reply = frame()
        return "closed" if reply is None else struct.unpack(">iqi", reply[:16])[2]

def four_letter(port, word):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(word.encode())
        return conn.recv(4096).decode(errors="replace")
"""


def test_each_server_refuses_another_user(lab, peer):
    owner_redis = lab.redis.client()
    owner_redis.set("private:key", "mine")
    owner_etcd = lab.etcd.client()
    owner_etcd.put("/private/key", "mine")
    owner_zookeeper = lab.zookeeper.client()
    owner_zookeeper.ensure_path("/private/node")
    try:
        found = peer.json(PROBES + f"""
key = base64.b64encode(b"/private/key").decode()
print(json.dumps({{
    "redis ping": redis_reply({lab.redis.port}, "PING"),
    "redis flushall": redis_reply({lab.redis.port}, "FLUSHALL"),
    "redis default login": redis_reply({lab.redis.port}, "AUTH", "guess"),
    "redlock flushall": redis_reply({lab.redlock.nodes[0].port}, "FLUSHALL"),
    "etcd put": etcd_reply({lab.etcd.nodes[0].port}, "/v3/kv/put", {{"key": key, "value": "dGhlaXJz"}}),
    "etcd delete": etcd_reply({lab.etcd.nodes[0].port}, "/v3/kv/deleterange", {{"key": key}}),
    "zookeeper getChildren": zookeeper_children_error({lab.zookeeper.nodes[0].port}),
    "zookeeper srvr": four_letter({lab.zookeeper.nodes[0].port}, "srvr"),
}}))
""")
        assert found["redis ping"].startswith("-NOAUTH"), found
        assert found["redis flushall"].startswith("-NOAUTH"), found
        assert found["redis default login"].startswith("-WRONGPASS"), found
        assert found["redlock flushall"].startswith("-NOAUTH"), found
        for call in ("etcd put", "etcd delete"):
            assert found[call]["status"] != 200 and "user name is empty" in found[call]["body"], found
        assert found["zookeeper getChildren"] != 0, found  # refused: an error code, or the connection closed
        # the four-letter words carry no login, by ZooKeeper's design: they show counters, never data
        assert "Mode:" in found["zookeeper srvr"]
        # and nothing of the owner's was touched
        assert owner_redis.get("private:key") == b"mine"
        assert owner_etcd.get("/private/key")[0] == b"mine"
        assert owner_zookeeper.exists("/private/node") is not None
    finally:
        owner_redis.delete("private:key")
        owner_etcd.delete("/private/key")
        owner_zookeeper.delete("/private", recursive=True)
        owner_zookeeper.stop()
        owner_zookeeper.close()
        owner_etcd.close()
        owner_redis.close()


def test_the_owner_logs_in_without_typing_a_password(lab):
    """Everything labkit hands the learner logs in by itself; a client made by hand without
    the lab's ``auth`` is refused."""
    assert lab.redis.client().ping()
    assert lab.etcd.etcdctl("put", "/private/etcdctl", "ok").returncode == 0
    assert lab.etcd.client().get("/private/etcdctl")[0] == b"ok"
    lab.etcd.etcdctl("del", "/private/etcdctl")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host=lab.redis.host, port=lab.redis.port).ping()
    assert redis.Redis(host=lab.redis.host, port=lab.redis.port, **lab.redis.auth).ping()


def test_an_open_lab_lets_everyone_in(peer):
    """private=False, for a lesson that shows raw access on a machine nobody else uses."""
    with labkit.up(zookeeper=0, etcd=0, redis=True, private=False, quiet=True) as open_lab:
        assert not open_lab.private and not (open_lab.run_dir / SECRET_FILE).exists()
        assert stat.S_IMODE(open_lab.run_dir.stat().st_mode) == 0o700  # its folder stays the owner's
        found = peer.json(PROBES + f"print(json.dumps(redis_reply({open_lab.redis.port}, 'PING')))")
        assert found == "+PONG"


def labkit_command(*words: str) -> list[str]:
    return [sys.executable, "-m", "labkit.cli", *words]


@pytest.mark.slow
def test_two_users_run_labs_at_once_and_down_stops_only_ones_own(lab, peer):
    theirs = peer.json("""
        import contextlib, io, json, labkit, labkit.cli
        with contextlib.redirect_stdout(io.StringIO()):  # `labkit up`, as that user would type it
            labkit.cli.main(["up", "--zookeeper", "1", "--etcd", "1", "--redis"])
        lab = labkit.attach()
        print(json.dumps({"run_dir": str(lab.run_dir), "ports": [n.port for n in lab.nodes],
                          "pids": [n.pid for n in lab.nodes]}))
    """, timeout=180)
    try:
        assert theirs["run_dir"].startswith(peer.home)  # LABKIT_HOME defaults to the user's own home
        mine = {node.port for node in lab.nodes}
        assert not mine & set(theirs["ports"])
        # my `labkit down` (my LABKIT_HOME) leaves their lab running ...
        subprocess.run(labkit_command("down"), check=True, capture_output=True, timeout=60)
        assert all(Path(f"/proc/{pid}").exists() for pid in theirs["pids"])
        # ... and theirs leaves mine: my servers still answer
        done = peer.run("import labkit.cli; labkit.cli.main(['down'])", timeout=60)
        assert done.returncode == 0, done.stderr
        assert lab.redis.client().ping()
        assert lab.zookeeper.four_letter("ruok") == "imok"
        assert not any(Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/cmdline").read_bytes()
                       for pid in theirs["pids"])
    finally:
        peer.run("import labkit; labkit.down_all(say=lambda *a: None)", timeout=60)


CLIENT_CALL = re.compile(r"(?<![\w.`])(KazooClient|redis\.Redis|RacingRedis|etcd_client|etcd3\.client)\(")  # `...` quotes one
LOGIN_WORDS = ("auth", "login", "secret", "**kwargs", "**options")


def calls_without_login(text: str) -> list[str]:
    """Each call that builds a client by hand and passes nothing that could log in."""
    found = []
    for match in CLIENT_CALL.finditer(text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        call = text[match.start():end + 1]
        defines = text[:match.start()].endswith(("def ", "class "))
        if not defines and not any(word in call for word in LOGIN_WORDS):
            found.append(" ".join(call.split()))
    return found


def test_every_client_labkit_and_the_notebooks_build_by_hand_can_log_in():
    """A lab is private by default: a KazooClient, redis.Redis or etcd client built by hand
    without the lab's login is refused. New code gets this wrong first: pass
    ``**lab.zookeeper.auth`` (``lab.redis.auth``, ``lab.etcd.auth``, ``node.auth``)."""
    assert calls_without_login("c = KazooClient(hosts=link.address,\n timeout=f(2))") == [
        "KazooClient(hosts=link.address, timeout=f(2))"]
    assert not calls_without_login("KazooClient(hosts=h, **lab.zookeeper.auth)")
    root = LABKIT_SOURCE.parent
    sources = [*LABKIT_SOURCE.rglob("*.py"), *(root / "notebooks").glob("*.ipynb")]
    offenders = {}
    for path in sources:
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"] if cell["cell_type"] == "code")
        calls = calls_without_login(text)
        if calls:
            offenders[str(path.relative_to(root))] = calls
    assert not offenders, f"clients built without the lab's login: {offenders}"
