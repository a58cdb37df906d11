"""Quotas per project (appliance/tenancy/quotas.py, docs/quotas.md): each one refused
with a 409 that names it, its use and its limit, leaving the state as it was; updates
that grow past a limit; settings; concurrent creates at the boundary; reading the use;
and the bound that the config quotas put on a node's payload.

Everything runs against the real API on a Waitress server on loopback, with small limits
set the way an administrator sets them (settings), each test in a project of its own."""

import re
import threading
import uuid

import orjson
import pytest

from appliance import config
from appliance.agent.targets import View, items_for
from appliance.compute.sets import reconcile_sets
from appliance.sqldb.versions import SEED_UUID
from appliance.tenancy import quotas
from tests.apiserver import ApiServer
from tests.compute.conftest import IMAGE, Member, created, node_body
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_user
from tests.sqldb.helpers import make_instance

N, S, V = "/v1/compute/nodes", "/v1/compute/sets", "/v1/compute/volumes"
C, LB, D = "/v1/config/configs", "/v1/network/lb", "/v1/dns/domains"
KIB = 1024
LIMITS = {"quota_nodes": 3, "quota_cores": 8, "quota_ram": 8192, "quota_disk": 100,
          "quota_volumes": 2, "quota_lbs": 2, "quota_sqldb_instances": 1,
          "quota_configs": 3, "quota_config_bytes": 48 * KIB,
          "quota_config_bytes_per_node": 32 * KIB, "quota_dns_domains": 1,
          "quota_dns_records": 2}
KINDS = ("compute_nodes", "compute_sets", "compute_volumes", "config_configs", "network_lb",
         "sqldb_instances", "dns_domains", "dns_records")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    lb_image="file:///var/lib/appliance/images/node.qcow2", **LIMITS).start()
    yield srv
    srv.stop()


@pytest.fixture
def member(server, admin):
    """An owner in a fresh project: each test starts at zero use."""
    return Member(server, admin)


def snapshot(server, project):
    """Every counted record of the project with its revision."""
    return {k: sorted((r["uuid"], r["revision"]) for r in
                      server.store.collection(k).by("project_id", project)) for k in KINDS}


def quota_refused(server, project, request, quota, use, more, limit):
    """`request()` is a 409 QuotaExceeded naming the quota, its use, what was asked and
    the limit, and nothing of the project changed."""
    before = snapshot(server, project)
    resp = request()
    assert resp.status == 409, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"}, body
    assert body["type"] == "QuotaExceeded" and body["code"] == 409, body
    assert f"quota {quota} of project {project}" in body["message"], body
    assert re.search(rf"\buse {use} \+ {more} requested exceeds the limit {limit}\b",
                     body["message"]), body
    assert f"quota_{quota}" in body["message"]        # the setting that raises it
    assert snapshot(server, project) == before
    return body["message"]


def node(client, project, **fields):
    return created(client.post(N, node_body(project_id=project, **fields)))


def hw(client, project):
    return created(client.post(N, {"name": f"hw-{uuid.uuid4().hex[:6]}", "project_id": project,
                                   "cores": 1, "ram": 1024, "node_type": "HW"}))


def text_config(project, target_node, size, **fields):
    return {"name": f"c-{uuid.uuid4().hex[:6]}", "project_id": project,
            "path": f"/etc/q/{uuid.uuid4().hex[:8]}",
            "target": {"kind": "node", "node": target_node},
            "body": {"kind": "text", "content": "x" * size}, **fields}


def bytes_of(body):
    """What a config body counts: its stored body and on_change (the default one)."""
    return quotas.config_bytes({"body": body["body"],
                                "on_change": body.get("on_change", {"kind": "no_action"})})


def domain(client, project):
    return created(client.post(D, {"name": f"q{uuid.uuid4().hex[:8]}.test",
                                   "project_id": project}))


def a_record(name):
    return {"type": "A", "record": {"kind": "A", "name": name, "address": "192.0.2.1"}}


# ---- each quota -----------------------------------------------------------------------------

def over_nodes(server, m):
    for _ in range(3):
        node(m.client, m.project)
    return lambda: m.client.post(N, node_body(project_id=m.project)), "nodes", 3, 1, 3


def over_cores(server, m):
    node(m.client, m.project, cores=6)
    return (lambda: m.client.post(N, node_body(project_id=m.project, cores=3)),
            "cores", 6, 3, 8)


