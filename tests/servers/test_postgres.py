"""PostgreSQL in the lab (labkit.up(postgres=True)), the fenced table on it (C29), and how
long an advisory lock outlives its client (C30). Real servers: one shared lab for the module.
A half-open connection's lock (C30, in a network namespace): tests/lessons/test_postgres_half_open.py."""
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

import labkit
from labkit.errors import LabError, NodeStartError, ServerNotFound
from labkit.lessons import databases
from labkit.record.fenced_table import FencedTable, InvalidToken, NoPostgres, check_token
from labkit.servers.runners import discovery, versions
from labkit.servers.runners.docker_container import DockerContainer, image_binaries, lab_containers
from labkit.servers import state as lab_state
from labkit.servers.services.postgres import child_processes
from labkit.servers.services import postgres_template
from labkit.servers.services.postgres_template import template
from labkit.servers.services.postgres_leftovers import release_shared_memory, shared_memory_id
from labkit.servers.runners.process import process_state
from labkit.timing import became_true



@pytest.fixture(scope="module")
def pg_lab():
    with labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, network=True, quiet=True) as lab:
        yield lab


def segment_exists(segment: int) -> bool:
    return any(line.split()[1:2] == [str(segment)] for line in
               subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout.splitlines())


def all_gone(pids) -> bool:
    return all(process_state(pid) == "stopped" for pid in pids)


def in_containers() -> bool:
    """The Docker leg: a container's shared memory segment lives in the container's own IPC
    namespace (the host's ``ipcs`` never lists it) and goes with the container."""
    return os.environ.get("LABKIT_BACKEND") == "docker"


def server_pid(runner: dict) -> int:
    """The server's pid as the host sees it, from a node's recorded runner."""
    return DockerContainer.from_state(runner).pid if runner["backend"] == "docker" else runner["pid"]


# ---- the server ---------------------------------------------------------------------------
@pytest.mark.backend
def test_postgres_listens_on_loopback_only_and_asks_for_the_labs_password(pg_lab):
    node = pg_lab.postgres.node
    with pg_lab.postgres.connect() as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        sockets = conn.execute("SHOW unix_socket_directories").fetchone()[0]
        assert sockets in ("", node.data_dir)          # never /var/run/postgresql
    login = pg_lab.postgres.login()
    assert login["password"] == pg_lab.secret.password
    for wrong in ({**login, "password": "not-the-secret"}, {k: v for k, v in login.items() if k != "password"}):
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(**wrong).close()
    secret_file = pg_lab.run_dir / "secret.json"
    assert secret_file.stat().st_mode & 0o077 == 0
    described = pg_lab.status()["services"]["postgres"]["nodes"]
    assert described == [{"name": "pg1", "endpoint": node.endpoint, "role": "primary", "state": "running"}]


@pytest.mark.backend
def test_a_client_link_through_the_proxy_can_be_cut(pg_lab):
    with pg_lab.postgres.connect(via="client-1", connect_timeout=3) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    pg_lab.cut("client-1", "pg1")
    try:
        with pytest.raises(psycopg.OperationalError):   # a new connection on a cut link is reset
            pg_lab.postgres.connect(via="client-1", connect_timeout=3).close()
    finally:
        pg_lab.heal()


@pytest.mark.backend
def test_pause_freezes_the_open_sessions_too(pg_lab):
    node = pg_lab.postgres.node
    with pg_lab.postgres.connect() as session, ThreadPoolExecutor(1) as pool:
        node.pause()
        try:
            assert node.state == "paused"
            answer = pool.submit(lambda: session.execute("SELECT 1").fetchone())
            assert not became_true(answer.done, 0.5)   # an open session is frozen as well
        finally:
            node.resume()
        assert answer.result(timeout=10) == (1,)


@pytest.mark.backend
def test_down_leaves_no_process_no_segment_and_no_folder():
    lab = labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, quiet=True)
    node = lab.postgres.node
    with lab.postgres.connect() as conn:
        conn.execute("SELECT 1")
    postmaster, workers = node.pid, child_processes(node.pid)
    segment = shared_memory_id(node.data_dir)
    assert workers and segment is not None and (in_containers() or segment_exists(segment))
    lab.down()
    assert became_true(lambda: all_gone([postmaster, *workers]), 10)
    assert in_containers() or not segment_exists(segment)
    assert not in_containers() or not lab_containers(lab.id)
    assert not lab.run_dir.exists() and not Path(node.data_dir).exists()


@pytest.mark.backend
def test_a_postgres_lab_whose_owner_was_killed_is_reaped():
    script = textwrap.dedent("""
        import os, signal, labkit
        lab = labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, quiet=True)
        print(lab.postgres.node.pid, lab.id, lab.postgres.node.data_dir, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)   # the owner dies without cleaning up
    """)
    owner = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=os.environ)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    pid, lab_id, data_dir = owner.stdout.split()
    workers = child_processes(int(pid))
    segment = shared_memory_id(data_dir)
    assert process_state(int(pid)) != "stopped" and workers and segment is not None
    assert lab_id in lab_state.reap_orphans(log=None)
    assert became_true(lambda: all_gone([int(pid), *workers]), 10)
    assert (in_containers() or not segment_exists(segment)) and not Path(data_dir).exists()
    assert not in_containers() or not lab_containers(lab_id)
    assert not (lab_state.labs_dir() / lab_id).exists()


