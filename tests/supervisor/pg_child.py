"""A supervised child that starts PostgreSQL as the DBaaS node driver does
(appliance.sqldb.pg: `pg_ctl start -w` run as the OS user postgres through pg.as_postgres;
pg_ctl detaches the postmaster into a session of its own), writes the postmaster's pid to
$PG_CHILD_BASE/ready, then idles as the agent would. Run by test_supervisor's stop test,
in a supervisor of its own."""

import os
import subprocess
import time

from appliance.sqldb import pg

BIN = "/usr/lib/postgresql/15/bin"


def main():
    base = os.environ["PG_CHILD_BASE"]
    port = os.environ["PG_CHILD_PORT"]
    data = os.path.join(base, "data")
    for argv in ([f"{BIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
                 [f"{BIN}/pg_ctl", "start", "-D", data, "-l", os.path.join(base, "log"), "-w",
                  "-s", "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1"]):
        subprocess.run(pg.as_postgres(argv), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.STDOUT)
    with open(os.path.join(data, "postmaster.pid")) as f:
        pid = f.readline().strip()
    with open(os.path.join(base, "ready.tmp"), "w") as f:
        f.write(pid)
    os.rename(os.path.join(base, "ready.tmp"), os.path.join(base, "ready"))
    while True:
        time.sleep(1)
