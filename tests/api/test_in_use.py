"""What is in use cannot be deleted (appliance/api/links.py, docs/api.md "In use").

A matrix over every link the framework knows: for each (user kind, used kind) the pair is
made through the API, the delete of the used record is a 409 that names the user and
changes nothing; once the user is gone (or detached), the used record deletes (204). A
test checks that the matrix covers every link the registry holds, so a link declared
later without a case here fails the suite. Then the four deletes that the issue found
accepted, the count form for a caller who cannot see the user, and the project cascade.

The scheduler's and the daemons' writes (a node placed on a hypervisor, an element's
records) are done as they do them: the store written directly, or the builder process.
"""

import time
import uuid

import pytest

from appliance.api import links
from appliance.sqldb.versions import SEED_UUID
from tests.apiserver import ApiServer
from tests.compute.conftest import created, node_body, refused
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user
from tests.lb.helpers import (LB, certificate_record, make_lb, make_pool, make_route,
                              make_vhost, pools, prefix, vhosts)

NODES, SETS, VOLUMES = "/v1/compute/nodes", "/v1/compute/sets", "/v1/compute/volumes"
HYPERVISORS, POLICIES = "/v1/compute/hypervisors", "/v1/compute/placement_policies"
NETWORKS, CONFIGS = "/v1/network/networks", "/v1/config/configs"
SERVICES, KEYS = "/v1/em/services", "/v1/secret/ssh_keys"
PASSWORDS, SECRETS = "/v1/secret/passwords", "/v1/secret/secrets"
CERTS = "/v1/secret/certificates"
INSTANCES, VERSIONS = "/v1/sqldb/instances", "/v1/types/sqldb/versions"
PROFILES, VARIABLES = "/v1/vs/profiles", "/v1/vs/variables"
PROJECTS, ORGS, BINDINGS = "/v1/iam/projects", "/v1/iam/organizations", "/v1/iam/role_bindings"


def name():
    return f"t{uuid.uuid4().hex[:8]}"


class World:
    def __init__(self, server):
        self.server = server
        self.store = server.store
        self.admin = server.client(server.login("admin", ADMIN_PASSWORD))
        self.project = make_project(self.admin)

    def post(self, path, body):
        return created(self.admin.post(path, body))

    def node(self):
        return self.post(NODES, {"name": name(), "project_id": self.project, "cores": 1,
                                 "ram": 1024, "node_type": "HW"})

    def node_set(self):
        return self.post(SETS, {"name": name(), "project_id": self.project, "cores": 1,
                                "ram": 1024, "replicas": 0, "node_type": "HW"})

    def target(self, kind):
        if kind == "node":
            node = self.node()
            return node, NODES, {"kind": "node", "node": node["uuid"]}
        node_set = self.node_set()
        return node_set, SETS, {"kind": "node_set", "node_set": node_set["uuid"]}

    def config(self, target=None, body=None):
        return self.post(CONFIGS, {
            "name": name(), "project_id": self.project, "path": f"/etc/app/{name()}.conf",
            "target": target or {"kind": "nodes", "nodes": [self.node()["uuid"]]},
            "body": body or {"kind": "text", "content": "x\n"}})

    def service(self, target=None, **fields):
        return self.post(SERVICES, {
            "name": name(), "project_id": self.project, "path": "sleep infinity",
            "target": target or {"kind": "node", "node": self.node()["uuid"]},
            "service_type": {"kind": "simple"}, **fields})

    def snapshot(self):
        """Every record of every kind the links name, with its revision."""
        registry = links.registry(self.server.api)
        return {kind: sorted((r["uuid"], r["revision"])
                             for r in self.store.collection(kind).records())
                for kind in registry.resource_of}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    server = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD).start()
    yield World(server)
    server.stop()


# ---- the pairs --------------------------------------------------------------------------
# key -> make(world): (path of the used record, path of the user, how to stop using it or
# None for "delete the user", the words the 409 must hold)

