"""PostgreSQL operations over one instance's directories on a node (docs/sqldb-dataplane.md).

Small functions, each one PostgreSQL tool or file: initdb, the two config files, pg_ctl
start/stop/reload, SQL through psql over the local socket, pg_basebackup, pg_rewind and
promotion. What to do when (the item, roles, failover) is the driver's (node.py).

Every program runs as the OS user `postgres` (setpriv: no PAM session, nothing logged per
call) with a clean environment and `/` as its working directory, through `host.run`.
Passwords never reach a command line: the replication and admin passwords live in a
passfile (0600) that libpq reads, and SQL goes to psql on its standard input. The driver's
own sessions run with `log_min_error_statement = panic`, so a failed statement that
carries a password or a verifier is never written to the server log.

Runs on a node from the agent: stdlib only.
"""

import grp
import hashlib
import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import stat
import time


BASE = "/var/lib/appliance/sqldb"
BIN = "/usr/lib/postgresql/{major}/bin"
OS_USER = "postgres"
LOG_TAIL = 2000
LOG_ROTATE_BYTES = 64 * 1024 ** 2
# the kernel's limit on a unix socket's path (sun_path), the terminating NUL left out
SOCKET_PATH_MAX = 107
START_SECONDS = 60
STOP_SECONDS = 60
SQL_SECONDS = 60
# the driver's sessions: its own writes (roles, databases) commit without waiting for
# synchronous standbys (a primary whose replicas are not up yet must still get its roles),
# and a failing statement is never logged with its text (it may carry a password)
DRIVER_PGOPTIONS = ("-c synchronous_commit=local -c client_min_messages=error "
                    "-c log_min_error_statement=panic -c log_statement=none "
                    "-c statement_timeout=0")
# settings whose value a hot standby checks against its primary's: fixed, so a change of
# resources never leaves a replica unable to replay (nodes_number <= 16: one sender each,
# two more per base backup under way)
MAX_CONNECTIONS = 100
MAX_WAL_SENDERS = 40
SHARED_BUFFERS_CAP_MB = 8192
# the WAL a primary keeps for a replica that falls behind (no replication slots: a dead
# member must never fill the primary's disk); one further behind is copied anew
WAL_KEEP_SIZE = "512MB"
NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,63}\Z")


class Failed(Exception):
    """An expected failure; its message is the reason the item reports (the tool's own
    words where it has some)."""


# ---- quoting --------------------------------------------------------------------------------

def ident(name):
    """An SQL identifier, quoted: any name (a `$`, a quote, spaces) is taken as it is."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise Failed(f"{name!r} is not a usable name")
    return '"' + name.replace('"', '""') + '"'


def literal(text):
    """An SQL string literal (standard_conforming_strings is on: only quotes double)."""
    if not isinstance(text, str) or "\x00" in text:
        raise Failed("a value with a NUL byte cannot be sent to PostgreSQL")
    return "'" + text.replace("'", "''") + "'"


def conf_literal(text):
    """A string value in postgresql.conf (its parser takes backslash escapes too)."""
    return "'" + str(text).replace("\\", "\\\\").replace("'", "''") + "'"


def conninfo(**fields):
    """A libpq connection string; values quoted as libpq reads them."""
    def value(v):
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"
    return " ".join(f"{k}={value(v)}" for k, v in fields.items() if v is not None)


def pgpass_line(user, password):
    """A passfile line for `user` on any host, port and database."""
    def esc(v):
        return v.replace("\\", "\\\\").replace(":", "\\:")
    if "\n" in password or "\r" in password:
        raise Failed(f"the password of {user} holds a line break")
    return f"*:*:*:{esc(user)}:{esc(password)}\n"


# ---- one instance's directories ---------------------------------------------------------------

class Cluster:
    """The paths and binaries of one instance on this node. Raises PathRefused (from
    host.path) when the node's allowed roots leave BASE out."""

    def __init__(self, host, instance, major, port, listen):
        self.host = host
        self.instance = instance
        self.major = major
        self.port = int(port)
        self.listen = listen
        self.base = host.path(f"{BASE}/{instance}")
        self.data = os.path.join(self.base, "data")
        self.run_dir = os.path.join(self.base, "run")
        self.log_dir = os.path.join(self.base, "log")
        self.log_file = os.path.join(self.log_dir, "postgresql.log")
        self.passfile = os.path.join(self.base, "pgpass")
        self.pid_file = os.path.join(self.run_dir, "postgresql.pid")
        self.bin = BIN.format(major=major)
        self.socket_dir = socket_dir(self.run_dir, self.port)

    def tool(self, name):
        return os.path.join(self.bin, name)

    @property
    def initialized(self):
        return os.path.exists(os.path.join(self.data, "PG_VERSION"))

    @property
    def standby_signal(self):
        return os.path.join(self.data, "standby.signal")


