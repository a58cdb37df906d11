"""`/v1/network/lb/` and its children against a real API server: the reference's fields,
defaults and every rule of reference-api.md section 3, and ours (docs/lb.md)."""

import uuid

import pytest

from tests.compute.conftest import Member, created, refused
from tests.iam.helpers import ADMIN_PROJECT

from .conftest import LB_IMAGE
from .helpers import (APPLIANCE_IP, LB, backend, certificate_record, external, hw_node,
                      make_lb, make_pool, make_route, make_vhost, pools, prefix, raw_cert,
                      register_appliance, routes, set_address, vhosts)


@pytest.fixture(scope="module")
def admin(server):
    from tests.conftest import ADMIN_PASSWORD
    return server.client(server.login("admin", ADMIN_PASSWORD))


@pytest.fixture(scope="module")
def node(admin, server):
    return hw_node(admin, ipv4="10.1.0.7", store=server.store)


@pytest.fixture
def lb(admin, node):
    """An LB of its own node, so that ports are free in every test."""
    return make_lb(admin, type=external(hw_node(admin)))


def unchanged(server, lb):
    """A snapshot of an LB and all its children; equal before and after a refused write."""
    store = server.store
    kinds = ("network_lb_vhosts", "network_lb_routes", "network_lb_backend_pools")
    return (store.collection("network_lb").get(lb["uuid"])["revision"],
            {k: sorted((r["uuid"], r["revision"]) for r in store.collection(k).by(
                "lb", lb["uuid"])) for k in kinds})


# ---- load balancers -----------------------------------------------------------------

def test_default_type_is_the_appliance_itself(admin):
    lb = make_lb(admin)
    assert lb["type"] == {"kind": "core_agent"}
    assert lb["ipsv4"] == [APPLIANCE_IP]
    assert lb["status"] == "NEW" and lb["status_reason"] is None
    assert admin.get(f"{LB}/{lb['uuid']}").json == lb
    assert lb["uuid"] in [r["uuid"] for r in admin.get(LB).json]


def test_default_type_without_an_own_node_is_core_and_needs_lb_image(bare_server):
    from tests.conftest import ADMIN_PASSWORD
    client = bare_server.client(bare_server.login("admin", ADMIN_PASSWORD))
    message = refused(client.post(LB, {"project_id": ADMIN_PROJECT}), 409)
    assert "lb_image" in message
    assert "no node of its own" in refused(client.post(LB, {
        "project_id": ADMIN_PROJECT, "type": {"kind": "core_agent"}}), 409)
    assert client.get(LB).json == []


def test_a_project_lb_defaults_to_core_even_without_lb_image(bare_server):
    """A project's LB never falls back to the appliance's node: without lb_image its
    default (core) is 409, and the message offers external_node, not core_agent."""
    from tests.conftest import ADMIN_PASSWORD
    client = bare_server.client(bare_server.login("admin", ADMIN_PASSWORD))
    register_appliance(bare_server.store)
    member = Member(bare_server, client)
    message = refused(member.client.post(LB, {"name": "edge"}), 409)
    assert "lb_image" in message and "external_node" in message
    assert "core_agent" not in message
    assert member.client.get(LB).json == []


def test_core_fills_the_reference_defaults(admin):
    lb = make_lb(admin, type={"kind": "core"})
    assert lb["type"] == {"kind": "core", "cpu": 1, "ram": 512, "disk_size": 10,
                          "nodes_number": 1}
    assert lb["ipsv4"] == []        # no set member has an address yet


def test_external_node_must_be_of_the_lb_project(server, admin, node):
    lb = make_lb(admin, type=external(node))
    assert lb["ipsv4"] == ["10.1.0.7"]
    member = Member(server, admin)
    theirs = hw_node(admin, project=member.project)
    message = refused(admin.post(LB, {"project_id": ADMIN_PROJECT, "type": external(theirs)}),
                      400)
    assert message == f"Node {theirs['uuid']} is not found in the LB project."
    missing = str(uuid.uuid4())
    refused(admin.post(LB, {"project_id": ADMIN_PROJECT,
                            "type": {"kind": "external_node", "external_node": missing}}), 400)


def test_ipsv4_follow_the_node_address(server, admin):
    node = hw_node(admin, ipv4="10.1.0.8", store=server.store)
    lb = make_lb(admin, type=external(node))
    set_address(server.store, node["uuid"], "10.1.0.9")
    assert admin.get(f"{LB}/{lb['uuid']}").json["ipsv4"] == ["10.1.0.9"]


