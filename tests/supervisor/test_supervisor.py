"""`appliance up` as a real process tree: readiness, restarts, clean stop, first start."""

import json
import os
import queue
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from appliance import config
from appliance.supervisor import Child, child_environment
from daemons import DAEMONS
from tests import ports, processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UP = "import sys; from appliance.supervisor import main; sys.exit(main(sys.argv[1:]))"
CHILD_NAMES = ["api"] + DAEMONS


free_port = ports.free_port


# -- /proc helpers: who is whose child, and is a pid still the process we saw ----------------

def proc_stat(pid):
    """(state, ppid, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = proc_stat(int(entry))
            if info and info[1] == pid and info[0] != "Z":
                found.append(int(entry))
    return found


def descendants_of(pid):
    """{pid: start time} of every living descendant."""
    found, todo = {}, [pid]
    while todo:
        for child in children_of(todo.pop()):
            info = proc_stat(child)
            if info:
                found[child] = info[2]
                todo.append(child)
    return found


def still_alive(pid, started):
    info = proc_stat(pid)
    # A zombie is dead; a pid with another start time was reused by someone else.
    return info is not None and info[0] != "Z" and info[2] == started


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def child_named(parent, name):
    """The pid of the child of `parent` named `name` (the supervisor names each child it
    forks, as its command line is the supervisor's own), or None."""
    for pid in children_of(parent):
        if comm(pid) == name:
            return pid
    return None


# -- the supervisor under test --------------------------------------------------------------

class Up:
    """`appliance up` in `tmp_path` (its state in `state_dir`, default tmp_path/var), with
    `extra_env` added to a clean environment (no APPLIANCE_* of the caller), its stderr in
    tmp_path/`log_name`. The on-demand daemons never stop while idle unless `idle_stop`
    (APPLIANCE_IDLE_STOP_SECONDS) says after how long: these tests look at every child."""

    def __init__(self, tmp_path, state_dir=None, extra_env=None, log_name="supervisor.log",
                 idle_stop="0"):
        self.state_dir = state_dir or tmp_path / "var"
        self.api_port = free_port()
        self.dns_port = free_port()
        config_file = tmp_path / "appliance.yaml"
        config_file.write_text("{}\n")   # keeps any /etc/appliance/appliance.yaml out
        env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
        env["APPLIANCE_IDLE_STOP_SECONDS"] = idle_stop
        env.update(extra_env or {})
        self.stderr = open(tmp_path / log_name, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", UP, "--state-dir", str(self.state_dir),
             "--api-port", str(self.api_port), "--dns-port", str(self.dns_port),
             "--config", str(config_file)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.stderr)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen = []
        self.known = {}   # every descendant ever seen: {pid: start time}, for the clean-up

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))

    # Starting seven Python processes takes seconds of CPU: on a busy machine, far more
    # than on an idle one. So the waits below wait for their condition for as long as the
    # supervisor lives, with no deadline of their own; the test's timeout mark is the
    # guard against a hang.

    def wait_line(self, startswith):
        """The first line printed that starts with `startswith`: one seen already (a test
        before this one on a shared supervisor read past it), or the next such line."""
        for line in self.seen:
            if line.startswith(startswith):
                return line
        while True:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    pytest.fail(f"the supervisor exited before printing {startswith!r}; "
                                f"saw {self.seen}\n{self.log()}")
                continue
            self.seen.append(line)
            if line.startswith(startswith):
                return line

    def wait_all_children(self):
        while True:
            pids = {n: child_named(self.proc.pid, n) for n in CHILD_NAMES}
            if all(pids.values()):
                self.tree()
                return pids
            if self.proc.poll() is not None:
                pytest.fail(f"the supervisor exited; children: {pids}\n{self.log()}")
            time.sleep(0.05)

    def tree(self):
        """The living descendants of the supervisor, remembered for the clean-up."""
        found = descendants_of(self.proc.pid)
        self.known.update(found)
        return found

    def log(self):
        return self.full_log()[-4000:]

    def full_log(self):
        self.stderr.flush()
        with open(self.stderr.name, errors="replace") as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            self.tree()
            processes.stop(self.proc)
        for pid, started in self.known.items():   # never leave strays behind a failed test
            if still_alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        self.stderr.close()


@pytest.fixture
def up(tmp_path):
    running = Up(tmp_path)
    yield running
    running.close()


