"""PostgreSQL's template and its user: ``initdb`` runs once per PostgreSQL version into a
template folder that every lab copies (postgres.py), and on a root host both initdb and the
server run as an unprivileged user.

Root: PostgreSQL refuses to run as root. When the lab's owner is root (CI, a container),
initdb and the server run as the unprivileged user ``postgres`` (Debian's package creates
it; ``LABKIT_POSTGRES_USER`` names another) through ``setpriv``, which execs, so the pid the
lab records is the server's own. That user cannot enter the owner's run folder (0700), so
the data folder then lives in a folder of its own under the system's temporary folder,
removed with the lab (labkit/servers/services/postgres_leftovers.py). A learner is not root and never
meets this.

Docker (``LABKIT_BACKEND=docker``): the server image (docker/Dockerfile) has PostgreSQL 15,
and initdb runs once in a throwaway container of it (the host needs no PostgreSQL), into a
template of that image's own. A container runs as the host user, as every node does, with
two differences. A non-root host user has no entry in the image's /etc/passwd, and initdb
refuses to run without one ("could not look up effective user ID"), so its container gets a
small passwd file that names that uid, mounted read-only on /etc/passwd (the server itself
looks no user up: it needs none). A root host does what the
local backend does, with the image's own ``postgres`` user, whose uid is fixed at 999 by the
Dockerfile so that the host can hand the data folder to that number: the container starts as
root, its wrapper opens the log, then ``setpriv`` drops to 999 and execs the server, which
stays the container's first process. The data folder outside the run folder is mounted at
its own path. That way needs no user on the host and nothing of the image changed at run time.

A uid with no user entry (the local backend): the lab image run by docker/compose.yaml as
the host's uid, or a Kubernetes/OpenShift pod's random uid, is nobody in the image's
/etc/passwd, and initdb refuses it the same way. There initdb runs under nss_wrapper (Debian's
libnss-wrapper, as the official postgres image does): ``LD_PRELOAD`` of its library makes the
user look-ups read a passwd and a group file of the template's folder that name this uid.
The server itself looks no user up, so it runs as it is.

What can fail: LabError (root, and no user or no setpriv to run the server as another; a uid
with no user entry and no nss_wrapper), NodeStartError with initdb's output.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from labkit.errors import LabError, NodeStartError
from labkit.servers.runners import versions
from labkit.servers.runners.docker_container import run_once
from labkit.servers.runners.docker_image import server_image_tag
from labkit.servers.services.postgres_leftovers import OUTSIDE_MARK
from labkit.servers.run_folder import labkit_home
from labkit.servers.secret import USER, write_private

IMAGE_POSTGRES_ID = 999   # the uid and gid of the server image's postgres user (docker/Dockerfile)


def server_user() -> str | None:
    """The unprivileged user that runs initdb and the server when we are root; None otherwise."""
    if os.geteuid() != 0:
        return None
    user = os.environ.get("LABKIT_POSTGRES_USER", "postgres")
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise LabError(f"PostgreSQL refuses to run as root, and there is no user {user!r} to run it as",
                       "run the lab as an ordinary user, or create one (useradd --system postgres) "
                       "or name one with LABKIT_POSTGRES_USER") from None
    return user


def as_server_user(backend: str = "local") -> list[str]:
    """The prefix that runs a program as ``server_user()`` (nothing when we are not root);
    in a container, as the image's postgres user."""
    if backend == "docker":
        if os.geteuid() != 0:
            return []
        return ["/usr/bin/setpriv", f"--reuid={IMAGE_POSTGRES_ID}", f"--regid={IMAGE_POSTGRES_ID}", "--clear-groups"]
    user = server_user()
    if user is None:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise LabError("PostgreSQL refuses to run as root, and setpriv (util-linux) is missing to run it as another user",
                       "run the lab as an ordinary user, or install util-linux")
    return [setpriv, f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def give_to_server_user(path: Path, backend: str = "local") -> None:
    """Hand a file or folder (recursively) to the server's user (only when we are root)."""
    if os.geteuid() != 0:
        return
    if backend == "docker":
        uid = gid = IMAGE_POSTGRES_ID
    else:
        entry = pwd.getpwnam(server_user())
        uid, gid = entry.pw_uid, entry.pw_gid
    for root, folders, files in os.walk(path):
        for name in [*folders, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.lchown(path, uid, gid)


def passwd_file(folder: Path) -> Path:
    """A passwd file for initdb's container run as a non-root host user: it names that uid
    (initdb refuses a user it cannot look up). Mounted read-only on the image's /etc/passwd."""
    return write_private(folder / "passwd", f"root:x:0:0:root:/root:/bin/sh\n"
                                            f"labkit:x:{os.getuid()}:{os.getgid()}:labkit:/tmp:/bin/sh\n")


NSS_WRAPPER_PLACES = ("/usr/lib/*/libnss_wrapper.so", "/usr/lib64/libnss_wrapper.so", "/usr/lib/libnss_wrapper.so",
                      "/usr/local/lib/libnss_wrapper.so")


def nss_wrapper_library() -> str | None:
    """Where libnss_wrapper.so is (Debian: /usr/lib/<arch>/), or None."""
    for pattern in NSS_WRAPPER_PLACES:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def wrapper_for_nameless_uid() -> str | None:
    """None when this uid has a user entry (initdb can look it up); else the nss_wrapper
    library initdb will run under. Raises LabError when that library is not installed."""
    try:
        pwd.getpwuid(os.getuid())
        return None
    except KeyError:
        pass
    library = nss_wrapper_library()
    if library is None:
        raise LabError(f"PostgreSQL's initdb cannot run as uid {os.getuid()}: this uid has no user entry "
                       "(no line in /etc/passwd), and nss_wrapper, which would give it one, is not installed",
                       "run the lab as a uid that exists (with docker compose: LAB_UID=$(id -u) LAB_GID=$(id -g)), "
                       "or install nss_wrapper (apt-get install libnss-wrapper)")
    return library


def nss_wrapper_environment(library: str, folder: Path) -> dict:
    """The environment that runs a program under nss_wrapper, with a passwd and a group file
    in ``folder`` that name this uid and gid."""
    group = write_private(folder / "group", f"root:x:0:\nlabkit:x:{os.getgid()}:\n")
    return dict(os.environ, LD_PRELOAD=library, NSS_WRAPPER_PASSWD=str(passwd_file(folder)),
                NSS_WRAPPER_GROUP=str(group))


def run_initdb(argv: list[str], building: Path, backend: str, wrapper: str | None = None) -> tuple[int, str]:
    """initdb's exit code and output: a local process (under the nss_wrapper library
    ``wrapper`` if given), or a throwaway container of the server image (as root, whose argv
    drops to the image's postgres user, or as the host user with the passwd file)."""
    if backend != "docker":
        env = nss_wrapper_environment(wrapper, building) if wrapper else None
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        return done.returncode, done.stdout + done.stderr
    mounts = {str(building): str(building)}
    if os.geteuid() != 0:
        mounts[str(passwd_file(building))] = "/etc/passwd"
    return run_once(argv, mounts, user=f"{os.getuid()}:{os.getgid()}")


def server_version(bin_dir: str) -> str:
    done = subprocess.run([os.path.join(bin_dir, "postgres"), "--version"], capture_output=True, text=True, timeout=15)
    return versions.as_text(versions.parse_postgres(done.stdout) if done.returncode == 0 else None)


def template(bin_dir: str, backend: str = "local") -> Path:
    """The initdb'd template folder of this PostgreSQL, made on first use (initdb took 1.2 to
    1.5 s on a busy 2-core machine; a copy of it, ~0.1 s, is what every later lab pays): it holds
    ``data/`` and ``password`` (0600). Two labs making it at once: the first rename wins.
    On the Docker backend the template is the server image's (named by its tag)."""
    if backend == "docker":
        version = "docker-" + server_image_tag().replace(":", "-").replace("/", "-")
    else:
        version = server_version(bin_dir)
    owner = "root-" if os.geteuid() == 0 else ""
    home = labkit_home() / "templates"
    folder = home / f"postgres-{owner}{version}"
    if (folder / "data" / "PG_VERSION").exists() and (folder / "password").exists():
        return folder
    wrapper = None if backend == "docker" else wrapper_for_nameless_uid()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    building = Path(tempfile.mkdtemp(prefix=OUTSIDE_MARK + "template-", dir=None if owner else home))
    password = secrets.token_hex(20)
    write_private(building / "password", password)
    pwfile = write_private(building / "pwfile", password + "\n")
    give_to_server_user(building, backend)
    code, output = run_initdb([*as_server_user(backend), os.path.join(bin_dir, "initdb"), "-D", str(building / "data"),
                               "-U", USER, f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=reject",
                               "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"], building, backend, wrapper)
    pwfile.unlink()
    for name in ("passwd", "group"):
        (building / name).unlink(missing_ok=True)
    if code != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise NodeStartError("initdb could not make the PostgreSQL template", "run `labkit doctor`", output[-2000:])
    try:
        os.rename(building, folder)
    except OSError:   # made meanwhile by another lab (or on another file system: copy it)
        if not (folder / "data" / "PG_VERSION").exists():
            shutil.copytree(building, folder, symlinks=True)
        shutil.rmtree(building, ignore_errors=True)
    return folder