BAD_TYPES = [
    ({"kind": "cloud"}, 400, "type.kind"),
    ({"kind": "core", "cpu": 0}, 400, "type.cpu"),
    ({"kind": "core", "cpu": 129}, 400, "type.cpu"),
    ({"kind": "core", "ram": 511}, 400, "type.ram"),
    ({"kind": "core", "disk_size": 9}, 400, "type.disk_size"),
    ({"kind": "core", "nodes_number": 17}, 400, "type.nodes_number"),
    ({"kind": "core", "nodes_number": 0}, 400, "type.nodes_number"),
    ({"kind": "core_agent", "cpu": 1}, 400, "type"),
    ({"kind": "external_node"}, 400, "type.external_node"),
    ({"kind": "external_node", "external_node": "n1"}, 400, "type.external_node"),
]


@pytest.mark.parametrize("spec,status,where", BAD_TYPES)
def test_bad_type(admin, spec, status, where):
    before = len(admin.get(LB).json)
    assert where in refused(admin.post(LB, {"project_id": ADMIN_PROJECT, "type": spec}),
                            status)
    assert len(admin.get(LB).json) == before


def test_core_boundaries_are_accepted(admin):
    lb = make_lb(admin, type={"kind": "core", "cpu": 128, "ram": 512, "disk_size": 10,
                              "nodes_number": 16})
    assert lb["type"]["nodes_number"] == 16


def test_status_and_ipsv4_are_read_only(admin, lb):
    for field, value in (("status", "ACTIVE"), ("ipsv4", ["1.2.3.4"]),
                         ("status_reason", "x"), ("node_status", {"n": 1})):
        assert field in refused(admin.put(f"{LB}/{lb['uuid']}", {field: value}), 403)


def test_status_on_create_is_refused(admin):
    refused(admin.post(LB, {"project_id": ADMIN_PROJECT, "status": "ACTIVE"}), 403)
    refused(admin.post(LB, {"project_id": ADMIN_PROJECT, "colour": "red"}), 400)


def test_put_returns_the_lb_to_in_progress(server, admin, lb):
    server.store.collection("network_lb").update(lb["uuid"], {"status": "ACTIVE"})
    updated = admin.put(f"{LB}/{lb['uuid']}", {"name": "renamed"})
    assert updated.status == 200 and updated.json["status"] == "IN_PROGRESS"


def test_core_disk_never_shrinks(server, admin):
    lb = make_lb(admin, type={"kind": "core", "disk_size": 20})
    before = unchanged(server, lb)
    assert "cannot shrink" in refused(admin.put(f"{LB}/{lb['uuid']}", {
        "type": {"kind": "core", "disk_size": 19}}), 400)
    assert unchanged(server, lb) == before
    grown = admin.put(f"{LB}/{lb['uuid']}", {"type": {"kind": "core", "disk_size": 21,
                                                       "nodes_number": 2}})
    assert grown.status == 200 and grown.json["type"]["nodes_number"] == 2


def test_a_project_member_sees_only_its_lbs(server, admin, lb):
    member = Member(server, admin)
    node = hw_node(admin, project=member.project)
    mine = created(member.client.post(LB, {"type": external(node)}))
    assert mine["project_id"] == member.project
    assert [r["uuid"] for r in member.client.get(LB).json] == [mine["uuid"]]
    refused(member.client.get(f"{LB}/{lb['uuid']}"), 404)
    refused(member.client.get(f"{LB}/{lb['uuid']}/vhosts"), 404)
    refused(member.client.post(f"{LB}/{lb['uuid']}/backend_pools", {
        "endpoints": [{"kind": "host", "host": "h"}]}), 404)


def test_delete_takes_the_children(server, admin, lb):
    pool = make_pool(admin, lb)
    vhost = make_vhost(admin, lb)
    make_route(admin, lb, vhost, prefix(pool))
    assert admin.delete(f"{LB}/{lb['uuid']}").status == 204
    for kind in ("network_lb_vhosts", "network_lb_routes", "network_lb_backend_pools"):
        assert server.store.collection(kind).by("lb", lb["uuid"]) == []
    refused(admin.delete(f"{LB}/{lb['uuid']}"), 404)
    refused(admin.get(f"{vhosts(lb)}/{vhost['uuid']}"), 404)


# ---- vhosts -----------------------------------------------------------------------------

def test_vhost_defaults(admin, lb):
    vhost = created(admin.post(vhosts(lb), {"domains": ["www.example.test"]}))
    assert (vhost["protocol"], vhost["port"], vhost["enabled"], vhost["status"]) == \
        ("http", 80, True, "ACTIVE")
    assert vhost["cert"] is None and vhost["redirect_http"] is False
    assert vhost["external_sources"] == [] and vhost["proxy_protocol_from"] is None
    assert vhost["lb"] == f"{LB}/{lb['uuid']}" and vhost["project_id"] == ADMIN_PROJECT
    assert admin.get(f"{vhosts(lb)}/{vhost['uuid']}").json == vhost