def _organization(w):
    org = w.post(ORGS, {"name": name()})
    project = w.post(PROJECTS, {"name": name(), "organization": org["uuid"]})
    return f"{ORGS}/{org['uuid']}", f"{PROJECTS}/{project['uuid']}", None, project["name"]


def _binding_project(w):
    project = make_project(w.admin)
    user, _, _ = make_user(w.admin)
    binding = bind(w.admin, user, "reader", project)
    return f"{PROJECTS}/{project}", f"{BINDINGS}/{binding}", None, binding


def _project_id(w):
    project = make_project(w.admin)
    secret = w.post(SECRETS, {"name": name(), "project_id": project,
                              "constructor": {"kind": "plain"}})
    return f"{PROJECTS}/{project}", f"{SECRETS}/{secret['uuid']}", None, secret["name"]


def _profile(w):
    profile = w.post(PROFILES, {"name": name(), "project_id": w.project})
    variable = w.post(VARIABLES, {"name": name(), "project_id": w.project, "setter": {
        "kind": "profile", "profiles": [{"profile": profile["uuid"], "value": 1}]}})
    return f"{PROFILES}/{profile['uuid']}", f"{VARIABLES}/{variable['uuid']}", None, \
        variable["name"]


def _hypervisor(user_kind):
    def make(w):
        hypervisor = w.post(HYPERVISORS, {"name": name(), "driver_spec": {
            "kind": "libvirt", "connection_uri": f"test:///default?{name()}"}})
        if user_kind == "node":
            user = w.node()
            path, kind = NODES, "compute_nodes"
        else:
            user = w.post(VOLUMES, {"name": name(), "project_id": w.project, "size": 1})
            path, kind = VOLUMES, "compute_volumes"
        # what placement writes
        w.store.collection(kind).update(user["uuid"], {"hypervisor": hypervisor["uuid"]})
        words = "runs 1 node" if user_kind == "node" else user["uuid"]
        return f"{HYPERVISORS}/{hypervisor['uuid']}", f"{path}/{user['uuid']}", None, words
    return make


def _policy(user_kind):
    def make(w):
        policy = w.post(POLICIES, {"name": name(), "project_id": w.project})
        body = {"name": name(), "project_id": w.project, "cores": 1, "ram": 1024,
                "node_type": "HW", "placement_policies": [policy["uuid"]]}
        if user_kind == "set":
            body["replicas"] = 0
        user = w.post(SETS if user_kind == "set" else NODES, body)
        return f"{POLICIES}/{policy['uuid']}", \
            f"{SETS if user_kind == 'set' else NODES}/{user['uuid']}", None, user["name"]
    return make


def _network(user_kind):
    def make(w):
        network = w.post(NETWORKS, {"name": name(), "project_id": w.project})
        body = {"name": name(), "project_id": w.project, "cores": 1, "ram": 1024,
                "node_type": "HW", "network": network["uuid"]}
        if user_kind == "set":
            body["replicas"] = 0
        path = SETS if user_kind == "set" else NODES
        user = w.post(path, body)
        return f"{NETWORKS}/{network['uuid']}", f"{path}/{user['uuid']}", None, user["name"]
    return make


def _attached_volume(w):
    node = w.post(NODES, node_body(project_id=w.project))
    volume = w.post(VOLUMES, {"name": name(), "project_id": w.project, "size": 1})
    path = f"{VOLUMES}/{volume['uuid']}"
    assert w.admin.post(f"{path}/actions/attach/invoke", {"node": node["uuid"]}).status == 200

    def detach():
        assert w.admin.post(f"{path}/actions/detach/invoke", {}).status == 200
    return path, f"{NODES}/{node['uuid']}", detach, "detach it first"


def _config_link(w):
    password = w.post(PASSWORDS, {"name": name(), "project_id": w.project})
    config = w.config(body={"kind": "template", "template": "pw={{ pw }}\n", "variables": {
        "pw": f"$core.secret.passwords.${password['uuid']}:value"}})
    return f"{PASSWORDS}/{password['uuid']}", f"{CONFIGS}/{config['uuid']}", None, \
        config["name"]


