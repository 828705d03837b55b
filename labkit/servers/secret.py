"""A private lab's secret: one user name and password that every server of the lab asks for.

What can go wrong without it: every user of the machine reaches 127.0.0.1, so on a shared
host (a university server, The Littlest JupyterHub) anyone could FLUSHALL another
student's Redis or delete their lock nodes. A private lab closes that:

- Redis (primary, replica, Redlock's instances, the sentinels): the ``default`` user is
  off; only the ACL user ``labkit`` with the lab's password gets in. The replica logs in
  to its primary with the same user (``masteruser``/``masterauth``), and so do the
  sentinels (``auth-user``/``auth-pass``, ``sentinel-user``/``sentinel-pass``).
- etcd: auth is enabled once the cluster has a leader; a ``root`` user (etcd requires one)
  and a ``labkit`` user, whose role reads and writes every key. Tokens are JWTs signed with
  a key of the lab, so they stay valid when a member restarts (a "simple" token would not).
- ZooKeeper: SASL DIGEST-MD5 is enforced (``enforce.auth.schemes=sasl``): the server checks
  the password against its JAAS file. Not the ``digest`` scheme: ZooKeeper accepts any
  ``user:password`` for it and leaves the checking to ACLs, which the lab's plain clients
  do not set. The four-letter words (srvr, mntr, wchc) still answer without a login.

The secret lives in the lab's run folder (0700) as ``secret.json`` (0600), next to the
server config files that hold it (0600 too). Every client labkit makes reads it from there,
so the learner never types it. What is not covered: the quorum and peer ports between a
lab's own servers, and the window between etcd's start and its ``auth enable`` (a user
who adds etcd's root user first makes the lab's start fail: it never runs open).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from labkit.servers.run_folder import labs_dir, read_state

USER = "labkit"
SECRET_FILE = "secret.json"


@dataclass(frozen=True)
class LabSecret:
    user: str
    password: str

    @property
    def redis(self) -> dict:
        """Keyword arguments for ``redis.Redis``."""
        return {"username": self.user, "password": self.password}

    @property
    def etcd(self) -> dict:
        """Keyword arguments for ``etcd3.client`` (python3-etcd3)."""
        return {"user": self.user, "password": self.password}

    @property
    def zookeeper(self) -> dict:
        """Keyword arguments for ``kazoo.client.KazooClient`` (SASL DIGEST-MD5, via pure-sasl)."""
        kazoo_retries_a_login_cut_short()
        return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": self.user, "password": self.password}}

    def __repr__(self) -> str:  # never print the password by accident
        return f"LabSecret(user={self.user!r}, password=...)"


def kazoo_retries_a_login_cut_short() -> None:
    """kazoo 2.11 takes a connection dropped during the SASL exchange for a refused login:
    AUTH_FAILED, and the client never connects again. In a lab a drop is a server killed,
    restarted or closing an expired session at that moment, so make it what it is, a dropped
    connection: kazoo reconnects, and an expired session then says SESSION_EXPIRED. The
    price: a wrong password (the server drops that too) retries until the client's own
    timeout instead of failing at once; labkit's clients always have the right one."""
    from kazoo.exceptions import AuthFailedError, ConnectionDropped
    from kazoo.protocol.connection import ConnectionHandler

    login = ConnectionHandler._authenticate_with_sasl
    if getattr(login, "retries_a_dropped_connection", False):
        return

    def authenticate_with_sasl(handler, host, timeout):
        try:
            return login(handler, host, timeout)
        except AuthFailedError as error:
            if isinstance(error.__cause__, ConnectionDropped):
                raise error.__cause__ from None
            raise
    authenticate_with_sasl.retries_a_dropped_connection = True
    ConnectionHandler._authenticate_with_sasl = authenticate_with_sasl


def write_private(path: Path, text: str) -> Path:
    """Write a file only its owner can read (0600), whatever the umask."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    return path


def create_secret(run_dir: Path) -> LabSecret:
    secret = LabSecret(USER, secrets.token_hex(20))  # hex: safe in every config syntax below
    write_private(run_dir / SECRET_FILE, json.dumps({"user": secret.user, "password": secret.password}))
    return secret


def read_secret(run_dir: Path | str) -> LabSecret | None:
    """The secret of the lab in ``run_dir``; None for a lab that is not private."""
    return load_secret(Path(run_dir) / SECRET_FILE)


def load_secret(path: Path | str) -> LabSecret | None:
    """The secret in a ``secret.json`` file; None if there is none (or it is not ours to read)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return LabSecret(data["user"], data["password"])


def find_secret(address: str) -> LabSecret | None:
    """The secret of this user's lab that has a node at ``address`` ("host:port", or a
    comma-separated list of them, like a ZooKeeper connection string); None if no lab of
    this user (``$LABKIT_HOME``) has one there. Lets labkit's helpers that are handed only
    an address (``expire_session``, ``CuratorPeer``) log in like ``.netrc`` does for hosts."""
    ports = {part.rsplit(":", 1)[-1].split("/")[0] for part in address.split(",") if part}
    for run_dir in sorted(labs_dir().iterdir()):
        state = read_state(run_dir) or {}
        if any(str(node.get("port")) in ports for node in state.get("nodes", [])):
            return read_secret(run_dir)
    return None


# ---- what each server is told --------------------------------------------------------
def redis_acl(secret: LabSecret) -> str:
    """Config lines for every Redis server and sentinel of a private lab."""
    return "\n".join([
        "user default off",
        f"user {secret.user} on >{secret.password} ~* &* +@all",
        # the replica (and any node Sentinel demotes to replica) logs in to its primary
        f"masteruser {secret.user}",
        f"masterauth {secret.password}",
        "",
    ])


def zookeeper_jaas(secret: LabSecret) -> str:
    """The JAAS file a ZooKeeper server reads its one SASL DIGEST-MD5 user from."""
    return ("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  user_{secret.user}="{secret.password}";\n}};\n')


def zookeeper_client_jaas(secret: LabSecret) -> str:
    """The JAAS file a Java client (the Curator peer) logs in with."""
    return ("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{secret.user}"\n  password="{secret.password}";\n}};\n')


ZOOKEEPER_AUTH_CONFIG = [
    "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
    "enforce.auth.enabled=true",
    "enforce.auth.schemes=sasl",
]


def etcd_token_flag(run_dir: Path) -> str:
    """``--auth-token`` for a private etcd: JWTs signed with an RSA key made for this lab
    (openssl), valid for a day. Without openssl: etcd's simple tokens, which a member
    forgets when it restarts (a client of that member then needs a new connection)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return "simple"
    key, public = run_dir / "etcd-jwt.key", run_dir / "etcd-jwt.pub"
    write_private(key, "")
    subprocess.run([openssl, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run([openssl, "rsa", "-in", str(key), "-pubout", "-out", str(public)], check=True, capture_output=True)
    return f"jwt,pub-key={public},priv-key={key},sign-method=RS256,ttl=24h"


def login_for(address: str, service: str) -> dict:
    """The client keyword arguments (``LabSecret.redis`` / ``.etcd`` / ``.zookeeper``) for
    the lab at ``address`` (see ``find_secret``); empty when no private lab of this user is there."""
    secret = find_secret(address)
    return getattr(secret, service) if secret else {}