def test_the_reference_cli_body_is_accepted(admin, lb):
    # exordos network vhosts add: what it sends, project_id and all
    body = {"uuid": str(uuid.uuid4()), "project_id": ADMIN_PROJECT, "name": "",
            "description": "", "protocol": "tcp", "port": 5432, "domains": None,
            "cert": None, "proxy_protocol_from": None, "enabled": True}
    assert created(admin.post(vhosts(lb), body))["uuid"] == body["uuid"]


BAD_VHOSTS = [
    ({"protocol": "http"}, 400, "needs at least one domain"),
    ({"protocol": "http", "domains": []}, 400, "needs at least one domain"),
    ({"protocol": "https", "domains": ["a.test"]}, 400, "needs a cert"),
    ({"protocol": "tcp", "domains": ["a.test"]}, 400, "takes no domains"),
    ({"protocol": "udp", "domains": ["a.test"]}, 400, "takes no domains"),
    ({"protocol": "tcp", "cert": raw_cert()}, 400, "only an https vhost takes a cert"),
    ({"protocol": "http", "domains": ["a.test"], "redirect_http": True}, 400,
     "redirect_http"),
    ({"protocol": "udp", "proxy_protocol_from": "10.0.0.0/8"}, 400, "not allowed for udp"),
    ({"protocol": "tcp", "proxy_protocol_from": "ten"}, 400, "proxy_protocol_from"),
    ({"protocol": "http", "domains": ["bad domain"]}, 400, "domains.0"),
    ({"protocol": "http", "domains": ["a..test"]}, 400, "domains.0"),
    ({"protocol": "http", "domains": [""]}, 400, "domains.0"),
    ({"protocol": "sctp"}, 400, "protocol"),
    ({"protocol": "tcp", "port": 0}, 400, "port"),
    ({"protocol": "tcp", "port": 65536}, 400, "port"),
    ({"protocol": "tcp", "external_sources": [{"kind": "ssh_forward", "host": "h"}]}, 400,
     "not supported"),
    ({"protocol": "tcp", "status": "ERROR"}, 403, "status"),
    ({"protocol": "https", "domains": ["a.test"], "cert": {"kind": "raw", "crt": "x",
                                                          "key": "y"}}, 400, "cert.crt"),
    ({"protocol": "https", "domains": ["a.test"], "cert": {"kind": "raw"}}, 400, "cert.crt"),
    ({"protocol": "https", "domains": ["a.test"], "cert": {"kind": "acme"}}, 400,
     "cert.kind"),
    ({"protocol": "https", "domains": ["a.test"],
      "cert": {"kind": "certificate", "certificate": str(uuid.uuid4())}}, 400,
     "no certificate"),
    ({"protocol": "https", "domains": ["a.test"],
      "cert": {"kind": "certificate", "certificate": "c1"}}, 400, "cert.certificate"),
]


@pytest.mark.parametrize("body,status,words", BAD_VHOSTS)
def test_bad_vhost(server, admin, lb, body, status, words):
    before = unchanged(server, lb)
    assert words in refused(admin.post(vhosts(lb), body), status)
    assert unchanged(server, lb) == before


def test_https_cert_key_must_match_and_be_clear(server, admin, lb):
    one, other = raw_cert(), raw_cert()
    mixed = {"kind": "raw", "crt": one["crt"], "key": other["key"]}
    before = unchanged(server, lb)
    assert "does not belong" in refused(admin.post(vhosts(lb), {
        "protocol": "https", "domains": ["a.test"], "cert": mixed}), 400)
    assert unchanged(server, lb) == before


def test_raw_key_is_sealed_in_the_store_and_shown_to_readers(server, admin, lb):
    cert = raw_cert()
    vhost = make_vhost(admin, lb, "https", cert=cert)
    assert vhost["cert"] == cert
    stored = server.store.collection("network_lb_vhosts").get(vhost["uuid"])
    assert stored["cert"]["key"] != cert["key"] and "PRIVATE KEY" not in stored["cert"]["key"]
    # a PUT of other fields keeps the key (and its seal opens again)
    again = admin.put(f"{vhosts(lb)}/{vhost['uuid']}", {"port": vhost["port"] + 1000})
    assert again.status == 200 and again.json["cert"] == cert