def socket_dir(run_dir, port):
    """Where the instance's unix socket goes: its run directory, unless the socket's path
    would be longer than the kernel takes (a node with a long root prefix: the
    development node of `make run` in a deep checkout, docs/dev-node.md); then a
    directory of /tmp named after the run directory, which prepare_dirs makes the OS
    user's alone."""
    if len(os.path.join(run_dir, f".s.PGSQL.{port}").encode()) <= SOCKET_PATH_MAX:
        return run_dir
    return "/tmp/appliance-pg-" + hashlib.sha256(run_dir.encode()).hexdigest()[:16]


def os_user():
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        raise Failed(f"this node has no OS user {OS_USER} (is PostgreSQL installed?)") \
            from None


def installed_majors(root="/usr/lib/postgresql"):
    """The PostgreSQL majors whose server this machine carries (BIN/postgres), ascending."""
    found = []
    for name in os.listdir(root) if os.path.isdir(root) else ():
        if name.isdigit() and os.access(os.path.join(root, name, "bin", "postgres"), os.X_OK):
            found.append(int(name))
    return sorted(found)


def data_major(c):
    """The major of the instance's data directory (its PG_VERSION), or None before initdb."""
    try:
        with open(os.path.join(c.data, "PG_VERSION")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def check_data_runnable(c):
    """A data directory is started only by the binaries of its own major. After an upgrade
    of the machine (a Debian 13 appliance on a Debian 12 one's state disk) the data of an
    older major stays as it is, stopped, with what to do: nothing here writes to it."""
    have = data_major(c)
    if have is None:
        return
    if not os.access(os.path.join(BIN.format(major=have), "postgres"), os.X_OK):
        majors = ", ".join(map(str, installed_majors())) or "none"
        raise Failed(
            f"the data directory is PostgreSQL {have}, and this node has no PostgreSQL "
            f"{have} binaries ({BIN.format(major=have)}; installed: {majors}): it stays "
            f"stopped, its data untouched. To move it to a newer major, dump it where "
            f"{have} runs and restore it into a new instance, or run pg_upgrade on a "
            f"machine with both majors (docs/sqldb.md, \"Upgrading PostgreSQL\")")


def check_installed(c):
    for tool in ("postgres", "pg_ctl", "initdb", "psql", "pg_basebackup", "pg_rewind"):
        if not os.access(c.tool(tool), os.X_OK):
            raise Failed(f"PostgreSQL {c.major} is not installed on this node "
                         f"(no {c.tool(tool)})")
    user = os_user()
    if os.geteuid() not in (0, user.pw_uid):
        # setpriv would fail with "Operation not permitted": say what it means
        me = pwd.getpwuid(os.geteuid()).pw_name if _known_uid(os.geteuid()) else \
            str(os.geteuid())
        raise Failed(f"PostgreSQL runs as the OS user {OS_USER}, and this agent runs as "
                     f"{me}, neither root nor {OS_USER}: run the agent as root (on the "
                     "development node: `make run` as root, docs/dev-node.md)")
    socket = os.path.join(c.socket_dir, f".s.PGSQL.{c.port}")
    if len(socket.encode()) > SOCKET_PATH_MAX:
        raise Failed(f"the socket path {socket} is longer than {SOCKET_PATH_MAX} bytes")


def _known_uid(uid):
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def prepare_dirs(c):
    """The instance's directory and its run and log directories, the OS user's, 0700; the
    directories above them traversable (0755) where this makes them."""
    user = os_user()
    parent = os.path.dirname(c.base)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o755, exist_ok=True)
        os.chmod(parent, 0o755)
    for d in (c.base, c.run_dir, c.log_dir):
        os.makedirs(d, mode=0o700, exist_ok=True)
        _own(d, user, 0o700)
    if c.socket_dir != c.run_dir:
        prepare_socket_dir(c.socket_dir, user)
    check_reachable(os.path.dirname(c.base), user)