@pytest.mark.local_backend   # the host's own PostgreSQL
@pytest.mark.no_servers
def test_missing_postgres_says_how_to_install(monkeypatch):
    monkeypatch.setenv("LABKIT_POSTGRES_BIN", "/nonexistent/bin")
    before = set(os.listdir(lab_state.labs_dir()))
    with pytest.raises(ServerNotFound) as info:
        labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, quiet=True)
    assert "initdb and postgres were not found" in str(info.value)
    assert "apt-get install -y postgresql" in str(info.value)
    assert set(os.listdir(lab_state.labs_dir())) == before


@pytest.mark.no_servers
def test_a_uid_with_no_user_entry_needs_nss_wrapper_and_is_told_so(monkeypatch):
    # what compose's default LAB_UID or a pod's random uid meets: no line in /etc/passwd
    def nobody(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(postgres_template.pwd, "getpwuid", nobody)
    monkeypatch.setattr(postgres_template, "NSS_WRAPPER_PLACES", ("/nonexistent/libnss_wrapper.so",))
    with pytest.raises(LabError) as info:
        postgres_template.wrapper_for_nameless_uid()
    assert f"uid {os.getuid()}: this uid has no user entry" in info.value.message
    assert "LAB_UID=$(id -u)" in info.value.hint and "libnss-wrapper" in info.value.hint
    with tempfile.NamedTemporaryFile(suffix="libnss_wrapper.so") as library:
        monkeypatch.setattr(postgres_template, "NSS_WRAPPER_PLACES", (library.name,))
        assert postgres_template.wrapper_for_nameless_uid() == library.name


@pytest.mark.local_backend   # the host's own PostgreSQL
@pytest.mark.no_servers
def test_doctor_reads_the_postgres_version_and_knows_lesson_10_needs_14():
    assert versions.parse_postgres("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)") == (15, 18)
    assert versions.parse_postgres("postgres (PostgreSQL) 13.4") == (13, 4)
    assert [need.lessons for need in versions.unmet("postgres", (13, 4))] == ["10 (C30)"]
    [item] = [item for item in discovery.doctor() if item["name"] == "postgres"]
    # the version the found server says it is (Debian 12 has 15, Debian 13 17: scripts/ci/debian13.sh)
    said = subprocess.run([os.path.join(item["found"], "postgres"), "--version"],
                          capture_output=True, text=True, timeout=30).stdout
    assert item["ok"] and item["version"] == ".".join(map(str, versions.parse_postgres(said))), (item, said)


# ---- the fenced table (C29) -------------------------------------------------------------------
@pytest.mark.backend
def test_c29_the_database_refuses_the_paused_old_leaders_late_write(pg_lab):
    unfenced = databases.late_write(pg_lab, fenced=False)
    assert unfenced.late_accepted and unfenced.corrupted
    assert unfenced.final == unfenced.old_planned == unfenced.start + 10   # the new leader's +50 is gone
    fenced = databases.late_write(pg_lab, fenced=True)
    assert not fenced.late_accepted and not fenced.corrupted
    assert fenced.final == fenced.new_written == fenced.start + 50


@pytest.mark.backend
def test_a_claim_refuses_the_old_token_before_the_new_holder_writes(pg_lab):
    with FencedTable(pg_lab, "claims") as old, FencedTable(pg_lab, "claims", via="client-2") as new:
        old.put("row", 7)
        assert new.claim("row", 5)
        assert not old.write("row", 8, 4)               # refused: the row has seen token 5
        assert not new.claim("row", 3)                   # a claim never goes back either
        assert old.read("row") == (7, 5)
        assert new.update("row", lambda value: value * 2, 5)
        assert not old.update("row", lambda value: value + 1, 4)
        assert new.read("row") == (14, 5)
        new.drop()


@pytest.mark.no_servers
@pytest.mark.parametrize("token", ["3", 2.5, True, None, -1])
def test_a_token_that_is_not_a_whole_number_is_refused(token):
    with pytest.raises(InvalidToken):
        check_token(token)


def test_a_fenced_table_on_a_lab_without_postgres_says_how_to_get_one():
    with labkit.up(zookeeper=0, etcd=0, redis=True, quiet=True) as lab:
        with pytest.raises(NoPostgres, match="runs no PostgreSQL") as info:
            FencedTable(lab, "accounts")
        assert "postgres=True" in str(info.value)


@pytest.mark.backend
def test_fenced_and_unfenced_update_are_measured(pg_lab):
    result = databases.measure_fenced_update(pg_lab, iterations=30)
    assert result["fenced"]["samples"] == result["unfenced"]["samples"] == 30
    assert result["ratio"] > 0


@pytest.mark.backend
def test_c29_the_isolation_level_decides_how_the_late_write_is_refused(pg_lab):
    # the old leader read the row in its transaction before the new leader committed
    outcomes = {level: databases.late_write_isolated(pg_lab, level) for level in databases.ISOLATION_LEVELS}
    # ...and retried in a new transaction, whose snapshot sees the new token, it matches no row
    refused = "serialization error, then matched no row"
    assert outcomes == {"read committed": "matched no row", "repeatable read": refused, "serializable": refused}, outcomes


# ---- the advisory lock (C30) -------------------------------------------------------------------
@pytest.mark.backend
def test_c30_an_advisory_lock_outlives_a_killed_client_until_the_server_notices(pg_lab):
    began = time.monotonic()
    holds = databases.advisory_holds(pg_lab, check_interval=0.2, keepalive=(1, 1, 1), query_seconds=2.0)
    print(holds.rows(), f"measured in {time.monotonic() - began:.1f} s")
    # killed mid-query: its kernel closes the socket, and the connection check notices within about one interval...
    assert holds.crash_with_check < holds.check_interval + 0.5
    # ...without it the server sees the closed socket only when the query ends
    assert holds.crash_without_check >= holds.query_left - 0.05
    assert holds.crash_with_check < holds.crash_without_check


@pytest.mark.backend
def test_a_killed_server_starts_again_with_its_rows_and_a_restart_keeps_them():
    with labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, quiet=True) as lab:
        node = lab.postgres.node
        with FencedTable(lab, "survivors") as rows:
            rows.put("row", 1, token=3)
        workers = child_processes(node.pid)
        node.kill()                                    # the postmaster and every backend at once
        assert all_gone([*workers]) and node.state == "stopped"
        node.start()
        node.wait_ready()
        node.restart()                                 # fast shutdown, then start
        with FencedTable(lab, "survivors") as rows:
            assert rows.read("row") == (1, 3)         # committed before the crash: recovered from the WAL