def test_certificate_of_the_project_is_accepted(server, admin, lb):
    record = certificate_record(server.store)
    vhost = make_vhost(admin, lb, "https", redirect_http=False, cert={
        "kind": "certificate", "certificate": f"/v1/secret/certificates/{record['uuid']}"})
    assert vhost["cert"] == {"kind": "certificate", "certificate": record["uuid"]}
    member = Member(server, admin)
    theirs = certificate_record(server.store, project=member.project)
    refused(admin.post(vhosts(lb), {"protocol": "https", "domains": ["b.test"], "cert": {
        "kind": "certificate", "certificate": theirs["uuid"]}}), 400)


def test_protocol_is_read_only_after_create(server, admin, lb):
    vhost = make_vhost(admin, lb, "tcp")
    before = unchanged(server, lb)
    assert "protocol" in refused(admin.put(f"{vhosts(lb)}/{vhost['uuid']}",
                                           {"protocol": "udp"}), 403)
    assert unchanged(server, lb) == before
    # sending it back unchanged is fine (a client PUTs what it read)
    assert admin.put(f"{vhosts(lb)}/{vhost['uuid']}", {"protocol": "tcp"}).status == 200


PORT_RULES = [
    # (first, second, allowed): the reference's conflicts within one LB
    ("http", "http", True), ("https", "https", True), ("http", "https", False),
    ("http", "tcp", False), ("https", "tcp", False), ("tcp", "tcp", False),
    ("udp", "udp", False), ("tcp", "udp", True), ("http", "udp", True),
]


@pytest.mark.parametrize("first,second,allowed", PORT_RULES)
def test_port_conflicts_within_an_lb(server, admin, lb, first, second, allowed):
    make_vhost(admin, lb, first, port=8443, **({"cert": raw_cert()} if first == "https"
                                               else {}))
    body = {"protocol": second, "port": 8443}
    if second in ("http", "https"):
        body["domains"] = ["other.example.test"]
    if second == "https":
        body["cert"] = raw_cert()
    if allowed:
        created(admin.post(vhosts(lb), body))
    else:
        before = unchanged(server, lb)
        assert "port 8443" in refused(admin.post(vhosts(lb), body), 409)
        assert unchanged(server, lb) == before


def test_a_domain_is_served_once_per_port(admin, lb):
    make_vhost(admin, lb, "http", port=8080, domains=["a.example.test"])
    assert "domain a.example.test" in refused(admin.post(vhosts(lb), {
        "port": 8080, "domains": ["A.example.test", "b.example.test"]}), 409)


def test_a_shared_port_takes_the_proxy_protocol_everywhere_or_nowhere(admin, lb):
    make_vhost(admin, lb, "http", port=8082, proxy_protocol_from="10.0.0.0/8")
    assert "PROXY" in refused(admin.post(vhosts(lb), {"port": 8082,
                                                      "domains": ["b.example.test"]}), 409)
    created(admin.post(vhosts(lb), {"port": 8082, "domains": ["b.example.test"],
                                    "proxy_protocol_from": "192.0.2.0/24"}))


def test_redirect_http_takes_port_80(admin, lb):
    make_vhost(admin, lb, "tcp", port=80)
    assert "port 80" in refused(admin.post(vhosts(lb), {
        "protocol": "https", "port": 443, "domains": ["a.test"], "cert": raw_cert(),
        "redirect_http": True}), 409)
    created(admin.post(vhosts(lb), {"protocol": "https", "port": 443, "domains": ["a.test"],
                                    "cert": raw_cert()}))


def test_a_port_change_is_checked_too(server, admin, lb):
    make_vhost(admin, lb, "tcp", port=9000)
    moving = make_vhost(admin, lb, "tcp", port=9001)
    before = unchanged(server, lb)
    refused(admin.put(f"{vhosts(lb)}/{moving['uuid']}", {"port": 9000}), 409)
    assert unchanged(server, lb) == before


@pytest.mark.parametrize("port,protocol,user", [
    (443, "tcp", "HTTPS API"), (22, "tcp", "SSH"), ("dns", "udp", "DNS"),
    ("dns", "tcp", "DNS"), ("api", "http", "the appliance's API")])
def test_core_agent_refuses_the_appliance_ports(server, admin, port, protocol, user):
    lb = make_lb(admin)
    port = {"dns": server.settings["dns_port"], "api": server.settings["api_port"]}.get(
        port, port)
    body = {"protocol": protocol, "port": port}
    if protocol == "http":
        body["domains"] = ["a.test"]
    message = refused(admin.post(vhosts(lb), body), 409)
    assert f"port {port}/" in message and user in message


def test_core_agent_udp_on_443_is_free(admin):
    created(admin.post(vhosts(make_lb(admin)), {"protocol": "udp", "port": 443}))