def over_ram(server, m):
    node(m.client, m.project, ram=6144)
    return (lambda: m.client.post(N, node_body(project_id=m.project, ram=4096)),
            "ram", 6144, 4096, 8192)


def over_disk(server, m):
    node(m.client, m.project, disk_spec={"kind": "root_disk", "image": IMAGE, "size": 60})
    return (lambda: m.client.post(V, {"name": "v", "project_id": m.project, "size": 50}),
            "disk", 60, 50, 100)


def over_volumes(server, m):
    for _ in range(2):
        created(m.client.post(V, {"name": "v", "project_id": m.project, "size": 1}))
    return (lambda: m.client.post(V, {"name": "v", "project_id": m.project, "size": 1}),
            "volumes", 2, 1, 2)


def over_lbs(server, m):
    target = {"kind": "external_node", "external_node": hw(m.client, m.project)["uuid"]}

    def lb():
        return m.client.post(LB, {"name": f"lb-{uuid.uuid4().hex[:6]}",
                                  "project_id": m.project, "type": target})
    for _ in range(2):
        created(lb())
    return lb, "lbs", 2, 1, 2


def over_sqldb_instances(server, m):
    make_instance(m.client, m.project)
    return (lambda: m.client.post("/v1/sqldb/instances", {
        "name": "db2", "project_id": m.project, "version": SEED_UUID, "cpu": 1, "ram": 512,
        "disk_size": 8}),
        "sqldb_instances", 1, 1, 1)


def over_configs(server, m):
    target = node(m.client, m.project)["uuid"]
    for _ in range(3):
        created(m.client.post(C, text_config(m.project, target, 10)))
    return (lambda: m.client.post(C, text_config(m.project, target, 10)),
            "configs", 3, 1, 3)


def over_config_bytes(server, m):
    # two nodes, each well under the per-node limit, together over the project's
    a, b = node(m.client, m.project)["uuid"], node(m.client, m.project)["uuid"]
    first, second = text_config(m.project, a, 30 * KIB), text_config(m.project, b, 30 * KIB)
    created(m.client.post(C, first))
    return (lambda: m.client.post(C, second), "config_bytes", bytes_of(first),
            bytes_of(second), 48 * KIB)


def over_config_bytes_per_node(server, m):
    a = node(m.client, m.project)["uuid"]
    first, second = text_config(m.project, a, 20 * KIB), text_config(m.project, a, 20 * KIB)
    created(m.client.post(C, first))
    return (lambda: m.client.post(C, second), "config_bytes_per_node", bytes_of(first),
            bytes_of(second), 32 * KIB)


def over_dns_domains(server, m):
    domain(m.client, m.project)
    return (lambda: m.client.post(D, {"name": f"q{uuid.uuid4().hex[:8]}.test",
                                      "project_id": m.project}), "dns_domains", 1, 1, 1)


def over_dns_records(server, m):
    zone = domain(m.client, m.project)
    records = f"{D}/{zone['uuid']}/records"
    for name in ("a", "b"):         # the domain's SOA is not counted
        created(m.client.post(records, a_record(name)))
    return lambda: m.client.post(records, a_record("c")), "dns_records", 2, 1, 2


SCENARIOS = [over_nodes, over_cores, over_ram, over_disk, over_volumes, over_lbs,
             over_sqldb_instances, over_configs, over_config_bytes,
             over_config_bytes_per_node, over_dns_domains, over_dns_records]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__[5:])
def test_each_quota_exceeded_is_a_409_naming_it_and_nothing_is_created(server, member,
                                                                      scenario):
    request, quota, use, more, limit = scenario(server, member)
    quota_refused(server, member.project, request, quota, use, more, limit)


def test_every_quota_has_a_scenario_and_a_setting():
    assert {s.__name__[5:] for s in SCENARIOS} == {q.name for q in quotas.ALL}
    assert set(LIMITS) == {q.setting for q in quotas.ALL}
    for quota in quotas.ALL:
        assert config.DEFAULTS[quota.setting] == quota.default > 0


def test_an_admin_writing_into_a_project_is_held_to_its_quotas(server, admin, member):
    for _ in range(3):
        node(member.client, member.project)
    quota_refused(server, member.project,
                  lambda: admin.post(N, node_body(project_id=member.project)),
                  "nodes", 3, 1, 3)


def test_the_admin_project_is_the_platforms_and_has_no_limits(server, admin):
    made = [node(admin, ADMIN_PROJECT)["uuid"] for _ in range(4)]
    assert all(server.store.collection("compute_nodes").get(u) for u in made)
    usage = admin.get(f"/v1/iam/projects/{ADMIN_PROJECT}/actions/quotas").json
    assert usage["nodes"]["use"] >= 4 and usage["nodes"]["limit"] is None