def _targeted(user, kind):
    def make(w):
        used, used_path, target = w.target(kind)
        if user == "config":
            made, path = w.config(target=target), CONFIGS
        elif user == "service":
            made, path = w.service(target=target), SERVICES
        else:
            made, path = w.post(KEYS, {"name": name(), "project_id": w.project,
                                       "user": "app", "target": target}), KEYS
        return f"{used_path}/{used['uuid']}", f"{path}/{made['uuid']}", None, made["name"]
    return make


def _service_order(field):
    def make(w):
        first = w.service()
        second = w.service(**{field: [{"kind": "service", "service": first["uuid"]}]})
        return f"{SERVICES}/{first['uuid']}", f"{SERVICES}/{second['uuid']}", None, \
            second["uuid"]
    return make


def _lb_external(w):
    node = w.node()
    lb = make_lb(w.admin, w.project, type={"kind": "external_node",
                                           "external_node": node["uuid"]})
    return f"{NODES}/{node['uuid']}", f"{LB}/{lb['uuid']}", None, lb["name"]


def _lb(w):
    return make_lb(w.admin, w.project, type={"kind": "external_node",
                                             "external_node": w.node()["uuid"]})


def _vhost_cert(w):
    cert = certificate_record(w.store, w.project)
    lb = _lb(w)
    vhost = make_vhost(w.admin, lb, "https", cert={"kind": "certificate",
                                                   "certificate": cert["uuid"]})
    return f"{CERTS}/{cert['uuid']}", f"{vhosts(lb)}/{vhost['uuid']}", None, vhost["uuid"]


def _route_pool(w):
    lb = _lb(w)
    pool = make_pool(w.admin, lb)
    vhost = make_vhost(w.admin, lb)
    route = make_route(w.admin, lb, vhost, prefix(pool))
    return f"{pools(lb)}/{pool['uuid']}", \
        f"{vhosts(lb)}/{vhost['uuid']}/routes/{route['uuid']}", None, \
        "Backend pool in use, remove route first"


def _pool_endpoint(kind):
    def make(w):
        used, used_path, _ = w.target(kind)
        lb = _lb(w)
        pool = make_pool(w.admin, lb, [{"kind": kind, kind: used["uuid"], "port": 80}])
        return f"{used_path}/{used['uuid']}", f"{pools(lb)}/{pool['uuid']}", None, \
            pool["uuid"]
    return make


def _sqldb_on_nodes(w):
    node = w.node()
    instance = w.post(INSTANCES, {"name": name(), "project_id": w.project,
                                  "version": SEED_UUID, "cpu": 1, "ram": 512, "disk_size": 8,
                                  "placement": {"kind": "nodes", "nodes": [node["uuid"]]}})
    return f"{NODES}/{node['uuid']}", f"{INSTANCES}/{instance['uuid']}", None, \
        instance["name"]


def _sqldb_owner(w):
    instance = w.post(INSTANCES, {"name": name(), "project_id": w.project,
                                  "version": SEED_UUID, "cpu": 1, "ram": 512, "disk_size": 8})
    base = f"{INSTANCES}/{instance['uuid']}"
    user = w.post(f"{base}/users", {"name": f"u_{uuid.uuid4().hex[:8]}",
                                    "password": "password-1"})
    database = w.post(f"{base}/databases", {"name": f"d_{uuid.uuid4().hex[:8]}",
                                            "owner": user["uuid"]})
    return f"{base}/users/{user['uuid']}", f"{base}/databases/{database['uuid']}", None, \
        database["name"]


def _sqldb_version(w):
    version = w.post(VERSIONS, {"name": f"15.{uuid.uuid4().int % 1000}", "major": 15})
    instance = w.post(INSTANCES, {"name": name(), "project_id": w.project,
                                  "version": version["uuid"], "cpu": 1, "ram": 512,
                                  "disk_size": 8})
    return f"{VERSIONS}/{version['uuid']}", f"{INSTANCES}/{instance['uuid']}", None, \
        "mark it deprecated instead"