def test_lbs_on_one_node_follow_the_port_rules_of_one(server, admin):
    node = hw_node(admin)
    one, two = make_lb(admin, type=external(node)), make_lb(admin, type=external(node))
    make_vhost(admin, one, "tcp", port=7000)
    make_vhost(admin, one, "http", port=7001, domains=["one.example.test"])
    assert "another load balancer" in refused(admin.post(vhosts(two), {
        "protocol": "tcp", "port": 7000}), 409)
    created(admin.post(vhosts(two), {"protocol": "udp", "port": 7000}))
    # name-based: another LB's http vhost on the same port, with other domains
    created(admin.post(vhosts(two), {"port": 7001, "domains": ["two.example.test"]}))
    assert "domain one.example.test" in refused(admin.post(vhosts(two), {
        "port": 7001, "domains": ["one.example.test"]}), 409)
    assert "PROXY" in refused(admin.post(vhosts(two), {
        "port": 7001, "domains": ["three.example.test"],
        "proxy_protocol_from": "10.0.0.0/8"}), 409)
    # moving an LB onto a node where its ports are taken is refused too
    three = make_lb(admin, type=external(hw_node(admin)))
    make_vhost(admin, three, "tcp", port=7000)
    before = unchanged(server, three)
    refused(admin.put(f"{LB}/{three['uuid']}", {"type": external(node)}), 409)
    assert unchanged(server, three) == before


def test_moving_onto_the_appliance_checks_its_ports(admin, lb):
    make_vhost(admin, lb, "tcp", port=22)
    assert "SSH" in refused(admin.put(f"{LB}/{lb['uuid']}", {"type": {"kind": "core_agent"}}),
                            409)


def test_vhost_delete_takes_its_routes(server, admin, lb):
    pool = make_pool(admin, lb)
    vhost = make_vhost(admin, lb)
    route = make_route(admin, lb, vhost, prefix(pool))
    assert admin.delete(f"{vhosts(lb)}/{vhost['uuid']}").status == 204
    assert server.store.collection("network_lb_routes").get(route["uuid"]) is None
    # and the pool is free again
    assert admin.delete(f"{pools(lb)}/{pool['uuid']}").status == 204


# ---- routes ----------------------------------------------------------------------------

@pytest.fixture
def l7(admin, lb):
    return lb, make_vhost(admin, lb), make_pool(admin, lb)


def test_route_defaults(admin, l7):
    lb, vhost, pool = l7
    route = make_route(admin, lb, vhost, {"kind": "prefix", "actions": [backend(pool)]})
    assert route["enabled"] is True and route["status"] == "ACTIVE"
    assert route["vhost"] == f"{LB}/{lb['uuid']}/vhosts/{vhost['uuid']}"
    assert route["condition"] == {
        "kind": "prefix", "value": "/", "allowed_ips": ["0.0.0.0/0"],
        "actions": [{"kind": "backend", "pool": pool["uuid"], "protocol": {"kind": "http"}}],
        "modifiers": [{"kind": "auto_header", "headers": [
            "Host", "X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto",
            "X-Forwarded-Prefix"]}]}
    path = f"{routes(lb, vhost)}/{route['uuid']}"
    assert admin.get(path).json == route
    assert [r["uuid"] for r in admin.get(routes(lb, vhost)).json] == [route["uuid"]]


def test_regex_route_drops_the_prefix_header(admin, l7):
    lb, vhost, pool = l7
    route = make_route(admin, lb, vhost, {"kind": "regex", "value": r"^/api/v\d+/",
                                          "actions": [backend(pool)]})
    assert "X-Forwarded-Prefix" not in route["condition"]["modifiers"][0]["headers"]


def test_action_defaults(admin, l7):
    lb, vhost, pool = l7
    got = [make_route(admin, lb, vhost, {"kind": "exact", "value": f"/{i}", "actions": [a]})
           ["condition"]["actions"][0] for i, a in enumerate([
               {"kind": "redirect", "url": "https://a.test/"},
               {"kind": "local_dir", "path": "/var/www/site"},
               {"kind": "local_dir_download", "url": "https://a.test/site.tar.gz"},
               backend(pool, protocol={"kind": "https"})])]
    assert got[0]["code"] == 301
    assert (got[1]["is_spa"], got[1]["dav_methods"]) == (True, [])
    assert got[2]["is_spa"] is True
    assert got[3]["protocol"] == {"kind": "https", "verify": True}


def upload_route(pool, **overrides):
    """The 4.3.1 upload route: a writable local_dir behind an auth_request."""
    return {"kind": "prefix", "value": "/repo/",
            "actions": [{"kind": "local_dir", "path": "/var/www/repo",
                         "dav_methods": ["PUT", "DELETE"]}],
            "modifiers": [{"kind": "auth_request", "pool": pool["uuid"],
                           "path": "/v1/repo/repositories/x/actions/authorize_upload"}],
            **overrides}