# ---- what hidden sets and sets charge -------------------------------------------------------

def usage(client, project):
    resp = client.get(f"/v1/iam/projects/{project}/actions/quotas")
    assert resp.status == 200, resp
    return {name: (q["use"], q["limit"]) for name, q in resp.json.items()}


def test_an_lb_of_type_core_charges_its_hidden_nodes_to_its_project(server, admin, member):
    created(member.client.post(LB, {"name": "edge", "project_id": member.project, "type": {
        "kind": "core", "cpu": 3, "ram": 1024, "disk_size": 10, "nodes_number": 2}}))
    used = usage(admin, member.project)
    assert (used["lbs"], used["nodes"], used["cores"], used["ram"], used["disk"]) == (
        (1, 2), (2, 3), (6, 8), (2048, 8192), (20, 100))
    # the hidden set lives in the admin project and is not counted twice
    quota_refused(server, member.project,
                  lambda: member.client.post(N, node_body(project_id=member.project,
                                                          cores=3)), "cores", 6, 3, 8)


def test_a_dbaas_instance_charges_its_hidden_nodes_to_its_project(server, admin, member):
    make_instance(member.client, member.project, cpu=2, ram=1024, disk_size=20,
                  nodes_number=2, sync_replica_number=1)
    used = usage(admin, member.project)
    # each member: a 10 GB root disk and a 20 GB data disk
    assert (used["nodes"][0], used["cores"][0], used["ram"][0], used["disk"][0]) == (
        2, 4, 2048, 60)


def test_a_set_counts_its_replicas_and_its_members_are_not_counted_again(server, admin,
                                                                        member):
    created(member.client.post(S, {**node_body(project_id=member.project), "replicas": 2}))
    reconcile_sets(server.store, server.settings)       # the members exist now
    assert len(server.store.collection("compute_nodes").by("project_id", member.project)) == 2
    used = usage(admin, member.project)
    assert (used["nodes"][0], used["cores"][0], used["disk"][0]) == (2, 2, 20)
    node(member.client, member.project)
    quota_refused(server, member.project,
                  lambda: member.client.post(S, {**node_body(project_id=member.project),
                                                 "replicas": 1}), "nodes", 3, 1, 3)


def test_hw_nodes_count_as_nodes_but_take_no_hypervisor_cores_ram_or_disk(server, admin,
                                                                        member):
    hw(member.client, member.project)
    used = usage(admin, member.project)
    assert (used["nodes"][0], used["cores"][0], used["ram"][0], used["disk"][0]) == (
        1, 0, 0, 0)


# ---- updates --------------------------------------------------------------------------------

def refused_update(server, member, path, body, quota, use, more, limit):
    before = member.client.get(path).json
    quota_refused(server, member.project, lambda: member.client.put(path, body), quota,
                  use, more, limit)
    assert member.client.get(path).json == before


def test_an_update_that_grows_past_a_limit_is_refused_and_changes_nothing(server, member):
    n = node(member.client, member.project, cores=2, ram=2048)
    refused_update(server, member, f"{N}/{n['uuid']}", {"cores": 9}, "cores", 2, 7, 8)
    refused_update(server, member, f"{N}/{n['uuid']}", {"ram": 9000}, "ram", 2048, 6952, 8192)
    refused_update(server, member, f"{N}/{n['uuid']}", {"disk_spec": {
        "kind": "root_disk", "image": IMAGE, "size": 101}}, "disk", 10, 91, 100)
    # within the limits it passes
    resp = member.client.put(f"{N}/{n['uuid']}", {"cores": 7})
    assert resp.status == 200 and resp.json["cores"] == 7, resp

    s = created(member.client.post(S, {**node_body(project_id=member.project),
                                       "replicas": 1}))
    refused_update(server, member, f"{S}/{s['uuid']}", {"replicas": 3}, "nodes", 2, 2, 3)

    v = created(member.client.post(V, {"name": "v", "project_id": member.project, "size": 5}))
    refused_update(server, member, f"{V}/{v['uuid']}", {"size": 81}, "disk", 25, 76, 100)