@pytest.fixture(scope="module")
def shared_up(tmp_path_factory):
    """One `appliance up` for the tests that only look at a running one (or kill one child
    and see it come back): starting seven processes is the seconds such a test costs. A
    test that stops the supervisor takes its own `up`."""
    running = Up(tmp_path_factory.mktemp("shared-up"))
    yield running
    running.close()


@pytest.mark.timeout(60)
def test_health_answers_and_url_is_printed(shared_up):
    up = shared_up
    line = up.wait_line("appliance API is ready at ")
    url = line.rsplit(" ", 1)[1]
    assert url == f"http://127.0.0.1:{up.api_port}"
    console = up.wait_line("web console at ")
    assert console.split()[3] == f"http://127.0.0.1:{up.api_port}/console/"
    with urllib.request.urlopen(url + "/v1/health", timeout=5) as response:
        assert response.status == 200
        assert json.load(response)["status"] == "ok"


@pytest.mark.timeout(60)
def test_killed_daemon_is_restarted_within_two_seconds(shared_up):
    up = shared_up
    victim = up.wait_all_children()["dns"]
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    replacement = None
    while time.monotonic() - killed_at < 2.0:
        replacement = child_named(up.proc.pid, "dns")
        if replacement not in (None, victim):
            break
        time.sleep(0.02)
    assert replacement not in (None, victim), up.log()
    assert "dns killed by SIGKILL" in up.log()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_everything_and_exits_zero(up, signum):
    up.wait_all_children()
    tree = up.tree()
    assert len(tree) >= len(CHILD_NAMES)
    assert processes.stop(up.proc, 10, signum) == 0, up.log()
    survivors = [pid for pid, started in tree.items() if still_alive(pid, started)]
    assert survivors == [], up.log()


@pytest.mark.timeout(120)
def test_sigkilled_supervisor_takes_its_children_along(up):
    # PR_SET_PDEATHSIG: the children get SIGTERM from the kernel when the supervisor dies.
    up.wait_all_children()
    tree = up.tree()
    up.proc.kill()
    up.proc.wait()
    # generous: each child handles its SIGTERM (the API drains, daemons finish a step), and
    # on a loaded machine (a CI beside other work) that takes seconds; the property is that
    # they go, not how fast
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        survivors = [pid for pid, started in tree.items() if still_alive(pid, started)]
        if not survivors:
            break
        time.sleep(0.05)
    assert survivors == [], (survivors, up.log())


@pytest.mark.timeout(60)
def test_admin_password_line_and_file_mode(shared_up):
    up = shared_up
    line = up.wait_line("admin password of user 'admin' is in ")
    path = line.rsplit(" ", 1)[1]
    assert path == str(up.state_dir / "admin-password")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        password = f.read().strip()
    assert password
    up.wait_line("appliance API is ready at ")
    # "never logged": the password shows up nowhere in the output
    assert password not in "\n".join(up.seen) + up.log()


def test_children_load_exactly_the_supervisors_settings(tmp_path):
    config_file = tmp_path / "appliance.yaml"
    config_file.write_text("realm_uuid: from-the-file\napi_threads: 3\n")
    outside = {"APPLIANCE_API_PORT": "1", "APPLIANCE_LOG_LEVEL": "DEBUG", "PATH": "/bin"}
    settings = config.load(config_file=str(config_file), environ=outside,
                           overrides={"api_port": 12345, "state_dir": str(tmp_path)})
    env = child_environment(settings, str(config_file), environ=outside)
    assert config.load(environ=env) == settings
    assert env["PATH"] == "/bin"


def test_restart_back_off_grows_and_is_capped():
    child = Child("dns", "daemons.dns")
    delays = []
    for deaths in range(1, 12):
        child.quick_deaths = deaths
        delays.append(child.restart_delay())
    assert delays[0] == 0.0                       # the first death restarts at once
    assert delays[1:5] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == delays[-1] == 30.0


# -- one `appliance up` per state directory; a stop leaves nothing behind ------------------

def health(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=5) as response:
        return response.status


@pytest.mark.timeout(120)
def test_a_second_up_on_the_same_state_is_refused_at_once_and_the_first_runs_on(shared_up,
                                                                            tmp_path):
    up = shared_up
    up.wait_line("appliance API is ready at ")
    first_children = up.wait_all_children()

    # other ports: what refuses it is the state directory, not a port already taken
    second = Up(tmp_path, state_dir=up.state_dir, log_name="second.log")
    try:
        assert second.proc.wait(timeout=60) == 1
        said = second.log()
        assert f"already running, pid {up.proc.pid}" in said, said
        assert str(up.state_dir / "appliance-up.pid") in said
        assert second.tree() == {}        # it started nothing
    finally:
        second.close()

    assert up.proc.poll() is None
    assert health(up.api_port) == 200
    assert {n: child_named(up.proc.pid, n) for n in CHILD_NAMES} == first_children
    with open(up.state_dir / "appliance-up.pid") as f:
        assert f.read().strip() == str(up.proc.pid)


