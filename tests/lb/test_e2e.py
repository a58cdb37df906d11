"""Issue 15 end to end: what a client writes through the API reaches a real nginx through
a real agent process (a HW node with its own root prefix and loopback address), and the
status daemon writes the LB's status from the agent's report. Also the spec's 4.3.1
upload route through a real LB, and a certificate that Pebble issued through our DNS,
served by an HTTPS vhost."""

import collections
import os
import socket
import ssl
import stat
import time
import uuid

import pytest

from appliance.agent.host import Host
from appliance.lb.node import Driver
from tests import waiting
from tests.agent.agents import AgentProcess
from tests.agent.conftest import enroll
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user
from tests.nginx import require_nginx
from tests.repo.conftest import R, make_repo
from tests.secret.conftest import DaemonProcess
from tests.secret.pebble import AcmeWorld

from .helpers import external, hw_node, make_lb, pools, routes, set_address, vhosts
from .nginxnode import Backend, free_port, get, loopback_address

# waits for what the issue bounds by "within seconds" are asserted with this bound; the
# others (an agent's first delivery, Pebble) only keep a broken test from hanging
SECONDS = 10.0
PATIENCE = 60.0


def eventually(check, seconds=PATIENCE, what=""):
    return waiting.eventually(check, seconds, what, interval=0.02)


class LbNode:
    """A HW node whose real agent process serves LBs on its own loopback address."""

    def __init__(self, api, admin, base):
        self.record = hw_node(admin)
        self.uuid = self.record["uuid"]
        self.address = loopback_address()
        set_address(api.store, self.uuid, self.address)
        self.agent = AgentProcess(base, enroll(api, admin, self.uuid),
                                  f"http://127.0.0.1:{api.port}",
                                  env={"APPLIANCE_AGENT_LB_LISTEN": self.address})
        self.agent.start()

    def stop(self):
        if self.agent.proc and self.agent.proc.poll() is None:
            self.agent.stop()
        # nginx outlives its agent on purpose (docs/lb-dataplane.md): stopped here
        host = Host(root=self.agent.root, state_dir=self.agent.state_dir,
                    settings={"agent_lb_listen": self.address})
        Driver(host).stop_instance(grace=1)

    def path(self, p):
        return self.agent.root + p


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    require_nginx("http_auth_request_module", "http_dav_module", "stream")
    api = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    api_threads=16).start()
    delivery = DaemonProcess("delivery", api.settings["state_dir"]).start()
    agent_status = DaemonProcess("status", api.settings["state_dir"]).start()
    admin = api.client(api.login("admin", ADMIN_PASSWORD))
    node = LbNode(api, admin, tmp_path_factory.mktemp("lbnode"))
    backends = [Backend(f"b{i}") for i in range(4)]
    try:
        yield {"api": api, "admin": admin, "node": node, "backends": backends}
    finally:
        for b in backends:
            b.stop()
        node.stop()
        delivery.stop()
        agent_status.stop()
        api.stop()


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def wait_lb(admin, lb, status="ACTIVE", seconds=PATIENCE):
    def check():
        got = admin.get(f"/v1/network/lb/{lb['uuid']}").json
        return got if got["status"] == status else None
    try:
        return eventually(check, seconds, f"LB {status}")
    except AssertionError:
        got = admin.get(f"/v1/network/lb/{lb['uuid']}").json
        raise AssertionError(f"LB not {status}: {got['status']} {got.get('status_reason')}"
                             f" {got.get('node_status')}")


def http_route(pool_uuid, value="/"):
    return {"condition": {"kind": "prefix", "value": value,
                          "actions": [{"kind": "backend", "pool": pool_uuid,
                                       "protocol": {"kind": "http"}}]}}


