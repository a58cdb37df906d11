"""A throwaway PostgreSQL cluster (Debian's postgresql-15) for tests: initdb as the OS user
postgres in a temporary directory, listening on one of the api tests' loopback addresses
(127.0.0.10-19) on a free port, with SCRAM on TCP and trust on its own socket (for the
test's own set-up statements only)."""

import os
import shutil
import socket
import subprocess
import tempfile

from tests.waiting import eventually

BIN = "/usr/lib/postgresql/15/bin"
HOSTS = [f"127.0.0.{n}" for n in range(10, 20)]


def available():
    return os.path.exists(os.path.join(BIN, "initdb")) and os.geteuid() == 0 and \
        shutil.which("runuser") is not None


def _free(host):
    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except OSError:
            return None
        return s.getsockname()[1]


def as_postgres(*argv, **kwargs):
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True,
                          text=True, timeout=120, **kwargs)


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sqldb-scram-")
        os.chmod(self.dir, 0o755)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        self.host, self.port = next((h, p) for h in HOSTS for p in [_free(h)] if p)

    def start(self):
        done = as_postgres(f"{BIN}/initdb", "-D", self.data, "--auth-local=trust",
                           "--auth-host=scram-sha-256", "-U", "postgres")
        assert done.returncode == 0, done.stderr
        done = as_postgres(f"{BIN}/pg_ctl", "-D", self.data, "-l",
                           os.path.join(self.dir, "log"), "-w", "start", "-o",
                           f"-c listen_addresses={self.host} -c port={self.port} "
                           f"-c unix_socket_directories={self.dir}")
        assert done.returncode == 0, done.stderr + self.log()
        return self

    def log(self):
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()
        except OSError:
            return ""

    def sql(self, statement):
        """Run one statement as the superuser over the socket."""
        done = as_postgres("psql", "-h", self.dir,
                           "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                           "-v", "ON_ERROR_STOP=1", "-Atc", statement)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def login(self, user, password):
        """psql over TCP (SCRAM) as `user` with a clear password: (ok, output)."""
        env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"}
        done = subprocess.run(["psql", "-h", self.host, "-p", str(self.port), "-U", user,
                               "-d", "postgres", "-w", "-Atc", "SELECT current_user"],
                              capture_output=True, text=True, env=env, timeout=60)
        return done.returncode == 0, done.stdout.strip() + done.stderr.strip()

    def stop(self):
        as_postgres(f"{BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        eventually(lambda: not os.path.exists(os.path.join(self.data, "postmaster.pid")),
                   30, "PostgreSQL to stop", interval=0.1)
        shutil.rmtree(self.dir, ignore_errors=True)
