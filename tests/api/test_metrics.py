"""GET /metrics (docs/metrics.md): every process's metrics in one Prometheus text, read
with prometheus_client's own parser, from a real API process (`python -m appliance.server`
with the production Waitress settings) and a real daemon process over the same state; and
who may read it."""

import http.client
import json
import os
import pathlib
import ssl
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance import metrics
from appliance.firstboot import nginx, tls
from tests.api.test_flood import ApiProcess
from tests.apiserver import Client
from tests.iam.helpers import bind, make_project, make_user, role_uuid
from tests.nginx import Nginx, free_port, require_nginx
from tests.secret.conftest import DaemonProcess, wait_for

# the families this part of issue 29 owns (counters without their _total suffix, as the
# parser names them)
API_FAMILIES = {"appliance_api_requests", "appliance_api_request_duration_seconds",
                "appliance_api_requests_in_flight", "appliance_api_long_lived_connections"}
DAEMON_FAMILIES = {"appliance_daemon_pass_duration_seconds",
                   "appliance_daemon_waiting_items", "appliance_daemon_errors",
                   "appliance_daemon_last_success_timestamp_seconds"}
STORE_FAMILIES = {"appliance_store_write_seconds", "appliance_store_fsync_seconds"}
RESOURCE_FAMILIES = {"appliance_resources"}
DAEMON = "delivery"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    api = ApiProcess(tmp_path_factory.mktemp("metrics"))
    daemon = DaemonProcess(DAEMON, api.settings["state_dir"]).start()
    admin = Client("127.0.0.1", api.port, api.login())
    project = make_project(admin, "metrics-a")
    owner = make_user(admin, "metrics-owner")
    bind(admin, owner[0], "owner", project)
    # a role of the project that grants the permission: still not the platform
    perm = admin.post("/v1/iam/permissions", {"name": "appliance.metrics.read"})
    assert perm.status == 201, perm
    assert admin.post("/v1/iam/permission_bindings", {
        "role": role_uuid(admin, "owner"), "permission": perm.json["uuid"]}).status == 201

    def owner_token(scope):
        return Client("127.0.0.1", api.port).post(
            "/v1/iam/clients/default/actions/get_token/invoke",
            {"grant_type": "password", "username": owner[1], "password": owner[2],
             "scope": scope}).json["access_token"]
    world = {"api": api, "daemon": daemon, "admin": admin, "project": project,
             "owner": Client("127.0.0.1", api.port, owner_token(f"project:{project}")),
             "owner_unscoped": Client("127.0.0.1", api.port, owner_token(""))}
    yield world
    daemon.stop()
    api.stop()


def scrape(port, token=None, headers=None, source=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                      source_address=(source, 0) if source else None)
    try:
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        conn.request("GET", "/metrics", headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read().decode()
    finally:
        conn.close()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, **labels):
    return [s for s in family.samples
            if all(s.labels.get(k) == v for k, v in labels.items())]


def daemon_succeeded(port):
    family = families(scrape(port)[2]).get("appliance_daemon_last_success_timestamp_seconds")
    return family is not None and samples(family, daemon=DAEMON)


def test_metrics_parse_and_hold_every_family_of_every_process(world):
    api = world["api"]
    # the daemon's first passes, and the API's own requests, are in the files
    wait_for(lambda: daemon_succeeded(api.port), timeout=60)
    world["admin"].get("/v1/iam/projects")
    status, content_type, text = scrape(api.port, world["admin"].token)
    assert status == 200, text
    assert content_type.startswith("text/plain; version=0.0.4")
    found = families(text)
    missing = (API_FAMILIES | DAEMON_FAMILIES | STORE_FAMILIES | RESOURCE_FAMILIES) - set(found)
    assert not missing, sorted(missing)

    # the API's requests by route template (never the raw path), method and status
    requests = found["appliance_api_requests"]
    listed = samples(requests, route="/v1/iam/projects", method="GET", status="200")
    assert listed and listed[0].value >= 1
    assert not [s for s in requests.samples if world["project"] in s.labels["route"]]
    assert samples(found["appliance_api_request_duration_seconds"],
                   route="/v1/iam/projects", method="GET")
    assert samples(found["appliance_api_long_lived_connections"], kind="agent_long_poll")

    # the daemon's families come from the daemon's process
    for name in DAEMON_FAMILIES:
        assert samples(found[name], daemon=DAEMON), name
    # the store's writes: the API's (a project, a user) and the daemon's
    assert samples(found["appliance_store_write_seconds"], kind="iam_projects")
    assert samples(found["appliance_store_fsync_seconds"], kind="iam_projects")

    # the resources: counted per kind, status and project
    projects = samples(found["appliance_resources"], kind="iam_projects")
    assert sum(s.value for s in projects) >= 2      # the admin project and metrics-a