def test_round_robin_prefix_routes_and_node_endpoints(world):
    admin, node, b = world["admin"], world["node"], world["backends"]
    lb = make_lb(admin, type=external(node.record))
    assert lb["status"] in ("NEW", "IN_PROGRESS")
    three = created(admin.post(pools(lb), {"endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": x.port} for x in b[:3]]}))
    # an endpoint by node reference follows the node's address
    other = hw_node(admin)
    set_address(world["api"].store, other["uuid"], "127.0.0.1")
    by_node = created(admin.post(pools(lb), {"endpoints": [
        {"kind": "node", "node": other["uuid"], "port": b[3].port}]}))
    port = free_port(node.address)
    vhost = created(admin.post(vhosts(lb), {"protocol": "http", "port": port,
                                            "domains": ["shop.test"]}))
    created(admin.post(routes(lb, vhost), http_route(three["uuid"])))
    created(admin.post(routes(lb, vhost), http_route(by_node["uuid"], "/other/")))
    assert wait_lb(admin, lb)["ipsv4"] == [node.address]

    answers = [get(node.address, port, "/x", host="shop.test") for _ in range(6)]
    assert all(status == 200 for status, _, _ in answers), answers
    served = collections.Counter(body.decode().split()[0] for _, _, body in answers)
    assert served == {"b0": 2, "b1": 2, "b2": 2}
    status, _, body = get(node.address, port, "/other/y", host="shop.test")
    assert (status, body) == (200, b"b3 /other/y")

    # a change through the API reaches nginx: a new route, then the pool's endpoints
    started = time.monotonic()
    created(admin.post(routes(lb, vhost), http_route(by_node["uuid"], "/new/")))
    eventually(lambda: get(node.address, port, "/new/z", host="shop.test")[2]
               == b"b3 /new/z", PATIENCE, "the new route served")
    print(f"\nroute created -> served: {time.monotonic() - started:.3f} s")
    assert admin.put(f"{pools(lb)}/{three['uuid']}", {"endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": b[0].port}]}).status == 200
    eventually(lambda: {get(node.address, port, "/", host="shop.test")[2]
                        for _ in range(4)} == {b"b0 /"}, PATIENCE, "one endpoint left")
    wait_lb(admin, lb)

    assert admin.delete(f"/v1/network/lb/{lb['uuid']}").status == 204
    eventually(lambda: _refused(node.address, port), PATIENCE, "the vhost gone")


def _refused(address, port):
    try:
        get(address, port, "/", host="shop.test", timeout=2)
    except OSError:
        return True
    return False


def test_config_nginx_rejects_is_error_and_the_old_one_keeps_serving(world):
    admin, node, b = world["admin"], world["node"], world["backends"]
    lb = make_lb(admin, type=external(node.record))
    pool = created(admin.post(pools(lb), {"endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": b[0].port}]}))
    port = free_port(node.address)
    vhost = created(admin.post(vhosts(lb), {"protocol": "http", "port": port,
                                            "domains": ["keep.test"]}))
    created(admin.post(routes(lb, vhost), http_route(pool["uuid"])))
    wait_lb(admin, lb)
    # a backend host name that does not resolve passes every rule of the API and fails
    # nginx's check (upstream names are resolved when nginx loads its configuration)
    assert admin.put(f"{pools(lb)}/{pool['uuid']}", {"endpoints": [
        {"kind": "host", "host": "no-such-host.invalid", "port": 80}]}).status == 200
    failed = wait_lb(admin, lb, "ERROR")
    assert "no-such-host.invalid" in failed["status_reason"], failed["status_reason"]
    assert get(node.address, port, "/", host="keep.test")[:3:2] == (200, b"b0 /")
    admin.delete(f"/v1/network/lb/{lb['uuid']}")


# ---- spec 4.3.1: the upload route through a real LB -------------------------------------

def raw_request(address, port, target, method="PUT", token=None, body=b"payload"):
    lines = [f"{method} {target} HTTP/1.1", "Host: repo.test", "Connection: close",
             f"Content-Length: {len(body)}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    with socket.create_connection((address, port), timeout=10) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def upload_lb(admin, api, node, repo_uuid, port):
    lb = make_lb(admin, type=external(node.record))
    auth = created(admin.post(pools(lb), {"endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": int(api.port)}]}))
    vhost = created(admin.post(vhosts(lb), {"protocol": "http", "port": port,
                                            "domains": ["repo.test"]}))
    created(admin.post(routes(lb, vhost), {"condition": {
        "kind": "prefix", "value": "/elements/",
        "actions": [{"kind": "local_dir", "path": "/var/www/elements",
                     "dav_methods": ["PUT", "DELETE"]}],
        "modifiers": [{"kind": "auth_request", "pool": auth["uuid"],
                       "path": f"{R}/{repo_uuid}/actions/authorize_upload"}]}}))
    return lb