CASES = {
    "iam_projects.organization->iam_organizations": _organization,
    "iam_role_bindings.project->iam_projects": _binding_project,
    "*.project_id->iam_projects": _project_id,
    "vs_variables.setter.profiles->vs_profiles": _profile,
    "compute_nodes.hypervisor->compute_hypervisors": _hypervisor("node"),
    "compute_volumes.hypervisor->compute_hypervisors": _hypervisor("volume"),
    "compute_nodes.placement_policies->compute_placement_policies": _policy("node"),
    "compute_sets.placement_policies->compute_placement_policies": _policy("set"),
    "compute_nodes.network->network_networks": _network("node"),
    "compute_sets.network->network_networks": _network("set"),
    "compute_nodes.node->compute_volumes": _attached_volume,
    "config_configs.body links->*": _config_link,
    "config_configs.target node->compute_nodes": _targeted("config", "node"),
    "config_configs.target node_set->compute_sets": _targeted("config", "node_set"),
    "em_services.target node->compute_nodes": _targeted("service", "node"),
    "em_services.target node_set->compute_sets": _targeted("service", "node_set"),
    "secret_ssh_keys.target node->compute_nodes": _targeted("ssh_key", "node"),
    "secret_ssh_keys.target node_set->compute_sets": _targeted("ssh_key", "node_set"),
    "em_services.before->em_services": _service_order("before"),
    "em_services.after->em_services": _service_order("after"),
    "network_lb.type.external_node->compute_nodes": _lb_external,
    "network_lb_vhosts.cert->secret_certificates": _vhost_cert,
    "network_lb_routes.condition->network_lb_backend_pools": _route_pool,
    "network_lb_backend_pools.endpoints node->compute_nodes": _pool_endpoint("node"),
    "network_lb_backend_pools.endpoints node_set->compute_sets": _pool_endpoint("node_set"),
    "sqldb_instances.placement.nodes->compute_nodes": _sqldb_on_nodes,
    "sqldb_databases.owner->sqldb_users": _sqldb_owner,
    "sqldb_instances.version->sqldb_versions": _sqldb_version,
}
# links made by the daemons or the Element Manager, tested elsewhere
ELSEWHERE = {
    # ports are IPAM's (the network step writes them); tests/network covers the delete
    # of a network with ports, through Networks.check_delete and this link alike
    "network_ports.network->network_networks": "tests/network/test_api.py",
    "em_elements.resources->*": "test_a_domain_owned_by_an_installed_element below",
    "em_elements.manifest->em_manifests": "test_a_domain_owned_by_an_installed_element",
    # an element has no delete route: the Element Manager uninstalls it
    "repo_elements.element->em_elements": "no DELETE /v1/em/elements/<uuid>",
}


def key(link):
    user = "*" if link.label == "project_id" else link.user_kind
    return f"{user}.{link.label}->{link.used_kind}"


def test_the_matrix_covers_every_link(world):
    registry = links.registry(world.server.api)
    known = {key(link) for link in registry.links if not link.part}
    assert known == set(CASES) | set(ELSEWHERE), (known ^ (set(CASES) | set(ELSEWHERE)))


@pytest.mark.parametrize("pair", sorted(CASES))
def test_what_is_in_use_cannot_be_deleted(world, pair):
    used, user, stop_using, words = CASES[pair](world)
    before = world.snapshot()
    message = refused(world.admin.delete(used), 409)
    assert words in message, message
    assert world.snapshot() == before, "a refused delete changed nothing"
    assert world.admin.get(used).status == 200
    if stop_using is not None:
        stop_using()
    else:
        assert world.admin.delete(user).status == 204
    assert world.admin.delete(used).status == 204
    assert world.admin.delete(used).status == 404


# ---- the four deletes the issue found accepted -------------------------------------------

def test_a_certificate_used_by_an_https_vhost(world):
    used, user, _, vhost_uuid = _vhost_cert(world)
    message = refused(world.admin.delete(used), 409)
    assert f"Vhost {vhost_uuid}" in message and "is in use" in message
    assert world.admin.get(used).status == 200