def test_the_upload_route_on_an_external_node(admin, l7):
    lb, vhost, pool = l7
    route = make_route(admin, lb, vhost, upload_route(pool))
    assert route["condition"]["actions"][0]["dav_methods"] == ["PUT", "DELETE"]


BAD_ROUTES = [
    (lambda p: {"kind": "prefix", "value": "api", "actions": [backend(p)]}, "condition.value"),
    (lambda p: {"kind": "prefix", "value": "/a b", "actions": [backend(p)]},
     "condition.value"),
    (lambda p: {"kind": "prefix", "value": "/a;", "actions": [backend(p)]}, "condition.value"),
    (lambda p: {"kind": "regex", "value": "(", "actions": [backend(p)]},
     "not a valid regular expression"),
    (lambda p: {"kind": "regex", "actions": [backend(p)]}, "condition.value"),
    (lambda p: {"kind": "prefix"}, "condition.actions"),
    (lambda p: {"kind": "prefix", "actions": []}, "condition.actions"),
    (lambda p: {"kind": "prefix", "actions": [backend(p), backend(p)]}, "condition.actions"),
    (lambda p: {"kind": "fuzzy", "actions": [backend(p)]}, "condition.kind"),
    (lambda p: {"kind": "raw", "actions": [backend(p)]}, "takes no raw routes"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "teleport"}]},
     "condition.actions.0.kind"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "backend", "pool": str(uuid.uuid4())}]},
     "is not a pool of this LB"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "redirect", "url": "ftp://a"}]},
     "url"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "redirect", "url": "https://a",
                                               "code": 299}]}, "code"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "redirect", "url": "https://a",
                                               "code": 400}]}, "code"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "local_dir", "path": "/etc"}]},
     "path"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "local_dir",
                                               "path": "/var/www/../etc"}]}, "path"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "local_dir", "path": "/var/www/a",
                                               "dav_methods": ["POST"]}]}, "dav_methods"),
    (lambda p: {"kind": "prefix", "actions": [{"kind": "local_dir_download",
                                               "url": "https://a.test/x.zip"}]}, "url"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)], "allowed_ips": ["10.0.0.0/33"]},
     "allowed_ips.0"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)], "allowed_ips": []},
     "allowed_ips"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "set_header", "name": "X A", "value": "v"}]},
     "modifiers.0.name"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "set_header", "name": "X", "value": "a\nb"}]},
     "modifiers.0.value"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "rewrite_url", "regex": "[", "replacement": "/"}]},
     "not a valid regular expression"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "auto_header", "headers": ["Cookie"]}]},
     "headers"),
    (lambda p: {"kind": "regex", "value": "^/", "actions": [backend(p)],
                "modifiers": [{"kind": "auth_request", "pool": p["uuid"], "path": "/a"}]},
     "not allowed on a regex route"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "auth_request", "pool": p["uuid"], "path": "/a"},
                              {"kind": "auth_request", "pool": p["uuid"], "path": "/b"}]},
     "at most one auth_request"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "auth_request", "pool": p["uuid"], "path": "/a?b"}]},
     "path"),
    (lambda p: {"kind": "prefix", "actions": [backend(p)],
                "modifiers": [{"kind": "auth_request", "pool": str(uuid.uuid4()),
                               "path": "/a"}]}, "is not a pool of this LB"),
    (lambda p: upload_route(p, modifiers=[]), "needs an auth_request"),
    (lambda p: upload_route(p, value="/repo/x/"), "one segment"),
    (lambda p: upload_route(p, value="/repo"), "one segment"),
    (lambda p: upload_route(p, kind="exact"), "prefix route"),
    (lambda p: upload_route(p, modifiers=upload_route(p)["modifiers"] + [
        {"kind": "rewrite_url", "regex": "^/", "replacement": "/"}]), "no rewrite_url"),
]


@pytest.mark.parametrize("make,words", BAD_ROUTES)
def test_bad_route(server, admin, l7, make, words):
    lb, vhost, pool = l7
    before = unchanged(server, lb)
    assert words in refused(admin.post(routes(lb, vhost), {"condition": make(pool)}), 400)
    assert unchanged(server, lb) == before


def test_auth_request_pool_of_another_lb_is_refused(admin, l7):
    lb, vhost, _pool = l7
    theirs = make_pool(admin, make_lb(admin, type=external(hw_node(admin))))
    assert "not a pool of this LB" in refused(admin.post(routes(lb, vhost), {
        "condition": {"kind": "prefix", "actions": [{"kind": "redirect", "url": "https://a"}],
                      "modifiers": [{"kind": "auth_request", "pool": theirs["uuid"],
                                     "path": "/auth"}]}}), 400)