@pytest.mark.timeout(120)
def test_a_lock_file_left_by_a_crash_does_not_block_a_start(tmp_path):
    state = tmp_path / "var"
    state.mkdir()
    (state / "appliance-up.pid").write_text("999999999\n")    # no lock held on it
    running = Up(tmp_path)
    try:
        running.wait_line("appliance API is ready at ")
        assert health(running.api_port) == 200
    finally:
        running.close()


SUPERVISE_LB_CHILD = """
import signal, sys
from appliance import config, supervisor
settings = config.load(environ={}, overrides={"state_dir": sys.argv[1]})
supervisor.claim_state(settings["state_dir"])
sup = supervisor.Supervisor(settings)
sup.children = [supervisor.Child("lbnode", "tests.supervisor.lb_child")]
supervisor.install_stop_signals(sup)
sys.exit(sup.run())
"""


def listening(address, port):
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stop_ends_an_nginx_that_a_child_started_as_the_lb_driver_does(tmp_path, signum):
    """The real supervisor loop and stop, with one child: tests/supervisor/lb_child.py, which
    starts a real nginx through the LB node driver (daemonized, a session of its own)."""
    from tests.nginx import require_nginx
    require_nginx()
    base = tmp_path / "node"
    base.mkdir()
    log = open(tmp_path / "supervisor.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISE_LB_CHILD, str(tmp_path / "var")], cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")},
             "LB_CHILD_BASE": str(base)},
        stdout=subprocess.DEVNULL, stderr=log)
    nginx = None
    known = {}
    try:
        while not (base / "nginx.json").exists():
            assert proc.poll() is None, (tmp_path / "supervisor.log").read_text()
            time.sleep(0.05)
        nginx = json.loads((base / "nginx.json").read_text())
        known = descendants_of(proc.pid)
        assert nginx["pid"] in known          # its master was adopted by the supervisor
        assert children_of(nginx["pid"])      # and has workers
        assert listening(nginx["address"], nginx["port"])

        assert processes.stop(proc, 30, signum) == 0, (tmp_path / "supervisor.log").read_text()

        survivors = [pid for pid, started in known.items() if still_alive(pid, started)]
        assert survivors == []
        assert not listening(nginx["address"], nginx["port"])
        assert not (tmp_path / "var" / "appliance-up.adopted").exists()   # nothing left
    finally:
        if proc.poll() is None:
            processes.stop(proc)
        for pid, started in known.items():
            if still_alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        log.close()


CLAIM_STATE = """
import sys
from appliance import supervisor
supervisor.claim_state(sys.argv[1])
"""


@pytest.mark.timeout(120)
def test_what_a_killed_supervisor_left_running_is_stopped_by_the_next_start(tmp_path):
    """SIGKILL leaves no chance to stop anything, and PDEATHSIG reaches only the children:
    the daemonized nginx survives. The next start on the same state (claim_state, what
    `appliance up` runs first) stops it from the record the first one kept."""
    from tests.nginx import require_nginx
    require_nginx()
    base = tmp_path / "node"
    base.mkdir()
    state = tmp_path / "var"
    log = open(tmp_path / "supervisor.log", "wb")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")},
           "LB_CHILD_BASE": str(base)}
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISE_LB_CHILD, str(state)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    known = {}
    try:
        while not (base / "nginx.json").exists():
            assert proc.poll() is None, (tmp_path / "supervisor.log").read_text()
            time.sleep(0.05)
        nginx = json.loads((base / "nginx.json").read_text())
        adopted = state / "appliance-up.adopted"
        while str(nginx["pid"]) not in (json.loads(adopted.read_text())
                                        if adopted.exists() else {}):
            time.sleep(0.1)
        known = descendants_of(proc.pid)
        proc.kill()
        proc.wait()
        assert listening(nginx["address"], nginx["port"])        # the leftover

        claimed = subprocess.run([sys.executable, "-c", CLAIM_STATE, str(state)], cwd=ROOT,
                                 env=env, capture_output=True, text=True, timeout=60)

        assert claimed.returncode == 0, claimed.stderr
        assert f"({nginx['pid']})" in claimed.stderr           # it says what it stopped
        survivors = [pid for pid, started in known.items() if still_alive(pid, started)]
        assert survivors == []
        assert not listening(nginx["address"], nginx["port"])
        assert not adopted.exists()
    finally:
        if proc.poll() is None:
            processes.stop(proc)
        for pid, started in known.items():
            if still_alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        log.close()