def test_a_password_a_config_links(world):
    used, user, _, config_name = _config_link(world)
    message = refused(world.admin.delete(used), 409)
    assert f"Config {config_name!r}" in message, message
    assert world.admin.delete(user).status == 204
    assert world.admin.delete(used).status == 204


def test_a_project_that_holds_resources(world):
    project = make_project(world.admin)
    secret = world.post(SECRETS, {"name": "kept", "project_id": project,
                                  "constructor": {"kind": "plain"}})
    user, _, _ = make_user(world.admin)
    binding = bind(world.admin, user, "owner", project)
    before = world.snapshot()
    message = refused(world.admin.delete(f"{PROJECTS}/{project}"), 409)
    assert "Secret 'kept'" in message and binding in message, message
    assert world.snapshot() == before
    # the binding was not removed behind the caller's back, nor the secret orphaned
    assert world.admin.get(f"{BINDINGS}/{binding}").status == 200
    assert world.admin.get(f"{SECRETS}/{secret['uuid']}").json["project_id"] == project


def test_the_caller_who_cannot_see_the_users_gets_a_count(world):
    """A user of the project with secrets' rights only: the vhost and the config that
    use its records are not shown to it, only counted."""
    admin = world.admin
    role = created(admin.post("/v1/iam/roles", {"name": name()}))
    for permission in ("secret.*.*",):
        found = admin.get("/v1/iam/permissions", query={"name": permission}).json
        perm = found[0] if found else created(admin.post("/v1/iam/permissions",
                                                         {"name": permission}))
        created(admin.post("/v1/iam/permission_bindings", {"role": role["uuid"],
                                                           "permission": perm["uuid"]}))
    uid, username, password = make_user(admin)
    created(admin.post(BINDINGS, {"user": uid, "role": role["uuid"],
                                  "project": world.project}))
    client = world.server.client(world.server.login(username, password,
                                                    scope=f"project:{world.project}"))
    password_record = world.post(PASSWORDS, {"name": name(), "project_id": world.project})
    link = f"$core.secret.passwords.${password_record['uuid']}:value"
    for _ in range(2):
        world.config(body={"kind": "template", "template": "{{ pw }}",
                           "variables": {"pw": link}})
    message = refused(client.delete(f"{PASSWORDS}/{password_record['uuid']}"), 409)
    assert "used by 2 records you cannot see" in message, message
    assert "Config" not in message
    # the admin sees them
    assert message != refused(admin.delete(f"{PASSWORDS}/{password_record['uuid']}"), 409)


# ---- the project cascade --------------------------------------------------------------

def test_cascade_refuses_while_workloads_run_then_deletes_everything(world):
    admin = world.admin
    project = make_project(admin)
    node = world.post(NODES, {"name": "worker", "project_id": project, "cores": 1,
                              "ram": 1024, "node_type": "HW"})
    password = world.post(PASSWORDS, {"name": name(), "project_id": project})
    config = world.post(CONFIGS, {
        "name": "linked", "project_id": project, "path": "/etc/app/x.conf",
        "target": {"kind": "node", "node": node["uuid"]},
        "body": {"kind": "template", "template": "{{ pw }}", "variables": {
            "pw": f"$core.secret.passwords.${password['uuid']}:value"}}})
    domain = world.post("/v1/dns/domains", {"name": f"{name()}.test", "project_id": project})
    user, _, _ = make_user(admin)
    binding = bind(admin, user, "owner", project)
    before = world.snapshot()
    message = refused(admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}), 409)
    assert "Node 'worker'" in message and "still runs" in message, message
    assert world.snapshot() == before
    assert refused(admin.delete(f"{PROJECTS}/{project}", query={"cascade": "maybe"}),
                   400) == "cascade: must be true or false"
    # the node goes (a config targets it: that goes first)
    assert admin.delete(f"{CONFIGS}/{config['uuid']}").status == 204
    assert admin.delete(f"{NODES}/{node['uuid']}").status == 204
    assert admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}).status == 204
    assert admin.get(f"{PROJECTS}/{project}").status == 404
    for path in (f"{PASSWORDS}/{password['uuid']}", f"/v1/dns/domains/{domain['uuid']}",
                 f"{BINDINGS}/{binding}"):
        assert admin.get(path).status == 404, path
    store = world.store
    for kind in links.registry(world.server.api).resource_of:
        assert not [r for r in store.collection(kind).records()
                    if r.get("project_id") == project or r.get("project") == project], kind