def prepare_socket_dir(path, user):
    """A socket directory in /tmp (socket_dir): made here, or one already there that is
    a real directory of the OS user, mode 0700; anything else in its place (another
    user's directory, a link) is refused rather than used."""
    try:
        os.mkdir(path, 0o700)
        _own(path, user, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != user.pw_uid or \
            stat.S_IMODE(st.st_mode) != 0o700:
        raise Failed(f"the socket directory {path} is not a 0700 directory of "
                     f"{user.pw_name}: remove it")


def check_reachable(path, user):
    """Failed when the OS user cannot traverse every directory down to `path` (a test's
    node prefix inside a private temporary directory, say): initdb would fail with far
    less clear words."""
    groups = {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem} | {user.pw_gid}
    d = os.path.realpath(path)
    while True:
        st = os.stat(d)
        if st.st_uid == user.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid in groups:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            raise Failed(f"the OS user {user.pw_name} cannot reach {path}: {d} is mode "
                         f"{stat.S_IMODE(st.st_mode):04o}")
        if d == "/":
            return
        d = os.path.dirname(d)


def _own(path, user, mode):
    os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, mode)


def write_file(c, path, text, mode=0o600):
    """Write `text` as the OS user's file at the real path `path` (under the node's root
    prefix) when it differs, through the node toolbox; True when it changed."""
    user = os_user()
    path = c.host.node_path(path)
    return c.host.write_file(path, text, mode, (user.pw_uid, user.pw_gid),
                             private=(os.path.dirname(path), None, 0o700))


# ---- running programs as postgres -------------------------------------------------------------

def as_postgres(argv, env=()):
    """argv run as the OS user postgres, environment cleared but for `env`, in `/`."""
    user = os_user()
    base_env = ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8",
                f"HOME={user.pw_dir}", f"USER={OS_USER}", "PGCLIENTENCODING=UTF8"]
    wrapped = ["env", "-C", "/", "-i", *base_env, *env, *argv]
    if os.geteuid() == user.pw_uid:
        return wrapped
    return ["setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups", "--",
            *wrapped]


def run(c, argv, timeout=SQL_SECONDS, input=None, env=()):
    return c.host.run(as_postgres(argv, env), timeout=timeout, input=input)