def test_l4_vhosts_take_only_raw_routes(server, admin, lb):
    pool = make_pool(admin, lb)
    for protocol in ("tcp", "udp"):
        vhost = make_vhost(admin, lb, protocol)
        before = unchanged(server, lb)
        assert "takes only raw routes" in refused(admin.post(routes(lb, vhost), {
            "condition": prefix(pool)}), 400)
        assert unchanged(server, lb) == before
        route = make_route(admin, lb, vhost, {"kind": "raw", "actions": [backend(pool)]})
        assert route["condition"] == {"kind": "raw", "allowed_ips": ["0.0.0.0/0"],
                                      "actions": [{"kind": "backend", "pool": pool["uuid"]}]}
        refused(admin.post(routes(lb, vhost), {"condition": {
            "kind": "raw", "value": "/", "actions": [backend(pool)]}}), 400)
        refused(admin.post(routes(lb, vhost), {"condition": {
            "kind": "raw", "actions": [backend(pool, protocol={"kind": "http"})]}}), 400)


def test_writable_local_dir_placement_rules(server, admin):
    on_appliance = make_lb(admin)
    vhost = make_vhost(admin, on_appliance)
    pool = make_pool(admin, on_appliance)
    assert "core_agent" in refused(admin.post(routes(on_appliance, vhost), {
        "condition": upload_route(pool)}), 409)
    many = make_lb(admin, type={"kind": "core", "nodes_number": 2})
    vhost, pool = make_vhost(admin, many), make_pool(admin, many)
    assert "2 nodes" in refused(admin.post(routes(many, vhost), {
        "condition": upload_route(pool)}), 409)
    one = make_lb(admin, type={"kind": "core"})
    vhost, pool = make_vhost(admin, one), make_pool(admin, one)
    make_route(admin, one, vhost, upload_route(pool))
    # and the LB cannot then grow to more nodes, nor move onto the appliance
    before = unchanged(server, one)
    refused(admin.put(f"{LB}/{one['uuid']}", {"type": {"kind": "core", "nodes_number": 3}}),
            409)
    refused(admin.put(f"{LB}/{one['uuid']}", {"type": {"kind": "core_agent"}}), 409)
    assert unchanged(server, one) == before


def test_route_update_checks_the_condition(server, admin, l7):
    lb, vhost, pool = l7
    route = make_route(admin, lb, vhost, prefix(pool))
    before = unchanged(server, lb)
    refused(admin.put(f"{routes(lb, vhost)}/{route['uuid']}", {"condition": {
        "kind": "raw", "actions": [backend(pool)]}}), 400)
    assert unchanged(server, lb) == before
    moved = admin.put(f"{routes(lb, vhost)}/{route['uuid']}", {"condition": prefix(
        pool, "/api/"), "enabled": False})
    assert moved.status == 200 and moved.json["condition"]["value"] == "/api/"


def test_a_route_under_another_lb_path_is_404(admin, l7):
    lb, vhost, pool = l7
    other = make_lb(admin, type=external(hw_node(admin)))
    route = make_route(admin, lb, vhost, prefix(pool))
    refused(admin.get(f"{LB}/{other['uuid']}/vhosts/{vhost['uuid']}/routes/{route['uuid']}"),
            404)
    refused(admin.post(f"{LB}/{other['uuid']}/vhosts/{vhost['uuid']}/routes",
                       {"condition": prefix(pool)}), 404)


# ---- backend pools ----------------------------------------------------------------------

def test_pool_defaults_and_references(server, admin, lb):
    node = hw_node(admin)
    node_set = created(admin.post("/v1/compute/sets", {
        "name": "s", "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024, "replicas": 0,
        "disk_spec": {"kind": "root_disk", "image": LB_IMAGE}}))
    pool = make_pool(admin, lb, [
        {"kind": "host", "host": "backend.example.test"},
        {"kind": "node", "node": f"{node['uuid']}", "port": 8080, "weight": 3},
        {"kind": "node_set", "node_set": node_set["uuid"], "port": 53}])
    assert pool["balance"] == "roundrobin" and pool["status"] == "ACTIVE"
    assert pool["endpoints"] == [
        {"kind": "host", "host": "backend.example.test", "port": 80, "weight": 1},
        {"kind": "node", "node": node["uuid"], "port": 8080, "weight": 3},
        {"kind": "node_set", "node_set": node_set["uuid"], "port": 53, "weight": 1}]