def test_upload_authorization_through_a_real_lb_route(world):
    api, admin, node = world["api"], world["admin"], world["node"]
    project_a, project_b = make_project(admin), make_project(admin)
    owner, reader = make_user(admin), make_user(admin)
    bind(admin, owner[0], "owner", project_a)
    bind(admin, reader[0], "reader", project_a)
    shared = make_repo(admin, {"kind": "database"})      # its status needs no builder here
    assert shared["project_id"] == ADMIN_PROJECT
    owner_token = api.login(owner[1], owner[2], scope=f"project:{project_a}")
    reader_token = api.login(reader[1], reader[2], scope=f"project:{project_a}")
    port = free_port(node.address)
    lb = upload_lb(admin, api, node, shared["uuid"], port)
    wait_lb(admin, lb)

    def call(target, **kw):
        return raw_request(node.address, port, target, **kw)

    path = f"/elements/{project_a}/app/1.0.0/app.yaml"
    assert call(path) == 401                                     # no token
    assert call(path, token="not-a-token") == 401
    assert call(path, token=reader_token) == 403                 # read only
    assert call(path, token=owner_token) in (201, 204)
    landed = node.path(f"/var/www/elements/{project_a}/app/1.0.0/app.yaml")
    with open(landed, "rb") as f:
        assert f.read() == b"payload"
    assert call(path, method="GET", token=reader_token, body=b"") == 200
    assert call(path, method="HEAD", token=reader_token, body=b"") == 200
    assert call(path, method="GET", body=b"") == 401
    other = f"/elements/{project_b}/app/1.0.0/app.yaml"
    assert call(other, token=owner_token) == 403                 # another project
    assert call(other, token=admin.token) in (201, 204)          # unscoped, permitted
    assert call(f"/elements/{project_a}/../{project_b}/x.yaml", token=owner_token) in (
        400, 403, 404)
    assert call(path, method="POST", token=owner_token) in (403, 405)
    assert call(path, method="DELETE", token=owner_token, body=b"") == 204
    assert not os.path.exists(landed)

    # the authorizer's 404 (a repository that is not there) reaches the client as 404
    missing_port = free_port(node.address)
    gone = upload_lb(admin, api, node, str(uuid.uuid4()), missing_port)
    wait_lb(admin, gone)
    assert raw_request(node.address, missing_port, path, token=owner_token) == 404
    for made in (lb, gone):
        admin.delete(f"/v1/network/lb/{made['uuid']}")


# ---- a certificate from Pebble, served by an HTTPS vhost -----------------------------------

@pytest.fixture(scope="module")
def acme(world):
    with AcmeWorld(None, api=world["api"]) as acme_world:
        yield acme_world


def served_chain(address, port, name, root_pem):
    """The peer certificate's subject names, the handshake verified against `root_pem`."""
    context = ssl.create_default_context(cadata=root_pem)
    with socket.create_connection((address, port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=name) as tls:
            return [v for k, v in tls.getpeercert()["subjectAltName"] if k == "DNS"]


def test_issued_certificate_is_served_by_an_https_vhost_within_seconds(world, acme):
    admin, node, b = world["admin"], world["node"], world["backends"]
    acme.zone(admin, "shop.example")
    cert = acme.certificate(admin, ["secure.shop.example"])
    lb = make_lb(admin, type=external(node.record))
    pool = created(admin.post(pools(lb), {"endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": b[1].port}]}))
    port = free_port(node.address)
    vhost = created(admin.post(vhosts(lb), {
        "protocol": "https", "port": port, "domains": ["secure.shop.example"],
        "cert": {"kind": "certificate", "certificate": cert["uuid"]}}))
    created(admin.post(routes(lb, vhost), http_route(pool["uuid"])))
    issued = acme.wait_status(admin, cert["uuid"], "ACTIVE", timeout=PATIENCE)
    since = time.monotonic()
    root = acme.pebble.root_pem()

    def served():
        try:
            return served_chain(node.address, port, "secure.shop.example", root)
        except (OSError, ssl.SSLError):
            return None
    names = eventually(served, SECONDS, "the issued certificate served")
    print(f"\ncertificate ACTIVE -> served over HTTPS: {time.monotonic() - since:.3f} s")
    assert names == ["secure.shop.example"]
    context = ssl.create_default_context(cadata=root)
    status, _, body = get(node.address, port, "/s", host="secure.shop.example",
                          context=_sni(context, "secure.shop.example"))
    assert (status, body) == (200, b"b1 /s")
    wait_lb(admin, lb)

    # the key reached the node 0600, and only there: no rendered file carries it
    certs = node.path(f"/etc/appliance/lb/current/certs/{lb['uuid']}")
    files = sorted(os.listdir(certs))
    assert files == [f"{vhost['uuid']}.crt", f"{vhost['uuid']}.key"]
    for name in files:
        assert stat.S_IMODE(os.stat(os.path.join(certs, name)).st_mode) == 0o600
    key_pem = open(os.path.join(certs, f"{vhost['uuid']}.key")).read()
    conf = node.path("/etc/appliance/lb/current")
    for name in os.listdir(conf):
        full = os.path.join(conf, name)
        if os.path.isfile(full):
            assert key_pem.strip().splitlines()[1] not in open(full).read()
    assert issued["cert"].strip() in open(os.path.join(
        certs, f"{vhost['uuid']}.crt")).read()
    admin.delete(f"/v1/network/lb/{lb['uuid']}")


def _sni(context, name):
    """`context` made to send `name` as SNI and check it: http.client would send the
    address it connects to."""
    original = context.wrap_socket
    context.wrap_socket = lambda sock, *args, server_hostname=None, **kw: original(
        sock, *args, server_hostname=name, **kw)
    return context