def log_tail(c, limit=LOG_TAIL):
    try:
        with open(c.log_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()
    return "\n".join(lines[1:] if size > limit else lines).strip()


def rotate_log(c, limit=LOG_ROTATE_BYTES):
    """Keep the server's log under `limit`: past it, the log is copied to `.1` (the one
    before goes) and truncated in place. The postmaster writes it in append mode (pg_ctl's
    `-l`), so it goes on at the new end; only lines written during the copy are lost."""
    if log_size(c) <= limit:
        return False
    shutil.copyfile(c.log_file, c.log_file + ".1")
    os.truncate(c.log_file, 0)
    return True


def log_size(c):
    try:
        return os.path.getsize(c.log_file)
    except OSError:
        return 0


def log_complaint(c, offset=None, limit=600):
    """What the server's log says went wrong since `offset` (its FATAL/PANIC/ERROR lines,
    else its last lines); with no offset, from its last few kilobytes."""
    try:
        with open(c.log_file, "rb") as f:
            if offset is None:
                f.seek(0, os.SEEK_END)
                offset = max(0, f.tell() - 4000)
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    bad = [re.sub(r"^\S+ \S+ \S+ \[\d+\] (\S+@\S+ )?", "", ln) for ln in lines
           if re.search(r"\b(FATAL|PANIC|ERROR):", ln)
           or re.search(r"\b(LOG|WARNING):\s+could not", ln)]
    said = "; ".join(dict.fromkeys(bad[-3:])) if bad else "; ".join(lines[-2:])
    return said[-limit:]


def _said(output, limit=600):
    """A tool's complaint: its error/fatal lines, else its last lines."""
    lines = [ln.strip() for ln in (output or "").splitlines() if ln.strip()]
    bad = [ln for ln in lines if re.search(r"(error|fatal|panic|could not)", ln, re.I)]
    text = "; ".join(bad or lines[-3:]) or "no output"
    return text[-limit:]


# ---- initdb and the config files ------------------------------------------------------------

def sync_filesystem(path):
    """Everything written on `path`'s filesystem reaches the disk: one syncfs(2) in place
    of initdb's and pg_basebackup's fsync of each of their ~1,000 files (a journal commit
    each; their --no-sync). On a node the data directory has its disk to itself; sync(2)
    where syncfs cannot be called."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def initdb(c):
    """A new data directory, checksummed (pg_rewind needs checksums or wal_log_hints),
    peer for local connections and SCRAM for network ones. Made in a temporary directory
    and renamed into place, so a half-made one never looks like a cluster."""
    tmp = c.data + ".init"
    shutil.rmtree(tmp, ignore_errors=True)
    locale = "C.UTF-8" if os.path.isdir("/usr/lib/locale/C.utf8") else "C"
    code, out = run(c, [c.tool("initdb"), "-D", tmp, "-U", OS_USER, "--data-checksums",
                        "--auth-local=peer", "--auth-host=scram-sha-256",
                        "--encoding=UTF8", f"--locale={locale}", "--no-sync"], timeout=300)
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Failed(f"initdb failed: {_said(out)}")
    sync_filesystem(tmp)
    os.rename(tmp, c.data)


def shared_buffers_mb(ram_mb):
    """A quarter of the RAM, at least 16 MB (PostgreSQL's floor is far lower, but a
    database below that is not useful), at most SHARED_BUFFERS_CAP_MB."""
    try:
        ram = int(ram_mb)
    except (TypeError, ValueError):
        ram = 512
    return max(16, min(SHARED_BUFFERS_CAP_MB, ram // 4))


def sync_standby_names(other_names, k):
    """`ANY k ("a", "b")` over the other members, or '' (asynchronous) when k < 1."""
    if not k or k < 1 or not other_names:
        return ""
    return f"ANY {min(k, len(other_names))} (" + \
        ", ".join(f'"{n}"' for n in sorted(other_names)) + ")"


def render_conf(c, *, ram_mb, cpu, sync_names, primary_conninfo):
    cpu = max(1, int(cpu or 1))
    settings = [
        ("listen_addresses", conf_literal(c.listen)),
        ("port", str(c.port)),
        ("unix_socket_directories", conf_literal(c.socket_dir)),
        ("unix_socket_permissions", "0700"),
        ("external_pid_file", conf_literal(c.pid_file)),
        ("max_connections", str(MAX_CONNECTIONS)),
        ("shared_buffers", f"'{shared_buffers_mb(ram_mb)}MB'"),
        ("max_parallel_workers", str(min(cpu, 8))),
        ("max_parallel_workers_per_gather", str(max(1, min(cpu // 2, 4)))),
        ("password_encryption", "'scram-sha-256'"),
        ("wal_level", "'replica'"),
        ("max_wal_senders", str(MAX_WAL_SENDERS)),
        ("wal_keep_size", conf_literal(WAL_KEEP_SIZE)),
        ("wal_log_hints", "on"),
        ("hot_standby", "on"),
        ("hot_standby_feedback", "on"),
        ("synchronous_commit", "on"),
        ("synchronous_standby_names", conf_literal(sync_names)),
        ("primary_conninfo", conf_literal(primary_conninfo or "")),
        ("recovery_target_timeline", "'latest'"),
        ("logging_collector", "off"),
        ("log_line_prefix", "'%m [%p] %q%u@%d '"),
        ("log_timezone", "'UTC'"),
        ("timezone", "'UTC'"),
        ("datestyle", "'iso, mdy'"),
        ("lc_messages", "'C'"),
        ("dynamic_shared_memory_type", "posix"),
    ]
    return ("# written by the appliance agent (appliance/sqldb/node.py) on every change of the\n"
            "# instance: edits here are replaced\n"
            + "".join(f"{k} = {v}\n" for k, v in settings))


def member_sources(host):
    """The addresses a member connects from: its own, and 127.0.0.1 when it is on a loopback
    address (the kernel gives every connection to a 127.x address the source 127.0.0.1:
    HW "nodes" that share one host for tests)."""
    address = ipaddress.ip_address(host)
    out = [f"{address}/{address.max_prefixlen}"]
    if address.version == 4 and address.is_loopback and str(address) != "127.0.0.1":
        out.append("127.0.0.1/32")
    return out


def render_hba(member_hosts, client_cidrs, replicator, admin):
    """Local peer for postgres; replication and the admin (pg_rewind) from members only;
    the reserved roles refused from anywhere else; every other role from the clients'
    networks, SCRAM only."""
    lines = ["# written by the appliance agent (appliance/sqldb/node.py): edits here are "
             "replaced",
             "# TYPE  DATABASE     USER  ADDRESS  METHOD",
             f"local   all          {OS_USER}  peer"]
    sources = []
    for h in member_hosts:
        for s in member_sources(h):
            if s not in sources:
                sources.append(s)
    for s in sources:
        lines.append(f"host    replication  {replicator}  {s}  scram-sha-256")
    for s in sources:
        lines.append(f"host    all          {admin}  {s}  scram-sha-256")
    lines.append(f"host    all          {OS_USER},{replicator},{admin}  all  reject")
    lines.append("host    replication  all  all  reject")
    for cidr in client_cidrs:
        lines.append(f"host    all          all  {cidr}  scram-sha-256")
    return "\n".join(lines) + "\n"


def client_networks(cidrs):
    """The item's hba CIDRs, normalized; Failed naming the first that is not one."""
    out = []
    for cidr in cidrs or []:
        try:
            net = str(ipaddress.ip_network(str(cidr), strict=False))
        except ValueError:
            raise Failed(f"hba: {cidr!r} is not a CIDR") from None
        if net not in out:
            out.append(net)
    return out


# ---- the server's process ---------------------------------------------------------------------

def postmaster_pid(c):
    """The running postmaster's pid, or None (no pid file, or its process is gone or is
    another program's: a recycled pid)."""
    try:
        with open(os.path.join(c.data, "postmaster.pid")) as f:
            pid = int(f.readline().strip())
    except (OSError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    if not cmdline or not cmdline[0].endswith((b"postgres", b"postmaster")):
        return None
    return pid if os.path.realpath(cwd) == os.path.realpath(c.data) else None


def processes_in(c):
    """Pids of every process working in the data directory (a postmaster and its children,
    or children left behind by a killed postmaster)."""
    data = os.path.realpath(c.data)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") == data:
                out.append(int(entry))
        except OSError:
            continue
    return out


def _lock_pid(c):
    try:
        with open(os.path.join(c.data, "postmaster.pid")) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def wait_gone(c, seconds=15.0):
    """Wait for the processes left in the data directory to end (a killed postmaster's
    children notice and exit, and its parent reaps it); True when none is left. A lock
    file then left behind names a pid that is no postmaster of this directory (a zombie
    not reaped in time, or a recycled pid): PostgreSQL would take it for a running
    server and refuse to start, so it goes."""
    deadline = time.monotonic() + seconds
    while processes_in(c) or _zombie(_lock_pid(c)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    if _lock_pid(c) is not None and postmaster_pid(c) is None:
        for path in (os.path.join(c.data, "postmaster.pid"),
                     os.path.join(c.socket_dir, f".s.PGSQL.{c.port}.lock"),
                     os.path.join(c.socket_dir, f".s.PGSQL.{c.port}")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return True


# what a replica's log says, at every retry (every 5 s), when it cannot follow its primary
STUCK = {
    # it holds WAL its primary's timeline does not: pg_rewind brings it back
    "diverged": ("forked off current database system timeline",
                 "is not a child of this server's history",
                 "is ahead of the WAL flush position of this server"),
    # the primary no longer has the WAL it needs (behind by more than wal_keep_size):
    # only a new copy does
    "behind": ("has already been removed",),
}


def stuck(c):
    """"diverged", "behind" or None: why this running replica streams nothing, when its
    log's last lines say one of STUCK's and its WAL receiver is indeed not streaming."""
    if postmaster_pid(c) is None:
        return None
    lines = log_tail(c, 4000).splitlines()[-12:]
    found = next((kind for kind, said in STUCK.items()
                  if any(s in ln for ln in lines for s in said)), None)
    if found is None:
        return None
    try:
        return found if observe(c).get("receiver") != "streaming" else None
    except Failed:
        return None


def start(c, timeout=START_SECONDS):
    """pg_ctl start, waiting at most `timeout` s for the server to accept connections;
    Failed with the log's tail when it does not."""
    offset = log_size(c)
    code, out = run(c, [c.tool("pg_ctl"), "start", "-D", c.data, "-l", c.log_file, "-w",
                        "-t", str(timeout), "-s"], timeout=timeout + 15)
    if code != 0:
        said = log_complaint(c, offset) or _said(out)
        raise Failed(f"PostgreSQL did not start: {said}")


def pg_ctl_start_argv(c, timeout):
    """The unit's ExecStart (node.py): the same start as start() above."""
    return [c.tool("pg_ctl"), "start", "-D", c.data, "-l", c.log_file, "-w",
            "-t", str(timeout), "-s"]


def stop(c, mode="fast", timeout=STOP_SECONDS):
    """pg_ctl stop; `immediate` when a fast stop does not end within `timeout` s; then
    waits for every process in the data directory to end."""
    if postmaster_pid(c) is not None:
        code, out = run(c, [c.tool("pg_ctl"), "stop", "-D", c.data, "-m", mode, "-w",
                            "-t", str(timeout), "-s"], timeout=timeout + 15)
        if code != 0 and postmaster_pid(c) is not None:
            run(c, [c.tool("pg_ctl"), "stop", "-D", c.data, "-m", "immediate", "-w",
                    "-t", "30", "-s"], timeout=45)
    if not wait_gone(c):
        for pid in processes_in(c):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(c, 5.0)


def reload(c):
    code, out = run(c, [c.tool("pg_ctl"), "reload", "-D", c.data, "-s"])
    if code != 0:
        raise Failed(f"pg_ctl reload: {_said(out)}")


# ---- SQL over the local socket ----------------------------------------------------------------

class SqlError(Failed):
    """A statement PostgreSQL refused; the message is its ERROR line."""


def psql(c, sql, db="postgres", timeout=SQL_SECONDS):
    """Run `sql` (on psql's standard input, never its command line) as postgres over the
    local socket; the output's rows (unaligned, tuples only). SqlError with PostgreSQL's
    message when a statement fails."""
    code, out = run(c, [c.tool("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                        "-h", c.socket_dir, "-p", str(c.port), "-U", OS_USER, "-d", db,
                        "-f", "-"], timeout=timeout, input=sql,
                    env=[f"PGOPTIONS={DRIVER_PGOPTIONS}", "PGCONNECT_TIMEOUT=10"])
    if code != 0:
        raise SqlError(_sql_message(out))
    return out


def _sql_message(out):
    lines = [ln.strip() for ln in (out or "").splitlines() if ln.strip()]
    for ln in lines:
        m = re.search(r"(?:ERROR|FATAL):\s+(.*)$", ln)
        if m:
            return m.group(1)
    return "; ".join(lines[-2:]) or "psql failed"


def query(c, sql, db="postgres", timeout=SQL_SECONDS):
    """The one JSON value `sql` selects (its last line that parses)."""
    out = psql(c, sql, db, timeout)
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line:
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise Failed(f"no answer from PostgreSQL to {sql[:60]!r}")


OBSERVE_SQL = """
SELECT json_build_object(
  'recovery', pg_is_in_recovery(),
  'lsn', lsn::text,
  'lsn_int', pg_wal_lsn_diff(lsn, '0/0')::bigint,
  'timeline', CASE WHEN pg_is_in_recovery()
      THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver),
                    (SELECT timeline_id FROM pg_control_checkpoint()))
      ELSE ('x' || substr(pg_walfile_name(lsn), 1, 8))::bit(32)::int END,
  'streaming_from', (SELECT sender_host FROM pg_stat_wal_receiver
                     WHERE status = 'streaming'),
  'receiver', (SELECT status FROM pg_stat_wal_receiver),
  'sync_standbys', COALESCE((SELECT json_agg(application_name ORDER BY application_name)
                             FROM pg_stat_replication
                             WHERE sync_state IN ('sync', 'quorum')), '[]'::json),
  'pending_restart', (SELECT count(*) FROM pg_settings WHERE pending_restart) > 0)
FROM (SELECT CASE WHEN pg_is_in_recovery()
                  THEN GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
                  ELSE pg_current_wal_lsn() END AS lsn) AS position;
"""


def observe(c):
    """What the running server says of itself (OBSERVE_SQL's fields)."""
    return query(c, OBSERVE_SQL, timeout=15)


def promote(c, wait_seconds=60):
    """pg_promote, waiting for the end of recovery."""
    done = query(c, f"SELECT to_json(pg_promote(true, {int(wait_seconds)}));",
                 timeout=wait_seconds + 15)
    if done is not True:
        raise Failed(f"pg_promote did not end recovery within {wait_seconds} s: "
                     f"{log_complaint(c)}")


# ---- roles and databases ----------------------------------------------------------------------

def roles(c):
    """{name: stored password or None} of every role made after initdb (built-in roles and
    the bootstrap superuser are below FirstNormalObjectId, 16384)."""
    return query(c, "SELECT COALESCE(json_object_agg(rolname, rolpassword), '{}'::json) "
                    "FROM pg_authid WHERE oid >= 16384;") or {}


def databases(c):
    """{name: owner} of every database but the templates and `postgres`."""
    return query(c, "SELECT COALESCE(json_object_agg(datname, pg_get_userbyid(datdba)), "
                    "'{}'::json) FROM pg_database WHERE NOT datistemplate "
                    "AND datname <> 'postgres';") or {}


def set_system_role(c, name, password, options):
    """Create or alter a reserved role with a clear password (the server makes the SCRAM
    verifier: password_encryption); the statement is not logged (DRIVER_PGOPTIONS)."""
    psql(c, "DO $do$ BEGIN\n"
            f"  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal(name)}) THEN\n"
            f"    CREATE ROLE {ident(name)};\n"
            "  END IF;\nEND $do$;\n"
            f"ALTER ROLE {ident(name)} WITH {options} LOGIN PASSWORD {literal(password)};\n")


def create_user(c, name, verifier):
    psql(c, f"CREATE ROLE {ident(name)} WITH LOGIN PASSWORD {literal(verifier)};\n")


def alter_user(c, name, verifier):
    psql(c, f"ALTER ROLE {ident(name)} WITH LOGIN PASSWORD {literal(verifier)};\n")


def drop_user(c, name, in_databases):
    """Hand what the role owns to postgres and drop its privileges in each database, then
    drop it (DROP ROLE refuses a role that still owns or may use anything)."""
    for db in in_databases:
        psql(c, f"REASSIGN OWNED BY {ident(name)} TO {OS_USER};\n"
                f"DROP OWNED BY {ident(name)};\n", db=db)
    psql(c, f"DROP ROLE IF EXISTS {ident(name)};\n")


def connectable_databases(c):
    return query(c, "SELECT COALESCE(json_agg(datname ORDER BY datname), '[]'::json) "
                    "FROM pg_database WHERE datallowconn;") or []


def create_database(c, name, owner):
    psql(c, f"CREATE DATABASE {ident(name)} OWNER {ident(owner)};\n")


def set_owner(c, name, owner):
    psql(c, f"ALTER DATABASE {ident(name)} OWNER TO {ident(owner)};\n")


def drop_database(c, name):
    psql(c, f"DROP DATABASE IF EXISTS {ident(name)} WITH (FORCE);\n")


# ---- replicas ---------------------------------------------------------------------------------

def source_query(c, source, sql, timeout=20):
    """One JSON value from another member's server, as the admin role (passfile)."""
    code, out = run(c, [c.tool("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                        "-w", "-d", source, "-c", sql], timeout=timeout)
    if code != 0:
        raise Failed(_said(out))
    for line in reversed(out.splitlines()):
        try:
            return json.loads(line.strip())
        except ValueError:
            continue
    raise Failed("no answer")


def basebackup(c, source, timeout):
    """A new data directory copied from `source` (a conninfo of the primary, replication
    role), with the WAL to make it consistent; made in a temporary directory and renamed
    into place. Failed with pg_basebackup's words, or when it runs out of time."""
    tmp = c.data + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    code, out = run(c, [c.tool("pg_basebackup"), "-D", tmp, "-d", source, "-X", "stream",
                        "-c", "fast", "-w", "--no-sync"], timeout=timeout)
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        if code == 124:
            raise Failed(f"pg_basebackup did not finish within {timeout} s")
        raise Failed(f"pg_basebackup failed: {_said(out)}")
    sync_filesystem(tmp)
    os.rename(tmp, c.data)


def rewind(c, source, timeout):
    """pg_rewind of the (stopped) data directory onto `source` (a conninfo of the new
    primary, admin role); it runs crash recovery itself first when the server was not
    shut down cleanly. Failed with pg_rewind's words."""
    code, out = run(c, [c.tool("pg_rewind"), "--target-pgdata", c.data,
                        "--source-server", source], timeout=timeout)
    if code != 0:
        if code == 124:
            raise Failed(f"pg_rewind did not finish within {timeout} s")
        raise Failed(f"pg_rewind failed: {_said(out)}")
    return out