def test_a_route_not_found_is_one_series_whatever_the_path(world):
    api, admin = world["api"], world["admin"]
    for n in range(3):
        assert admin.get(f"/v1/no-such-{n}").status == 404
    found = families(scrape(api.port, admin.token)[2])
    unmatched = samples(found["appliance_api_requests"], route="unmatched", status="404")
    assert unmatched and unmatched[0].value >= 3
    assert not [s for s in found["appliance_api_requests"].samples
                if "no-such" in s.labels["route"]]


def test_who_may_read_the_metrics(world):
    """The matrix: an admin's token, and a caller on this machine that comes straight to
    the API's socket without a token (a local Prometheus), may read; a project's owner
    may not, even with the permission granted to its role (the numbers are every
    project's); without a token, only that local direct caller."""
    api, port = world["api"], world["api"].port
    assert scrape(port, world["admin"].token)[0] == 200
    # no token, from loopback, directly (127.0.0.2 is another local address, as a
    # Prometheus on this machine might use)
    assert scrape(port)[0] == 200
    assert scrape(port, source="127.0.0.2")[0] == 200
    # a project owner's token: forbidden, whatever its role grants
    status, _, body = scrape(port, world["owner"].token)
    assert status == 403 and "admin" in body
    # the same user unscoped: a platform caller, but its role is bound in the project
    # only, so it lacks the permission
    status, _, body = scrape(port, world["owner_unscoped"].token)
    assert status == 403 and "appliance.metrics.read" in body
    # a token that does not verify is refused even from loopback: a token, when sent,
    # is always checked
    assert scrape(port, "not-a-token")[0] == 401
    # through a proxy: the image's nginx on 127.0.0.1 adds X-Forwarded-For; a client
    # elsewhere (its address becomes REMOTE_ADDR) and a local one behind nginx alike
    # need a token
    for forwarded in ("203.0.113.9", "127.0.0.1", "10.0.0.1, 127.0.0.1"):
        status, _, body = scrape(port, headers={"X-Forwarded-For": forwarded})
        assert status == 401, (forwarded, body)
        assert "appliance_" not in body
    # Waitress drops a Forwarded header (not one it trusts) before the app sees it: what
    # is left is a direct local call
    assert scrape(port, headers={"Forwarded": "for=203.0.113.9"})[0] == 200
    # a trusted-proxy request with a token is served (an admin through nginx)
    assert scrape(port, world["admin"].token,
                  headers={"X-Forwarded-For": "203.0.113.9"})[0] == 200
    # what was refused changed nothing: the scrape still answers, and the local scrapes
    # are counted under the route like any other request
    found = families(scrape(port)[2])
    assert samples(found["appliance_api_requests"], route="/metrics", method="GET",
                   status="200")[0].value >= 3


def test_through_the_images_nginx_a_token_is_needed_even_from_this_machine(world, tmp_path):
    """First boot's own site (appliance/firstboot/nginx.py) on a real nginx in front of
    the API: a client on this very machine through nginx is not a local direct caller."""
    require_nginx("http_ssl_module")
    api = world["api"]
    cert_path, key_path, _ = tls.ensure(str(tmp_path / "tls"), "box")
    port = free_port()
    body = nginx.server_body(cert_path, key_path, f"127.0.0.1:{api.port}",
                             api.settings["max_upload_bytes"])
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    def through_nginx(path, token=None):
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"}
                         if token else {})
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    with Nginx(f"listen 127.0.0.1:{port} ssl;\n" + body, prefix=str(tmp_path / "nginx"),
               http_context=nginx.http_context()):
        for path in ["/metrics"] + [prefix + "metrics" for prefix in nginx.PREFIXES]:
            status, text = through_nginx(path)
            assert status == 401, (path, text)
            assert "appliance_" not in text
            status, text = through_nginx(path, world["admin"].token)
            assert status == 200 and "appliance_api_requests_total" in text, (path, status)
            status, text = through_nginx(path, world["owner"].token)
            assert status == 403, (path, text)
    # the API itself still answers the local direct scrape
    assert scrape(api.port)[0] == 200