def test_cascade_deletes_in_an_order_the_rule_accepts(world):
    """A variable using a profile, a domain with its records, a secret: each user goes
    before what it uses, a part with its owner."""
    admin = world.admin
    project = make_project(admin)
    profile = world.post(PROFILES, {"name": name(), "project_id": project})
    variable = world.post(VARIABLES, {"name": name(), "project_id": project, "setter": {
        "kind": "profile", "profiles": [{"profile": profile["uuid"], "value": 1}]}})
    domain = world.post("/v1/dns/domains", {"name": f"{name()}.test", "project_id": project})
    world.post(f"/v1/dns/domains/{domain['uuid']}/records", {
        "type": "A", "record": {"kind": "A", "name": "www", "address": "10.0.0.1"}})
    assert variable["name"] in refused(admin.delete(f"{PROFILES}/{profile['uuid']}"), 409)
    assert admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}).status == 204
    for path in (f"{PROFILES}/{profile['uuid']}", f"{VARIABLES}/{variable['uuid']}",
                 f"/v1/dns/domains/{domain['uuid']}"):
        assert admin.get(path).status == 404, path
    assert not world.store.collection("dns_records").by("domain", domain["uuid"])


# ---- what an element owns -------------------------------------------------------------

@pytest.fixture(scope="module")
def em_server(tmp_path_factory):
    from tests.secret.conftest import DaemonProcess
    server = ApiServer(str(tmp_path_factory.mktemp("em-state")), ADMIN_PASSWORD).start()
    builder = DaemonProcess("builder", server.settings["state_dir"]).start()
    yield server
    builder.stop()
    server.stop()


def test_a_domain_owned_by_an_installed_element(em_server):
    from tests.em.conftest import act, element, install, wait_element
    from tests.secret.conftest import wait_for
    admin = em_server.client(em_server.login("admin", ADMIN_PASSWORD))
    zone_name = f"{name()}.test"
    manifest_uuid = install(admin, {"name": "zoneowner", "version": "1.0.0", "resources": {
        "$core.dns.domains": {"zone": {"name": zone_name,
                                       "project_id": "00000000-0000-0000-0000-000000000000"}}}})
    owner = wait_element(admin, "zoneowner")
    zone = owner["resources"]["dns.domains.$zone"]["uuid"]
    message = refused(admin.delete(f"/v1/dns/domains/{zone}"), 409)
    assert "Element 'zoneowner'" in message, message
    # it was not deleted: the record is the same one (not re-created by the builder)
    assert admin.get(f"/v1/dns/domains/{zone}").json["uuid"] == zone
    # the manifest it was installed from is in use as well
    assert "was installed from this manifest" in refused(
        admin.delete(f"/v1/em/manifests/{manifest_uuid}"), 409)
    # nor does a project cascade take it: the element is outside the project
    project = make_project(admin)
    secret = created(admin.post(SECRETS, {"name": "bystander", "project_id": project,
                                          "constructor": {"kind": "plain"}}))
    other = install(admin, {"name": "zoneinproject", "version": "1.0.0", "resources": {
        "$core.dns.domains": {"zone": {"name": f"{name()}.test", "project_id": project}}}})
    wait_element(admin, "zoneinproject")
    message = refused(admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}), 409)
    assert "Element 'zoneinproject'" in message, message
    assert admin.get(f"{SECRETS}/{secret['uuid']}").status == 200
    assert act(admin, other, "uninstall").status == 200
    wait_for(lambda: element(admin, "zoneinproject") is None, 15)
    assert admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}).status == 204
    assert admin.get(f"{SECRETS}/{secret['uuid']}").status == 404
    # the element's own uninstall removes it
    assert act(admin, manifest_uuid, "uninstall").status == 200
    wait_for(lambda: element(admin, "zoneowner") is None, 15)
    assert admin.get(f"/v1/dns/domains/{zone}").status == 404
    assert admin.delete(f"/v1/em/manifests/{manifest_uuid}").status == 204