@pytest.mark.backend
@pytest.mark.slow   # three runs of the labkit command: ~7 s
def test_cli_up_postgres_status_and_down():
    labkit_cli = [sys.executable, "-m", "labkit.cli"]
    started = subprocess.run(labkit_cli + ["up", "--zookeeper", "0", "--etcd", "0", "--postgres"],
                             capture_output=True, text=True, timeout=120, env=os.environ)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        status = subprocess.run(labkit_cli + ["status"], capture_output=True, text=True, timeout=60, env=os.environ)
        assert "pg1" in status.stdout and "primary" in status.stdout, status.stdout
        run_dir = lab_state.labs_dir() / lab_state.current_file().read_text().strip()
        [pg] = [node for node in lab_state.read_state(run_dir)["nodes"] if node["kind"] == "postgres"]
        pid, data_dir = server_pid(pg["runner"]), pg["data_dir"]
        workers = child_processes(pid)
    finally:
        stopped = subprocess.run(labkit_cli + ["down"], capture_output=True, text=True, timeout=60, env=os.environ)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert became_true(lambda: all_gone([pid, *workers]), 10)
    assert not Path(data_dir).exists() and not run_dir.exists()


@pytest.mark.backend
def test_a_server_that_cannot_start_reports_its_log_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_HOME", str(tmp_path))   # a template of its own, which we break
    backend = os.environ.get("LABKIT_BACKEND", "local")
    folder = template(image_binaries()["postgres"] if backend == "docker" else discovery.find_postgres(), backend)
    config = folder / "data" / "postgresql.conf"
    config.write_text(config.read_text() + "\nshared_buffers = 'lots'\n")
    made = []   # every folder the lab makes outside its run folder (a root lab's data), recorded as made
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *args, **kwargs: made.append(real_mkdtemp(*args, **kwargs)) or made[-1])
    with pytest.raises(NodeStartError) as info:
        labkit.up(zookeeper=0, etcd=0, redis=False, postgres=True, quiet=True)
    message = str(info.value)
    assert "pg1 exited while starting" in message and "hint:" in message
    assert "shared_buffers" in message                  # the server's own last log lines say why
    assert not any((tmp_path / "labs").iterdir())
    assert made or os.geteuid() != 0                   # as root, pg1's data folder was made outside
    assert not any(Path(folder).exists() for folder in made)


@pytest.mark.local_backend   # the host's own PostgreSQL
@pytest.mark.no_servers
def test_a_stale_postmaster_pid_never_removes_another_programs_segment(tmp_path):
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    segment = libc.shmget(0, 64, 0o600 | 0o1000)   # IPC_PRIVATE, IPC_CREAT: a segment that is not PostgreSQL's
    assert segment >= 0
    try:
        key = 0   # what the kernel shows for IPC_PRIVATE
        (tmp_path / "postmaster.pid").write_text(f"1\n{tmp_path}\n0\n5432\n\n127.0.0.1\n{key:>9} {segment:>9}\n")
        assert shared_memory_id(tmp_path) == segment
        assert not release_shared_memory(tmp_path)       # pid 1 did not make it: left alone
        assert segment_exists(segment)
    finally:
        libc.shmctl(segment, 0, None)
