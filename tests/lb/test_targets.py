"""The producer of kind `lb` (appliance/lb/targets.py): what a node gets for each LB.

FIXTURES holds one item for each condition kind (prefix, exact, regex, raw), in the exact
shape of the contract (docs/lb.md, "The item"); the nginx side renders them. The first
test builds each through the API and checks that the producer gives exactly that item,
so the fixtures cannot drift from what the platform sends.
"""

import copy

import pytest

from appliance.agent.protocol import target_uuid
from appliance.agent.targets import View
from appliance.lb import targets
from appliance.tenancy.addresses import PLATFORM
from tests.compute.conftest import created
from tests.iam.helpers import ADMIN_PROJECT

from .helpers import (APPLIANCE_IP, LB, certificate_record, hw_node, make_lb, make_pool,
                      make_route, make_vhost, prefix, register_appliance, set_address, vhosts)

NODE = "0d000000-0000-4000-8000-000000000001"
NODE_IP = "10.9.0.2"
BACKEND_NODE = "0d000000-0000-4000-8000-000000000002"
BACKEND_IP = "10.9.0.3"
LBS = {kind: f"1b000000-0000-4000-8000-00000000000{i}"
       for i, kind in enumerate(("prefix", "exact", "regex", "raw"), 1)}
CRT = """-----BEGIN CERTIFICATE-----
MIIBSzCB86ADAgECAgEBMAoGCCqGSM49BAMCMB4xHDAaBgNVBAMME3NlY3VyZS5l
eGFtcGxlLnRlc3QwHhcNMjYwMTAxMDAwMDAwWhcNMzYwMTAxMDAwMDAwWjAeMRww
GgYDVQQDDBNzZWN1cmUuZXhhbXBsZS50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEs/Rycyltx1GwXRYozoV/dUiIoy9jd75BXLeGMlLeBBDWamjn4mkq9JIl
NvdGqBbPTnyGeEKgWvNKA/k8i24yb6MiMCAwHgYDVR0RBBcwFYITc2VjdXJlLmV4
YW1wbGUudGVzdDAKBggqhkjOPQQDAgNHADBEAiAi4KR4VRpw7YfBfwfh5b4hakP+
8e3xZ7C0pysVzaDjgAIgAQgVE1H2EPtrWuspzZB9FAbd9r09cZmBwsjwSkiNnNA=
-----END CERTIFICATE-----
"""
KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtxkou4ECg+Deu/7+
zXI27ffkmS/WeAc4/m3OCetzeOOhRANCAASz9HJzKW3HUbBdFijOhX91SIijL2N3
vkFct4YyUt4EENZqaOfiaSr0kiU290aoFs9OfIZ4QqBa80oD+TyLbjJv
-----END PRIVATE KEY-----
"""
AUTO_HEADERS = ["Host", "X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto",
                "X-Forwarded-Prefix"]


def _uuid(prefix_, n):
    return f"{prefix_}000000-0000-4000-8000-{n:012d}"


def _item(kind, value):
    lb = LBS[kind]
    return {"uuid": target_uuid(NODE, "lb", lb), "kind": "lb", "master": lb,
            "master_kind": "network_lb", "value": {"lb": lb, **value}}


# one item per condition kind, exactly as the producer gives it
FIXTURES = {
    # two routes: a prefix to a pool of two hosts, and the 4.3.1 upload route (a writable
    # local_dir behind an auth_request to the API's pool)
    "prefix": _item("prefix", {
        "vhosts": [{
            "uuid": _uuid("2a", 1), "protocol": "http", "port": 8080,
            "domains": ["app.example.test", "www.example.test"], "tls": None,
            "redirect_http": False, "proxy_protocol_from": None,
            "routes": [
                {"uuid": _uuid("3a", 1), "condition": {
                    "kind": "prefix", "value": "/api/", "allowed_ips": ["10.0.0.0/8"],
                    "actions": [{"kind": "backend", "pool": _uuid("4a", 1),
                                 "protocol": {"kind": "http"}}],
                    "modifiers": [{"kind": "auto_header", "headers": AUTO_HEADERS},
                                  {"kind": "set_header", "name": "X-Env", "value": "test"}]}},
                {"uuid": _uuid("3a", 2), "condition": {
                    "kind": "prefix", "value": "/repo/", "allowed_ips": ["0.0.0.0/0"],
                    "actions": [{"kind": "local_dir", "path": "/var/www/repo",
                                 "is_spa": False, "dav_methods": ["PUT", "DELETE"]}],
                    "modifiers": [{"kind": "auth_request", "pool": _uuid("4a", 2),
                                   "path": "/v1/repo/repositories/"
                                           "00000000-0000-0000-0000-000000000000/actions/"
                                           "authorize_upload"}]}},
            ]}],
        "pools": {
            _uuid("4a", 1): {"balance": "roundrobin", "endpoints": [
                {"host": "10.0.0.5", "port": 8080, "weight": 1},
                {"host": "10.0.0.6", "port": 8080, "weight": 2}]},
            _uuid("4a", 2): {"balance": "roundrobin", "endpoints": [
                {"host": "127.0.0.1", "port": 11010, "weight": 1}]}}}),
    # https with a raw cert and the plain-HTTP redirect; an exact route that redirects
    "exact": _item("exact", {
        "vhosts": [{
            "uuid": _uuid("2b", 1), "protocol": "https", "port": 8443,
            "domains": ["secure.example.test"], "tls": {"crt": CRT, "key": KEY},
            "redirect_http": True, "proxy_protocol_from": "192.0.2.0/24",
            "routes": [{"uuid": _uuid("3b", 1), "condition": {
                "kind": "exact", "value": "/old", "allowed_ips": ["0.0.0.0/0"],
                "actions": [{"kind": "redirect", "url": "https://secure.example.test/new",
                             "code": 302}],
                "modifiers": [{"kind": "auto_header", "headers": AUTO_HEADERS}]}}]}],
        "pools": {}}),
    # a regex route to an https backend that is not verified, with a URL rewrite and a
    # response header; a local_dir_download route beside it
    "regex": _item("regex", {
        "vhosts": [{
            "uuid": _uuid("2c", 1), "protocol": "http", "port": 8081,
            "domains": ["*.apps.example.test"], "tls": None, "redirect_http": False,
            "proxy_protocol_from": None,
            "routes": [
                {"uuid": _uuid("3c", 1), "condition": {
                    "kind": "regex", "value": r"^/v\d+/items/(.*)$",
                    "allowed_ips": ["0.0.0.0/0"],
                    "actions": [{"kind": "backend", "pool": _uuid("4c", 1),
                                 "protocol": {"kind": "https", "verify": False}}],
                    "modifiers": [
                        {"kind": "rewrite_url", "regex": r"^/v\d+/(.*)$",
                         "replacement": "/$1"},
                        {"kind": "set_resp_header", "name": "Cache-Control",
                         "value": "no-store"}]}},
                {"uuid": _uuid("3c", 2), "condition": {
                    "kind": "prefix", "value": "/", "allowed_ips": ["0.0.0.0/0"],
                    "actions": [{"kind": "local_dir_download",
                                 "url": "https://files.example.test/site.tar.gz",
                                 "is_spa": True}],
                    "modifiers": [{"kind": "auto_header", "headers": AUTO_HEADERS}]}},
            ]}],
        "pools": {_uuid("4c", 1): {"balance": "roundrobin", "endpoints": [
            {"host": "localhost", "port": 443, "weight": 1}]}},
        # the address rule the agent fetches the archive by: the LB is the platform's
        "reach": PLATFORM.as_dict()}),
    # L4: a tcp vhost (PROXY protocol accepted from a network) and a udp vhost, raw routes
    # to a pool that names a node (resolved to its address)
    "raw": _item("raw", {
        "vhosts": [
            {"uuid": _uuid("2d", 2), "protocol": "udp", "port": 5353, "domains": None,
             "tls": None, "redirect_http": False, "proxy_protocol_from": None,
             "routes": [{"uuid": _uuid("3d", 2), "condition": {
                 "kind": "raw", "allowed_ips": ["0.0.0.0/0"],
                 "actions": [{"kind": "backend", "pool": _uuid("4d", 1)}]}}]},
            {"uuid": _uuid("2d", 1), "protocol": "tcp", "port": 5432, "domains": None,
             "tls": None, "redirect_http": False, "proxy_protocol_from": "10.0.0.0/8",
             "routes": [{"uuid": _uuid("3d", 1), "condition": {
                 "kind": "raw", "allowed_ips": ["10.0.0.0/8", "192.0.2.7/32"],
                 "actions": [{"kind": "backend", "pool": _uuid("4d", 1)}]}}]},
        ],
        "pools": {_uuid("4d", 1): {"balance": "roundrobin", "endpoints": [
            {"host": BACKEND_IP, "port": 5432, "weight": 5}]}}}),
}


@pytest.fixture(scope="module")
def admin(server):
    from tests.conftest import ADMIN_PASSWORD
    return server.client(server.login("admin", ADMIN_PASSWORD))


def _post(client, path, body):
    return created(client.post(path, body))


def _route(client, lb, vhost, route):
    return _post(client, f"{LB}/{lb}/vhosts/{vhost}/routes",
                 {"uuid": route["uuid"], "condition": route["condition"]})


@pytest.fixture(scope="module")
def built(server, admin):
    """The fixtures' LBs made through the API, as a client would write them (defaults
    left out where the fixture shows the default)."""
    store = server.store
    for uuid, ip in ((NODE, NODE_IP), (BACKEND_NODE, BACKEND_IP)):
        _post(admin, "/v1/compute/nodes", {"uuid": uuid, "name": f"n-{uuid[-1]}",
                                           "project_id": ADMIN_PROJECT, "cores": 1,
                                           "ram": 1024, "node_type": "HW"})
        set_address(store, uuid, ip)
    for kind, lb in LBS.items():
        _post(admin, LB, {"uuid": lb, "name": kind, "project_id": ADMIN_PROJECT,
                          "type": {"kind": "external_node", "external_node": NODE}})
    # prefix
    lb = LBS["prefix"]
    _post(admin, f"{LB}/{lb}/backend_pools", {"uuid": _uuid("4a", 1), "endpoints": [
        {"kind": "host", "host": "10.0.0.6", "port": 8080, "weight": 2},
        {"kind": "host", "host": "10.0.0.5", "port": 8080}]})
    _post(admin, f"{LB}/{lb}/backend_pools", {"uuid": _uuid("4a", 2), "endpoints": [
        {"kind": "host", "host": "127.0.0.1", "port": 11010}]})
    _post(admin, f"{LB}/{lb}/vhosts", {"uuid": _uuid("2a", 1), "port": 8080,
                                       "domains": ["APP.example.test", "www.example.test"]})
    first = copy.deepcopy(FIXTURES["prefix"]["value"]["vhosts"][0]["routes"][0])
    first["condition"]["actions"][0].pop("protocol")
    _route(admin, lb, _uuid("2a", 1), first)
    _route(admin, lb, _uuid("2a", 1), FIXTURES["prefix"]["value"]["vhosts"][0]["routes"][1])
    # a disabled vhost and a disabled route are left out of the item
    hidden = _post(admin, f"{LB}/{lb}/vhosts", {"port": 8090, "domains": ["off.test"],
                                                "enabled": False})
    _route(admin, lb, hidden["uuid"], {"uuid": _uuid("3a", 9), "condition": prefix(
        {"uuid": _uuid("4a", 1)})})
    _post(admin, f"{LB}/{lb}/vhosts/{_uuid('2a', 1)}/routes", {
        "condition": prefix({"uuid": _uuid("4a", 1)}, "/off/"), "enabled": False})
    # exact
    lb = LBS["exact"]
    _post(admin, f"{LB}/{lb}/vhosts", {
        "uuid": _uuid("2b", 1), "protocol": "https", "port": 8443,
        "domains": ["secure.example.test"], "cert": {"kind": "raw", "crt": CRT, "key": KEY},
        "redirect_http": True, "proxy_protocol_from": "192.0.2.9/24"})
    _route(admin, lb, _uuid("2b", 1), {"uuid": _uuid("3b", 1), "condition": {
        "kind": "exact", "value": "/old", "actions": [
            {"kind": "redirect", "url": "https://secure.example.test/new", "code": 302}]}})
    # regex
    lb = LBS["regex"]
    _post(admin, f"{LB}/{lb}/backend_pools", {"uuid": _uuid("4c", 1), "endpoints": [
        {"kind": "host", "host": "localhost", "port": 443}]})
    _post(admin, f"{LB}/{lb}/vhosts", {"uuid": _uuid("2c", 1), "port": 8081,
                                       "domains": ["*.apps.example.test"]})
    for route in FIXTURES["regex"]["value"]["vhosts"][0]["routes"]:
        _route(admin, lb, _uuid("2c", 1), route)
    # raw
    lb = LBS["raw"]
    _post(admin, f"{LB}/{lb}/backend_pools", {"uuid": _uuid("4d", 1), "endpoints": [
        {"kind": "node", "node": BACKEND_NODE, "port": 5432, "weight": 5}]})
    # an unused pool is not in the item
    _post(admin, f"{LB}/{lb}/backend_pools", {"endpoints": [{"kind": "host", "host": "x"}]})
    _post(admin, f"{LB}/{lb}/vhosts", {"uuid": _uuid("2d", 1), "protocol": "tcp",
                                       "port": 5432, "proxy_protocol_from": "10.0.0.0/8"})
    _post(admin, f"{LB}/{lb}/vhosts", {"uuid": _uuid("2d", 2), "protocol": "udp",
                                       "port": 5353})
    _route(admin, lb, _uuid("2d", 1), {"uuid": _uuid("3d", 1), "condition": {
        "kind": "raw", "allowed_ips": ["10.0.0.0/8", "192.0.2.7"],
        "actions": [{"kind": "backend", "pool": _uuid("4d", 1)}]}})
    _route(admin, lb, _uuid("2d", 2), {"uuid": _uuid("3d", 2), "condition": {
        "kind": "raw", "actions": [{"kind": "backend", "pool": _uuid("4d", 1)}]}})
    return store


def produce(store, node_uuid=NODE):
    node = store.collection("compute_nodes").get(node_uuid)
    return {i["master"]: i for i in targets.for_node(View(store), node)}


@pytest.mark.parametrize("kind", list(FIXTURES))
def test_the_producer_gives_the_fixture(built, kind):
    assert produce(built)[LBS[kind]] == FIXTURES[kind]


def test_only_the_lbs_placed_on_a_node_reach_it(built):
    assert set(produce(built)) == set(LBS.values())
    assert produce(built, BACKEND_NODE) == {}


def test_a_node_reference_follows_the_address(built):
    set_address(built, BACKEND_NODE, "10.9.0.33")
    try:
        pool = produce(built)[LBS["raw"]]["value"]["pools"][_uuid("4d", 1)]
        assert pool["endpoints"] == [{"host": "10.9.0.33", "port": 5432, "weight": 5}]
        # a node with no address yet is left out: the pool has no endpoint, the item stays
        built.collection("compute_nodes").update(BACKEND_NODE, {"default_network": {}})
        pool = produce(built)[LBS["raw"]]["value"]["pools"][_uuid("4d", 1)]
        assert pool["endpoints"] == []
    finally:
        set_address(built, BACKEND_NODE, BACKEND_IP)


def test_node_sets_weights_and_duplicates(server, admin):
    node = hw_node(admin, ipv4="10.9.1.1", store=server.store)
    node_set = created(admin.post("/v1/compute/sets", {
        "name": "web", "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024, "replicas": 0,
        "disk_spec": {"kind": "root_disk", "image": "https://images.example.test/a.raw"}}))
    members = server.store.collection("compute_nodes")
    for i, ip in enumerate(("10.9.2.2", "10.9.2.1", None)):
        members.insert({"name": f"web-{i}", "project_id": ADMIN_PROJECT, "node_type": "VM",
                        "node_set": node_set["uuid"], "set_index": i,
                        "default_network": {"ipv4": ip} if ip else {}})
    lb = make_lb(admin, type={"kind": "external_node", "external_node": node["uuid"]})
    pool = make_pool(admin, lb, [
        {"kind": "node_set", "node_set": node_set["uuid"], "port": 80},
        {"kind": "host", "host": "10.9.2.1", "port": 80, "weight": 4},
        {"kind": "host", "host": "10.9.9.9", "port": 80, "weight": 0}])
    make_route(admin, lb, make_vhost(admin, lb), prefix(pool))
    got = produce(server.store, node["uuid"])[lb["uuid"]]["value"]["pools"][pool["uuid"]]
    assert got["endpoints"] == [{"host": "10.9.2.1", "port": 80, "weight": 4},
                                {"host": "10.9.2.2", "port": 80, "weight": 1}]


def test_a_certificate_resolves_or_waits(server, admin):
    node = hw_node(admin, ipv4="10.9.3.1", store=server.store)
    lb = make_lb(admin, type={"kind": "external_node", "external_node": node["uuid"]})
    pending = certificate_record(server.store, issued=False)
    vhost = make_vhost(admin, lb, "https", cert={"kind": "certificate",
                                                 "certificate": pending["uuid"]})
    item = produce(server.store, node["uuid"])[lb["uuid"]]
    assert item["value"] is None
    assert item["unavailable"] == f"waiting for certificate {pending['uuid']}"
    issued = certificate_record(server.store)
    assert admin.put(f"{vhosts(lb)}/{vhost['uuid']}", {"cert": {
        "kind": "certificate", "certificate": issued["uuid"]}}).status == 200
    [tls] = [v["tls"] for v in produce(server.store, node["uuid"])[lb["uuid"]]["value"][
        "vhosts"]]
    assert tls["crt"] == issued["cert"] and "PRIVATE KEY" in tls["key"]
    # the record gone: waiting again, with a reason that says so
    server.store.collection("secret_certificates").delete(issued["uuid"])
    item = produce(server.store, node["uuid"])[lb["uuid"]]
    assert item["unavailable"] == f"certificate {issued['uuid']} not found"


def test_core_agent_lbs_go_to_the_appliance_node(server, admin):
    own = register_appliance(server.store)      # idempotent: the module's own node
    lb = make_lb(admin)
    assert lb["ipsv4"] == [APPLIANCE_IP]
    assert lb["uuid"] in produce(server.store, own["uuid"])


def test_core_lbs_go_to_their_set_members(server, admin):
    lb = make_lb(admin, type={"kind": "core", "nodes_number": 2})
    members = server.store.collection("compute_nodes")
    made = [members.insert({"name": f"lbaas-{i}", "project_id": ADMIN_PROJECT,
                            "node_type": "VM", "node_set": lb["uuid"], "set_index": i,
                            "default_network": {"ipv4": f"10.9.4.{i + 1}"}})
            for i in range(2)]
    items = [produce(server.store, m["uuid"])[lb["uuid"]] for m in made]
    assert items[0]["value"] == items[1]["value"]
    assert items[0]["uuid"] != items[1]["uuid"]
    assert admin.get(f"{LB}/{lb['uuid']}").json["ipsv4"] == ["10.9.4.1", "10.9.4.2"]


def test_the_item_hash_moves_only_with_the_value(built):
    from appliance.agent.protocol import item_hash
    before = item_hash(produce(built)[LBS["prefix"]])
    # a name is not in the value: the hash stays
    built.collection("network_lb_backend_pools").update(_uuid("4a", 1), {"name": "renamed"})
    assert item_hash(produce(built)[LBS["prefix"]]) == before
    pool = built.collection("network_lb_backend_pools").get(_uuid("4a", 1))
    built.collection("network_lb_backend_pools").update(_uuid("4a", 1), {"endpoints": [
        *pool["endpoints"], {"kind": "host", "host": "10.0.0.7", "port": 8080,
                             "weight": 1}]})
    assert item_hash(produce(built)[LBS["prefix"]]) != before
    built.collection("network_lb_backend_pools").update(_uuid("4a", 1), {
        "endpoints": pool["endpoints"]})