# ---- cost -----------------------------------------------------------------------------

def test_a_delete_among_ten_thousand_records(world, capsys):
    """Prints what a delete costs with 10,000 configs in the store, one of which links
    the password: the configs' reverse index is built on the first delete after a change
    of the configs, then kept; a kind nothing links to by an extractor costs lookups in
    the store's field indexes only."""
    store = world.store
    password = world.post(PASSWORDS, {"name": name(), "project_id": world.project})
    node = world.node()["uuid"]
    link = f"$core.secret.passwords.${password['uuid']}:value"
    world.config(target={"kind": "node", "node": node}, body={
        "kind": "template", "template": "{{ pw }}", "variables": {"pw": link}})
    store.collection("config_configs").insert_many([{
        "uuid": str(uuid.uuid4()), "name": f"bulk{i}", "description": "",
        "project_id": world.project, "tags": [], "path": f"/etc/bulk/{i}",
        "target": {"kind": "node", "node": node}, "body": {
            "kind": "template", "template": "{{ v }}", "variables": {"v": str(i)}},
        "on_change": {"kind": "no_action"}, "mode": "0644", "owner": "root",
        "group": "root", "status": "NEW", "status_reason": None, "node_status": {}}
        for i in range(10000)])
    spare = world.post(SECRETS, {"name": name(), "project_id": world.project,
                                 "constructor": {"kind": "plain"}})
    timings = {}

    def timed(what, request, status):
        start = time.perf_counter()
        assert request().status == status
        timings[what] = time.perf_counter() - start
    timed("refused (index built)",
          lambda: world.admin.delete(f"{PASSWORDS}/{password['uuid']}"), 409)
    timed("refused (index kept)",
          lambda: world.admin.delete(f"{PASSWORDS}/{password['uuid']}"), 409)
    timed("accepted", lambda: world.admin.delete(f"{SECRETS}/{spare['uuid']}"), 204)
    timed("node refused (10,001 configs target it)",
          lambda: world.admin.delete(f"{NODES}/{node}"), 409)
    with capsys.disabled():
        print("\nin-use check with 10,000 configs: " + ", ".join(
            f"{k} {v * 1000:.1f} ms" for k, v in timings.items()))
    store.collection("config_configs").delete_where(lambda r: r["name"].startswith("bulk"))


def test_cascade_needs_the_delete_permission_of_what_it_deletes(world):
    """An IAM administrator (iam.*.* only) cannot reach the project's secrets through a
    cascade: 403 naming the permission, nothing deleted."""
    admin = world.admin
    role = created(admin.post("/v1/iam/roles", {"name": name()}))
    found = admin.get("/v1/iam/permissions", query={"name": "iam.*.*"}).json
    perm = found[0] if found else created(admin.post("/v1/iam/permissions",
                                                     {"name": "iam.*.*"}))
    created(admin.post("/v1/iam/permission_bindings", {"role": role["uuid"],
                                                       "permission": perm["uuid"]}))
    uid, username, password = make_user(admin)
    created(admin.post(BINDINGS, {"user": uid, "role": role["uuid"]}))
    iam_admin = world.server.client(world.server.login(username, password))
    project = make_project(admin)
    secret = world.post(SECRETS, {"name": name(), "project_id": project,
                                  "constructor": {"kind": "plain"}})
    before = world.snapshot()
    message = refused(iam_admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}),
                      403)
    assert "secret.secret.delete" in message, message
    assert world.snapshot() == before
    assert admin.get(f"{SECRETS}/{secret['uuid']}").status == 200
    assert admin.delete(f"{PROJECTS}/{project}", query={"cascade": "true"}).status == 204