BAD_POOLS = [
    ({"endpoints": []}, "No endpoints defined"),
    ({}, "endpoints: required"),
    ({"endpoints": [{"kind": "host"}]}, "endpoints.0.host"),
    ({"endpoints": [{"kind": "host", "host": "a b"}]}, "endpoints.0.host"),
    ({"endpoints": [{"kind": "host", "host": "h" * 261}]}, "endpoints.0.host"),
    ({"endpoints": [{"kind": "host", "host": "h", "port": 0}]}, "endpoints.0.port"),
    ({"endpoints": [{"kind": "host", "host": "h", "weight": 1001}]}, "endpoints.0.weight"),
    ({"endpoints": [{"kind": "host", "host": "h", "weight": -1}]}, "endpoints.0.weight"),
    ({"endpoints": [{"kind": "vm", "vm": "x"}]}, "endpoints.0.kind"),
    ({"endpoints": [{"kind": "node", "node": str(uuid.uuid4())}]}, "endpoints.0.node: node"),
    ({"endpoints": [{"kind": "node_set", "node_set": str(uuid.uuid4())}]},
     "endpoints.0.node_set: node set"),
    ({"endpoints": [{"kind": "host", "host": "h"}], "balance": "leastconn"}, "balance"),
]


@pytest.mark.parametrize("body,words", BAD_POOLS)
def test_bad_pool(server, admin, lb, body, words):
    before = unchanged(server, lb)
    assert words in refused(admin.post(pools(lb), body), 400)
    assert unchanged(server, lb) == before


def test_pool_endpoints_must_be_of_the_lb_project(server, admin, lb):
    member = Member(server, admin)
    theirs = hw_node(admin, project=member.project)
    assert "not found in project" in refused(admin.post(pools(lb), {"endpoints": [
        {"kind": "node", "node": theirs["uuid"]}]}), 400)


def test_a_pool_in_use_is_not_deleted(server, admin, l7):
    lb, vhost, pool = l7
    auth = make_pool(admin, lb)
    route = make_route(admin, lb, vhost, {
        "kind": "prefix", "actions": [backend(pool)],
        "modifiers": [{"kind": "auth_request", "pool": auth["uuid"], "path": "/auth"}]})
    for used in (pool, auth):
        before = unchanged(server, lb)
        assert "Backend pool in use, remove route first" in refused(
            admin.delete(f"{pools(lb)}/{used['uuid']}"), 409)
        assert unchanged(server, lb) == before
    assert admin.delete(f"{routes(lb, vhost)}/{route['uuid']}").status == 204
    assert admin.delete(f"{pools(lb)}/{auth['uuid']}").status == 204


def test_pool_update_needs_endpoints(server, admin, lb):
    pool = make_pool(admin, lb)
    before = unchanged(server, lb)
    assert "No endpoints defined" in refused(admin.put(f"{pools(lb)}/{pool['uuid']}",
                                                       {"endpoints": []}), 400)
    assert unchanged(server, lb) == before


# ---- a child write re-renders the LB ----------------------------------------------------

def test_every_child_write_moves_the_lb_to_in_progress(server, admin, lb):
    coll = server.store.collection("network_lb")

    def settled():
        coll.update(lb["uuid"], {"status": "ACTIVE"})

    def status():
        return admin.get(f"{LB}/{lb['uuid']}").json["status"]

    writes = []
    settled()
    pool = make_pool(admin, lb)
    writes.append(status())
    settled()
    vhost = make_vhost(admin, lb)
    writes.append(status())
    settled()
    route = make_route(admin, lb, vhost, prefix(pool))
    writes.append(status())
    for path, body in ((f"{pools(lb)}/{pool['uuid']}", {"name": "p"}),
                       (f"{vhosts(lb)}/{vhost['uuid']}", {"enabled": False}),
                       (f"{routes(lb, vhost)}/{route['uuid']}", {"enabled": False})):
        settled()
        assert admin.put(path, body).status == 200
        writes.append(status())
    settled()
    assert admin.delete(f"{routes(lb, vhost)}/{route['uuid']}").status == 204
    writes.append(status())
    assert writes == ["IN_PROGRESS"] * 7
    # a refused write leaves it alone
    settled()
    refused(admin.post(pools(lb), {"endpoints": []}), 400)
    assert status() == "ACTIVE"


def test_regex_values_keep_their_backslashes_and_braces(admin, l7):
    lb, vhost, pool = l7
    route = make_route(admin, lb, vhost, {"kind": "regex", "value": r"^/v\d{1,3}/(a|b)$",
                                          "actions": [backend(pool)]})
    assert route["condition"]["value"] == r"^/v\d{1,3}/(a|b)$"
    for bad in ('^/a"', "^/a\\"):
        refused(admin.post(routes(lb, vhost), {"condition": {
            "kind": "regex", "value": bad, "actions": [backend(pool)]}}), 400)