def test_a_killed_daemons_live_gauges_leave_the_totals_its_counts_stay(world):
    """A daemon killed outright (no supervisor to tell) leaves its live gauge file; the
    next process that starts drops it. Its counters and histograms stay in the totals."""
    api, daemon = world["api"], world["daemon"]
    folder = metrics.directory(api.settings["state_dir"])
    wait_for(lambda: daemon_succeeded(api.port), timeout=60)
    before = families(scrape(api.port)[2])
    passes = sum(s.value for s in samples(before["appliance_daemon_pass_duration_seconds"],
                                          daemon=DAEMON) if s.name.endswith("_count"))
    dead = daemon.proc.pid
    live = f"gauge_livesum_{dead}.db"
    assert live in os.listdir(folder)
    daemon.kill()
    assert live in os.listdir(folder)        # nobody said it died
    daemon.start()
    wait_for(lambda: live not in os.listdir(folder), timeout=60)
    after = families(scrape(api.port)[2])
    again = sum(s.value for s in samples(after["appliance_daemon_pass_duration_seconds"],
                                         daemon=DAEMON) if s.name.endswith("_count"))
    assert again >= passes > 0
    assert f"histogram_{dead}.db" in os.listdir(folder)


def test_a_daemons_metrics_load_no_http_exposition(tmp_path):
    """prometheus_client's __init__ imports http.server, urllib and ssl (~10 MB of RSS); a
    daemon that only writes values loads the metric types without them, and the package
    still answers any name once asked (the daemons' import rules:
    tests/supervisor/test_imports.py)."""
    probe = (
        "import sys\n"
        "from appliance import metrics\n"
        f"metrics.enable({str(tmp_path)!r})\n"
        "from appliance.metrics import Counter\n"
        "Counter('probe_total', 'a probe', ['x']).labels('y').inc()\n"
        "heavy = [m for m in ('ssl', 'http.client', 'http.server', 'urllib.request')\n"
        "         if m in sys.modules]\n"
        "import prometheus_client\n"
        "print(heavy, prometheus_client.generate_latest is not None,\n"
        "      'ssl' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).parents[2], timeout=60,
                          env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True", "True"], done.stdout
    # the value went to the metrics files, not to this process alone
    assert any(n.startswith("counter_") for n in os.listdir(metrics.directory(str(tmp_path))))


def test_the_dashboard_graphs_every_family():
    """docs/grafana-dashboard.json: every family above in some panel's query."""
    dashboard = json.loads((pathlib.Path(__file__).parents[2] / "docs" /
                            "grafana-dashboard.json").read_text())
    queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", ()))
    owned = API_FAMILIES | DAEMON_FAMILIES | STORE_FAMILIES | RESOURCE_FAMILIES
    assert not [f for f in owned if f not in queries]


def test_concurrent_requests_are_each_counted_once(world):
    """Request threads count in numbers of their own, added to the files before each
    scrape (appliance/metrics.py, _RequestTally): 200 requests from 8 threads at once
    are 200 in the counter and in the histogram, and the scrape itself is in flight."""
    import threading
    api, admin = world["api"], world["admin"]
    route = dict(route="/v1/iam/projects/<uuid>", method="GET", status="404")

    def counted():
        found = families(scrape(api.port, admin.token)[2])
        count = sum(s.value for s in samples(found["appliance_api_requests"], **route))
        observed = sum(s.value for s in samples(
            found["appliance_api_request_duration_seconds"], route=route["route"],
            method="GET") if s.name.endswith("_count"))
        in_flight = samples(found["appliance_api_requests_in_flight"])[0].value
        return count, observed, in_flight

    before = counted()
    statuses = []

    def client():
        caller = Client("127.0.0.1", api.port, admin.token)
        for _ in range(25):
            statuses.append(caller.get(f"/v1/iam/projects/{os.urandom(16).hex()[:8]}"
                                       "-0000-4000-8000-000000000000").status)
    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = counted()
    assert statuses == [404] * 200
    assert after[0] - before[0] == 200
    # the histogram has every 404 of the route's template and method: these 200 and the
    # other tests' (none run meanwhile)
    assert after[1] - before[1] == 200
    assert after[2] >= 1