SUPERVISE_PG_CHILD = SUPERVISE_LB_CHILD.replace("tests.supervisor.lb_child",
                                                "tests.supervisor.pg_child")


@pytest.mark.timeout(120)
def test_stop_ends_a_postgresql_that_a_child_started_with_a_client_connected(tmp_path):
    """A child starts PostgreSQL as the DBaaS driver does (tests/supervisor/pg_child.py);
    a client outside the run holds a session. PostgreSQL's SIGTERM would wait for that
    client (a "smart" shutdown) until the SIGKILL; the stop asks with SIGINT ("fast"):
    the client is disconnected and nothing needed killing."""
    import pwd
    import shutil
    import tempfile
    from tests.sqldb.pgnode import require_postgres
    require_postgres()
    # the OS user postgres must reach it; a socket path must be short
    base = tempfile.mkdtemp(prefix="supg-", dir="/tmp")
    postgres = pwd.getpwnam("postgres")
    os.chmod(base, 0o755)
    os.chown(base, postgres.pw_uid, postgres.pw_gid)
    port = free_port()
    log_path = tmp_path / "supervisor.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISE_PG_CHILD, str(tmp_path / "var")], cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")},
             "PG_CHILD_BASE": base, "PG_CHILD_PORT": str(port)},
        stdout=subprocess.DEVNULL, stderr=log)
    known, client = {}, None
    try:
        while not os.path.exists(os.path.join(base, "ready")):
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.05)
        with open(os.path.join(base, "ready")) as f:
            postmaster = int(f.read())
        client = subprocess.Popen(
            ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
             "select pg_sleep(600)"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        while "pg_sleep" not in subprocess.run(
                ["psql", "-X", "-At", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                 "-c", "select query from pg_stat_activity where query like '%pg_sleep(600)%'"
                 " and pid <> pg_backend_pid()"],
                capture_output=True, text=True).stdout:
            time.sleep(0.1)
        known = descendants_of(proc.pid)
        assert postmaster in known            # adopted by the supervisor

        assert processes.stop(proc, 60, signal.SIGTERM) == 0, log_path.read_text()

        survivors = [pid for pid, started in known.items() if still_alive(pid, started)]
        assert survivors == []
        assert "did not stop when asked" not in log_path.read_text()
        said = client.communicate(timeout=30)[0]
        assert client.returncode != 0
        assert "terminating connection" in said or "closed the connection" in said, said
        assert not listening("127.0.0.1", port)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        if proc.poll() is None:
            processes.stop(proc)
        for pid, started in known.items():
            if still_alive(pid, started):
                os.kill(pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def _daemon_states(up, token):
    request = urllib.request.Request(f"http://127.0.0.1:{up.api_port}/v1/system/daemons",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {d["name"]: d for d in json.load(response)}


@pytest.mark.timeout(120)
def test_the_api_shows_each_daemons_state_and_a_restart(up):
    """GET /v1/system/daemons under `appliance up`: every daemon running with the pid the
    supervisor started; a daemon killed is restarted, and its new process is shown."""
    up.wait_line("appliance API is ready at ")
    with open(up.state_dir / "admin-password") as f:
        password = f.read().strip()
    body = json.dumps({"grant_type": "password", "username": "admin",
                       "password": password}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{up.api_port}/v1/iam/clients/default/actions/get_token/invoke",
        data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        token = json.load(response)["access_token"]
    pids = up.wait_all_children()
    while True:           # each daemon records its start once it runs its main
        states = _daemon_states(up, token)
        if all(states[name]["state"] == "running" for name in DAEMONS):
            break
        time.sleep(0.1)
    assert {name: states[name]["pid"] for name in DAEMONS} == \
        {name: pids[name] for name in DAEMONS}
    victim = pids["dns"]
    os.kill(victim, signal.SIGKILL)
    while True:
        dns = _daemon_states(up, token)["dns"]
        if dns["state"] == "running" and dns["pid"] != victim:
            break
        assert dns["state"] in ("running", "restarting"), dns
        time.sleep(0.05)
    assert dns["pid"] == child_named(up.proc.pid, "dns")
