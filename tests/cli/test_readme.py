"""The README's walkthrough, line by line, against a real `appliance up` with its
development node: what a newcomer types after `make run`.

The lines are read from README.md itself (every line of a code block that starts with
`.venv/bin/appliance `, `dig `, `curl ` or `psql `, in order, comments dropped), so the
README cannot name a file that does not exist, a form the CLI no longer takes, or a step
that no longer works without this test failing. The `appliance` lines run through the
CLI's `program()` in this process, the others as the programs themselves.

The one substitution: the README's default ports become this test's, as whole numbers
wherever they appear in a line (`PORTS`): the API's 11010, the DNS server's 5353,
PostgreSQL's 5432 and the LB vhost's 8080. Nothing else of a line is changed.

One `appliance up` for the module, with Pebble (tests/secret/pebble.py) as its ACME
server, so the README's "if you run pebble" lines run too. Its state directory is in a
0755 directory of /tmp, not pytest's: the OS user postgres must reach its data through it
(docs/dev-node.md).
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from appliance import devnode
from appliance.sqldb import pg
from tests import waiting
from tests.nginx import require_nginx
from tests.secret.pebble import Pebble
from tests.sqldb.pgnode import require_postgres
from tests.supervisor.test_supervisor import Up, free_port

from .conftest import Cli

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Readme-admin-1"
PROGRAMS = (".venv/bin/appliance", "dig", "curl", "psql")
# the README's ports -> the attribute of the running walkthrough that replaces each
PORTS = {"11010": "api_port", "5353": "dns_port", "5432": "sqldb_port", "8080": "lb_port"}
PATIENCE = 120.0


def readme_lines():
    """The argument lists of the README's walkthrough lines, in order, comments dropped."""
    lines, in_block = [], False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and line.split(" ", 1)[0] in PROGRAMS:
            lines.append(shlex.split(line, comments=True))
    return lines