def test_growing_an_lb_or_a_dbaas_instance_past_a_limit_is_refused(server, member):
    lb = created(member.client.post(LB, {"name": "edge", "project_id": member.project,
                                         "type": {"kind": "core", "cpu": 2, "ram": 512,
                                                  "disk_size": 10, "nodes_number": 1}}))
    grown = {**lb["type"], "nodes_number": 5}
    refused_update(server, member, f"{LB}/{lb['uuid']}", {"type": grown}, "nodes", 1, 4, 3)
    db = make_instance(member.client, member.project, cpu=2)
    refused_update(server, member, f"/v1/sqldb/instances/{db['uuid']}", {"cpu": 7}, "cores",
                   4, 5, 8)


def test_a_config_update_that_grows_a_nodes_payload_is_refused(server, member):
    a, b = node(member.client, member.project)["uuid"], node(member.client,
                                                             member.project)["uuid"]
    big = text_config(member.project, a, 20 * KIB)
    created(member.client.post(C, big))
    small_body = text_config(member.project, b, 20 * KIB)
    small = created(member.client.post(C, small_body))
    small_bytes = bytes_of(small_body)
    path = f"{C}/{small['uuid']}"
    # moved onto the full node
    refused_update(server, member, path, {"target": {"kind": "node", "node": a}},
                   "config_bytes_per_node", bytes_of(big), small_bytes, 32 * KIB)
    # or grown past the project's total
    grown = {"kind": "text", "content": "y" * (29 * KIB)}
    refused_update(server, member, path, {"body": grown}, "config_bytes",
                   bytes_of(big) + small_bytes, 9 * KIB, 48 * KIB)


def test_an_update_that_grows_nothing_passes_even_above_a_lowered_limit(server, member):
    made = [node(member.client, member.project) for _ in range(3)]
    server.api.settings["quota_nodes"] = 1      # an administrator lowered it since
    try:
        resp = member.client.put(f"{N}/{made[0]['uuid']}", {"description": "still here"})
        assert resp.status == 200, resp
        quota_refused(server, member.project,
                      lambda: member.client.post(N, node_body(project_id=member.project)),
                      "nodes", 3, 1, 1)
    finally:
        server.api.settings["quota_nodes"] = LIMITS["quota_nodes"]


# ---- settings -------------------------------------------------------------------------------

def test_a_setting_or_its_variable_changes_a_limit():
    assert config.load(environ={})["quota_nodes"] == 200
    loaded = config.load(environ={"APPLIANCE_QUOTA_NODES": "1",
                                  "APPLIANCE_QUOTA_CONFIG_BYTES": "-1"})
    assert loaded["quota_nodes"] == 1
    assert quotas.QUOTAS[0].limit(loaded) == 1
    assert [q for q in quotas.QUOTAS if q.name == "config_bytes"][0].limit(loaded) is None


def test_a_server_started_with_another_limit_holds_to_it(tmp_path):
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, quota_nodes=1,
                    quota_volumes=-1).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        m = Member(srv, admin)
        node(m.client, m.project)
        quota_refused(srv, m.project,
                      lambda: m.client.post(N, node_body(project_id=m.project)),
                      "nodes", 1, 1, 1)
        for _ in range(3):          # no limit
            created(m.client.post(V, {"name": "v", "project_id": m.project, "size": 1}))
        used = admin.get(f"/v1/iam/projects/{m.project}/actions/quotas").json
        assert used["nodes"] == {"use": 1, "limit": 1, "unit": "nodes",
                                 "setting": "quota_nodes"}
        assert used["volumes"]["use"] == 3 and used["volumes"]["limit"] is None
    finally:
        srv.stop()


# ---- concurrency ----------------------------------------------------------------------------

