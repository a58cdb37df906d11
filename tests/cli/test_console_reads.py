"""The CLI verbs of the read endpoints the web console uses: `appliance daemons`,
`appliance dns domains resolve DOMAIN NAME`, `appliance lb routes LB`, on the real API
(and the real DNS daemon for resolve)."""

import pytest

from tests.apiserver import ApiServer, free_port
from tests.conftest import ADMIN_PASSWORD
from tests.dns.test_api_to_server import wait_answer
from tests.dns.test_server import DNSDaemon
from tests.lb.helpers import register_appliance


def test_daemons(logged_in, real_api):
    shown = logged_in("--json", "daemons")
    assert shown.code == 0, shown.stderr
    assert {"name": "dns", "state": "starting"}.items() <= next(
        d for d in shown.json() if d["name"] == "dns").items()
    table = logged_in("daemons")
    assert table.code == 0 and "sqldb" in table.stdout and "waiting" in table.stdout
    assert logged_in.sent[-1].path == "/v1/system/daemons"


@pytest.fixture(scope="module")
def real_api(tmp_path_factory):
    """conftest's real API, with a DNS port of its own (other runs share this machine)."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    dns_port=free_port(), allowed_outside_networks="10.4.0.0/24").start()
    register_appliance(srv.store)      # the admin project's LBs run on the appliance
    yield srv
    srv.stop()


@pytest.fixture
def dns_daemon(real_api):
    daemon = DNSDaemon(real_api.settings["state_dir"], real_api.settings["dns_port"]).start()
    yield daemon
    daemon.stop()


def test_dns_resolve(logged_in, real_api, dns_daemon):
    made = logged_in("dns", "domains", "add", "-n", "cli-resolve.test")
    assert made.code == 0, made.stderr
    added = logged_in("dns", "records", "add", "cli-resolve.test", "type=A",
                      'record:={"kind": "A", "name": "www", "address": "10.3.0.9"}')
    assert added.code == 0, added.stderr
    wait_answer(dns_daemon.port, "www.cli-resolve.test", "A",
                lambda r: any("10.3.0.9" in str(rr) for rr in r.answer))
    asked = logged_in("--json", "dns", "domains", "resolve", "cli-resolve.test",
                      "www.cli-resolve.test")
    assert asked.code == 0, asked.stderr
    assert asked.json()["answer"][0]["data"] == "10.3.0.9"
    assert logged_in.sent[-1].query == [("name", "www.cli-resolve.test")]
    soa = logged_in("--json", "dns", "domains", "resolve", "cli-resolve.test",
                    "cli-resolve.test", "--type", "SOA")
    assert soa.code == 0 and soa.json()["answer"][0]["type"] == "SOA"
    outside = logged_in("dns", "domains", "resolve", "cli-resolve.test", "example.com")
    assert outside.code == 1 and "is not inside the domain" in outside.stderr


def test_lb_rendered(logged_in, real_api):
    made = logged_in("--json", "lb", "add", "-n", "front")
    assert made.code == 0, made.stderr
    for args in (("pools", "add", "front", "--data",
                  '{"endpoints": [{"kind": "host", "host": "10.4.0.5", "port": 80}]}'),
                 ("vhosts", "add", "front", "--protocol", "http", "--port", "8080",
                  "--domain", "front.example.test")):
        done = logged_in("--json", "lb", *args)
        assert done.code == 0, done.stderr
    pool = logged_in("--json", "lb", "pools", "list", "front").json()[0]["uuid"]
    vhost = logged_in("--json", "lb", "vhosts", "list", "front").json()[0]["uuid"]
    route = logged_in("--json", "lb", "routes", "add", "front", vhost, "--condition",
                      '{"kind": "prefix", "value": "/shop/", "actions": '
                      f'[{{"kind": "backend", "pool": "{pool}"}}]}}')
    assert route.code == 0, route.stderr
    shown = logged_in("lb", "rendered", "front")
    assert shown.code == 0, shown.stderr
    assert "http:8080 front.example.test prefix /shop/ -> 10.4.0.5:80" in shown.stdout
    assert "# ---- http {} ----" in shown.stdout and "server 10.4.0.5:80" in shown.stdout
    assert logged_in.sent[-1].path.endswith("/actions/routes")


def test_sqldb_replication(logged_in, real_api):
    from tests.sqldb.helpers import make_instance
    admin = real_api.client(real_api.login("admin", ADMIN_PASSWORD))
    instance = make_instance(admin, name="shopdb")
    shown = logged_in("sqldb", "instances", "replication", "shopdb")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.startswith("uri: ") and "epoch: 0" in shown.stdout
    asked = logged_in("--json", "sqldb", "instances", "replication", instance["uuid"])
    assert asked.code == 0 and asked.json()["instance"] == instance["uuid"]
    assert logged_in.sent[-1].path.endswith("/actions/replication")