def with_ports(argv, ports):
    """`argv` with each README port replaced by the test's, as a whole number."""
    def one(arg):
        for readme, ours in ports.items():
            arg = re.sub(rf"(?<!\d){readme}(?!\d)", str(ours), arg)
        return arg
    return [one(arg) for arg in argv]


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory):
    require_nginx("stream")
    require_postgres()
    base = tempfile.mkdtemp(prefix="readme-", dir="/tmp")
    os.chmod(base, 0o755)
    state = os.path.join(base, "var")
    sqldb_port = free_port()
    pebble = Pebble(os.path.join(base, "pebble"), dns_port=None)
    running = Up(tmp_path_factory.mktemp("up"), state_dir=state, extra_env={
        "APPLIANCE_ADMIN_PASSWORD": PASSWORD, "APPLIANCE_SQLDB_PORT": str(sqldb_port),
        "APPLIANCE_ACME_DIRECTORY_URL": pebble.url,
        # Pebble writes its CA there when it starts, before any certificate is asked for
        "APPLIANCE_ACME_CA_BUNDLE": os.path.join(pebble.directory, "ca.pem"),
        "APPLIANCE_AGENT_POLL_WAIT": "5"})
    running.sqldb_port, running.lb_port = sqldb_port, free_port()
    running.ports = {readme: getattr(running, attr) for readme, attr in PORTS.items()}
    try:
        pebble.dns_port = running.dns_port
        pebble.start()
        running.wait_line("appliance API is ready at ")
        yield running
    finally:
        pebble.stop()
        running.tree()
        running.close()
        for run in glob.glob(os.path.join(state, devnode.ROOT,
                                          "var/lib/appliance/sqldb/*/run")):
            shutil.rmtree(pg.socket_dir(run, sqldb_port), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


def run_program(argv):
    # loopback only: no proxy of the machine may take the README's curl
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(PGCONNECT_TIMEOUT="10", NO_PROXY="*")
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_readme_walkthrough_works_on_make_run(walkthrough, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the README runs from the repository's root
    lines = readme_lines()
    firsts = {argv[0] for argv in lines}
    assert firsts == set(PROGRAMS), firsts
    # No APPLIANCE_ENDPOINT: login must find the API by the variables `appliance up` reads.
    cli = Cli(tmp_path / "config", endpoint=None)
    cli.environ = {"APPLIANCE_API_PORT": str(walkthrough.api_port),
                   "APPLIANCE_PASSWORD": PASSWORD}
    ran = []
    for line in lines:
        argv = with_ports(line, walkthrough.ports)
        if argv[0] == ".venv/bin/appliance":
            result = cli(*argv[1:])
            assert result.code == 0, (argv, result.stdout, result.stderr,
                                      walkthrough.log())
            ran.append((" ".join(argv[1:]), result.stdout, result.stderr))
        elif argv[0] == "dig":
            # the DNS daemon serves a record a moment after the API has it
            done = waiting.eventually(lambda: (lambda d: d if d.stdout.strip() else None)(
                run_program(argv)), PATIENCE, f"an answer to {argv}", interval=0.2)
            ran.append((" ".join(argv), done.stdout, done.stderr))
        else:
            done = run_program(argv)
            assert done.returncode == 0, (argv, done.stdout, done.stderr,
                                          walkthrough.log())
            ran.append((" ".join(argv), done.stdout, done.stderr))

    def out(prefix):
        return next(o for line, o, _ in ran if line.startswith(prefix))

    # the first session: IAM, secrets, elements and their zone, the repository
    assert "logged in to http://127.0.0.1:" in out("login")
    assert "(hidden)" in out("secret passwords add") and "ACTIVE" in out("secret passwords")
    assert re.search(r"ACTIVE\s+dns\.domains\.\$zone\.records\.\$www\s",
                     out("em install"))
    records = out("dns records list").splitlines()
    assert records[0].split() == ["UUID", "NAME", "TYPE", "ADDRESS", "CONTENT", "TTL",
                                  "DISABLED"]
    assert any(re.search(r"\bwww\s+A\s+10\.0\.0\.10\b", row) for row in records)
    available = out("elements available").splitlines()
    hello = dict(zip(available[0].split(),
                     next(row for row in available if " hello " in row).split()))
    assert (hello["VERSION"], hello["INSTALLED"]) == ("1.1.0", "1.0.0")
    assert "Command-line client" in out("--help")
    element = cli("--json", "em", "show", "hello").json()
    assert (element["version"], element["status"]) == ("1.1.0", "ACTIVE")

    # DNS, from our server on its port
    assert out("dig ").split() == ["10.0.0.10"]

    # a trial hypervisor and a VM node on it
    trial = cli("--json", "compute", "hypervisors", "show", "trial").json()
    assert trial["status"] == "ACTIVE" and trial["driver_spec"]["storage_pool"] == \
        "default-pool" and trial["all_cores"] > 0
    vm = cli("--json", "compute", "nodes", "show", "vm1").json()
    assert (vm["status"], vm["hypervisor"]) == ("ACTIVE", trial["uuid"])
    assert vm["default_network"]["ipv4"]
    assert vm["disk_spec"]["image"] == (ROOT / "examples/trial-disk.raw").as_uri()
    rows = {row.split()[1]: row for row in out("compute nodes list").splitlines()[1:]}
    assert "127.0.0.1" in rows[devnode.NAME] and "trial" in rows["vm1"]

    # an LB on the development node, and curl through it to the API's health
    assert json.loads(out("curl "))["status"] == "ok"
    lb = cli("--json", "lb", "show", "front").json()
    assert (lb["status"], lb["ipsv4"]) == ("ACTIVE", ["127.0.0.1"])

    # a config, delivered under the development node's root
    node_root = Path(walkthrough.state_dir) / devnode.ROOT
    assert (node_root / "etc/motd.d/hello").read_text() == "hello from make run"
    assert not Path("/etc/motd.d/hello").exists()

    # a database on the development node, and psql connecting with its user
    assert re.search(r"^\s*app\s*\|\s*app_db\s*$", out("psql "), re.M), out("psql ")
    instance = cli("--json", "sqldb", "instances", "show", "orders").json()
    assert (instance["status"], instance["ipsv4"]) == ("ACTIVE", ["127.0.0.1"])

    # a certificate from the local ACME server
    cert = cli("--json", "secret", "certificates", "show", "shop").json()
    assert cert["status"] == "ACTIVE" and cert["domains"] == ["shop.test"]
    assert cert["cert"].startswith("-----BEGIN CERTIFICATE-----")


def test_the_readme_ports_are_the_defaults():
    """The substitution relies on the README naming the defaults `make run` uses."""
    from appliance.config import DEFAULTS
    assert (DEFAULTS["api_port"], DEFAULTS["dns_port"], DEFAULTS["sqldb_port"]) == \
        (11010, 5353, 5432)
    text = (ROOT / "README.md").read_text()
    for port in PORTS:
        assert port in text


@pytest.mark.parametrize("name", ["hello-1.0.0.yaml", "hello-1.1.0.yaml"])
def test_examples_are_manifests_of_one_element(name):
    from appliance.cli.em import read_manifest
    manifest = read_manifest(str(ROOT / "examples" / name))
    assert manifest["name"] == "hello" and name == f"hello-{manifest['version']}.yaml"