def race(requests):
    """Run the callables at once (a barrier), each in its own thread; their responses."""
    barrier = threading.Barrier(len(requests))
    out = [None] * len(requests)

    def run(i):
        barrier.wait()
        out[i] = requests[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_creates_at_the_boundary_never_exceed_it(server, member, round_):
    node(member.client, member.project)         # one place left... and two more
    replies = race([lambda: member.client.post(N, node_body(project_id=member.project))
                    for _ in range(8)])
    statuses = sorted(r.status for r in replies)
    assert statuses == [201, 201] + [409] * 6, replies
    assert all(r.json["type"] == "QuotaExceeded" for r in replies if r.status == 409)
    assert len(server.store.collection("compute_nodes").by("project_id", member.project)) == 3


def test_concurrent_creates_of_two_kinds_sharing_a_quota_never_exceed_it(server, member):
    def a_node():
        return member.client.post(N, node_body(project_id=member.project))

    def a_set():
        return member.client.post(S, {**node_body(project_id=member.project), "replicas": 1})
    replies = race([a_node, a_set] * 4)
    assert sorted(r.status for r in replies) == [201] * 3 + [409] * 5, replies
    used = usage(member.client, member.project)
    assert used["nodes"] == (3, 3)


def test_concurrent_configs_on_one_node_never_exceed_its_payload_limit(server, member):
    target = node(member.client, member.project)["uuid"]
    replies = race([lambda: member.client.post(C, text_config(member.project, target,
                                                              10 * KIB))
                    for _ in range(6)])
    assert sorted(r.status for r in replies) == [201] * 3 + [409] * 3, replies
    assert quotas.largest_payload(server.store, member.project) <= 32 * KIB


# ---- reading use ----------------------------------------------------------------------------

def test_admin_reads_each_quotas_use_and_limit(server, admin, member):
    n = node(member.client, member.project, cores=2, ram=2048)
    created(member.client.post(V, {"name": "v", "project_id": member.project, "size": 5}))
    config = text_config(member.project, n["uuid"], 100)
    created(member.client.post(C, config))
    resp = admin.get(f"/v1/iam/projects/{member.project}/actions/quotas")
    assert resp.status == 200, resp
    assert set(resp.json) == {q.name for q in quotas.ALL}
    used = usage(admin, member.project)
    assert used["nodes"] == (1, 3) and used["cores"] == (2, 8) and used["ram"] == (2048, 8192)
    assert used["disk"] == (15, 100) and used["volumes"] == (1, 2)
    assert used["configs"] == (1, 3)
    assert used["config_bytes"] == (bytes_of(config), 48 * KIB)
    assert used["config_bytes_per_node"] == (bytes_of(config), 32 * KIB)
    assert used["lbs"] == (0, 2) and used["dns_records"] == (0, 2)


def test_members_read_their_own_projects_use_and_no_other(server, admin, member):
    other = Member(server, admin)
    node(member.client, member.project)
    assert usage(member.client, member.project)["nodes"] == (1, 3)
    user, name, password = make_user(admin)
    bind(admin, user, "reader", member.project)
    reader = server.client(server.login(name, password, scope=f"project:{member.project}"))
    assert usage(reader, member.project)["nodes"] == (1, 3)
    for path in (f"/v1/iam/projects/{member.project}/actions/quotas",
                 f"/v1/iam/projects/{ADMIN_PROJECT}/actions/quotas"):
        resp = other.client.get(path)
        assert resp.status == 404 and resp.json["type"] == "NotFound", resp
        assert "nodes" not in resp.raw.decode()
    assert usage(other.client, other.project)["nodes"] == (0, 3)


def test_a_user_without_rights_reads_no_use(server, admin, member):
    user, name, password = make_user(admin)
    bind(admin, user, "newcomer", member.project)
    newcomer = server.client(server.login(name, password, scope=f"project:{member.project}"))
    assert newcomer.get(f"/v1/iam/projects/{member.project}/actions/quotas").status == 404
    unscoped = server.client(server.login(name, password))
    resp = unscoped.get(f"/v1/iam/projects/{member.project}/actions/quotas")
    assert resp.status == 403, resp


# ---- the payload bound ----------------------------------------------------------------------

def test_the_config_quotas_bound_a_nodes_payload(server, member):
    """A project fills one node as far as it may, directly and through the node's set;
    the configs part of the node's payload, as the agent gets it, stays within the
    per-node limit plus each item's envelope."""
    s = created(member.client.post(S, {**node_body(project_id=member.project),
                                       "replicas": 1}))
    reconcile_sets(server.store, server.settings)
    [m] = server.store.collection("compute_nodes").by("node_set", s["uuid"])
    on_set = {**text_config(member.project, None, 15 * KIB),
              "target": {"kind": "node_set", "node_set": s["uuid"]}}
    created(member.client.post(C, on_set))
    created(member.client.post(C, text_config(member.project, m["uuid"], 15 * KIB)))
    quota_refused(server, member.project, lambda: member.client.post(
        C, text_config(member.project, m["uuid"], 2 * KIB)), "config_bytes_per_node",
        2 * bytes_of(on_set), bytes_of(text_config(member.project, m["uuid"], 2 * KIB)),
        32 * KIB)
    items, _ = items_for(View(server.store), server.store.collection("compute_nodes").get(
        m["uuid"]))
    configs = [i for i in items if i["kind"] == "config"]
    assert len(configs) == 2
    assert len(orjson.dumps(configs)) <= 32 * KIB + 2 * KIB
