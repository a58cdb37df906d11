"""An element acts for the project that installed it (appliance/em/acting.py,
docs/security.md "Elements"): the real builder daemon writes a project's element with a
principal scoped to that project, so every rule the API applies to the project's owner
applies to the element too.

Project B's owner (the attacker) uploads each attack as an element to a database
repository of its own and installs it through the repo element's install action, the
way a project owner installs anything. Each attack ends in ERROR with the refusal's
reason (on the repo element and on the Element Manager's element), and nothing changed:
every record of the watched kinds, of every project, is as it was before (same uuids,
same revisions). Project A is the victim; the admin project is the platform. The same
manifests in their own project, and as the platform's, install to ACTIVE.
"""

import uuid

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user, role_uuid
from tests.lb.conftest import LB_IMAGE
from tests.lb.helpers import register_appliance
from tests.secret.conftest import DaemonProcess, wait_for

R, E = "/v1/repo/repositories", "/v1/repo/elements"
SECRETS, ZONES, CONFIGS = "/v1/secret/secrets", "/v1/dns/domains", "/v1/config/configs"
SQLDB_ZONE = "sqldb.appliance.internal"         # the default sqldb_zone setting
VICTIM_VALUE = "the victim's secret value"
WATCHED = ("secret_secrets", "dns_domains", "dns_records", "config_configs",
           "compute_nodes", "network_lb", "iam_role_bindings")


class World:
    def __init__(self, server):
        self.server = server
        self.admin = server.client(server.login("admin", ADMIN_PASSWORD))
        self.appliance = register_appliance(server.store)["uuid"]
        self.a, self.b = make_project(self.admin), make_project(self.admin)
        self.owner_a = self.owner(self.a)
        self.user_b, self.owner_b = self.owner(self.b, with_uuid=True)
        self.repo = {p: self.database_repo(c, p) for p, c in (
            (self.a, self.owner_a), (self.b, self.owner_b), (ADMIN_PROJECT, self.admin))}
        secret = self.owner_a.post(SECRETS, {
            "name": "a-secret", "project_id": self.a, "constructor": {"kind": "plain"},
            "default_value": VICTIM_VALUE})
        assert secret.status == 201, secret
        self.a_secret = secret.json

    def owner(self, project, with_uuid=False):
        user, name, password = make_user(self.admin)
        bind(self.admin, user, "owner", project)
        client = self.server.client(self.server.login(name, password,
                                                      scope=f"project:{project}"))
        return (user, client) if with_uuid else client

    def database_repo(self, client, project):
        resp = client.post(R, {"name": f"own-{uuid.uuid4().hex[:8]}", "project_id": project,
                               "driver_spec": {"kind": "database"}})
        assert resp.status == 201, resp
        return wait_for(lambda: (r := self.admin.get(f"{R}/{resp.json['uuid']}").json)[
            "status"] == "ACTIVE" and r, 20)

    def client(self, project):
        return {self.a: self.owner_a, self.b: self.owner_b, ADMIN_PROJECT: self.admin}[project]

    def install(self, project, manifest):
        """Upload `manifest` to the project's own repository and install it as the
        project's owner; the repo element once the builder is done with it."""
        client = self.client(project)
        up = client.post(f"{R}/{self.repo[project]['uuid']}/actions/upload/invoke", {
            "element_name": manifest["name"], "element_version": manifest["version"],
            "manifest": manifest})
        assert up.status == 200, up
        done = client.post(f"{E}/{up.json['uuid']}/actions/install/invoke", {})
        assert done.status == 200, done
        return wait_for(lambda: (e := self.admin.get(f"{E}/{up.json['uuid']}").json)[
            "status"] in ("ACTIVE", "ERROR") and e, 30)

    def em_element(self, name):
        found = self.admin.get("/v1/em/elements", query={"name": name}).json
        return found[0] if found else None

    def snapshot(self):
        """Every record of the watched kinds, of every project: uuid and revision."""
        return {kind: sorted((r["uuid"], r["revision"])
                             for r in self.server.store.collection(kind).records())
                for kind in WATCHED}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    server = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                       lb_image=LB_IMAGE).start()
    builder = DaemonProcess("builder", server.settings["state_dir"]).start()
    yield World(server)
    builder.stop()
    server.stop()


def _name(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def manifest(name, resources, **extra):
    return {"name": name, "version": "1.0.0", "requirements": {}, "resources": resources,
            **extra}


def secret_in(project, value="x"):
    return {"$core.secret.secrets": {"s": {
        "name": _name("s"), "project_id": project, "constructor": {"kind": "plain"},
        "default_value": value}}}


def zone(name, project):
    return {"$core.dns.domains": {"z": {"name": name, "project_id": project}}}


def config_on(node, project):
    return {"$core.config.configs": {"c": {
        "name": _name("c"), "project_id": project, "path": f"/etc/app/{_name('f')}.conf",
        "target": {"kind": "node", "node": node},
        "body": {"kind": "text", "content": "x\n"},
        "on_change": {"kind": "shell", "command": "touch /tmp/owned"}}}}


# attack -> (resources for project B's element, given the world; words of the reason)
ATTACKS = {
    "admin_project_record": (lambda w: secret_in(ADMIN_PROJECT),
                             ["is not this element's project", "only in the project"]),
    "other_project_record": (lambda w: secret_in(w.a),
                             ["is not this element's project"]),
    "top_level_zone": (lambda w: zone(f"tld{uuid.uuid4().hex[:6]}", w.b),
                       ["top-level zone"]),
    "dbaas_zone": (lambda w: zone(SQLDB_ZONE, w.b), ["the platform reserves it"]),
    "config_on_the_appliance": (lambda w: config_on(w.appliance, w.b),
                                ["targets only nodes of its own project"]),
    "lb_on_the_appliance": (lambda w: {"$core.network.lb": {"l": {
        "name": _name("lb").replace("_", "-"), "project_id": w.b,
        "type": {"kind": "core_agent"}}}}, ["appliance's own node"]),
    "admin_role_binding": (lambda w: {"$core.iam.role_bindings": {"r": {
        "user": w.user_b, "role": role_uuid(w.admin, "admin"), "project": ADMIN_PROJECT}}},
        ["may not write", "iam.role_binding.create"]),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_project_element_is_refused_what_its_owner_is_refused(world, attack):
    resources, words = ATTACKS[attack]
    name = _name(attack[:12])
    before = world.snapshot()
    repo_element = world.install(world.b, manifest(name, resources(world)))
    assert repo_element["status"] == "ERROR", repo_element
    for word in words:
        assert word in repo_element["status_reason"], repo_element
    em = world.em_element(name)
    assert em["status"] == "ERROR" and em["project_id"] == world.b, em
    assert em["status_reason"] == repo_element["status_reason"]
    assert world.snapshot() == before


def test_a_project_element_cannot_take_over_another_projects_record(world):
    """The manifest gives its resource the uuid of A's secret, with nothing to change: it
    would become the element's, and its value readable through a link."""
    name = _name("takeover")
    victim = world.a_secret
    resources = {"$core.secret.secrets": {
        "s": {"uuid": victim["uuid"], "name": victim["name"], "project_id": world.b,
              "constructor": {"kind": "plain"}},
        "copy": {"name": _name("copy"), "project_id": world.b,
                 "constructor": {"kind": "plain"},
                 "default_value": f"${name}.secret.secrets.$s:value"}}}
    before = world.snapshot()
    repo_element = world.install(world.b, manifest(name, resources))
    assert repo_element["status"] == "ERROR", repo_element
    assert f"uuid {victim['uuid']}" in repo_element["status_reason"], repo_element
    assert "not project" in repo_element["status_reason"], repo_element
    assert world.snapshot() == before
    assert VICTIM_VALUE not in str(world.server.store.collection("secret_secrets").by(
        "project_id", world.b))


def test_a_project_element_cannot_import_another_projects_secret(world):
    """A's own element exports its secret (and installs to ACTIVE, in A); B's element
    imports it to read its value: refused, B gets nothing."""
    source = _name("vault")
    a_element = world.install(world.a, manifest(
        source, secret_in(world.a, VICTIM_VALUE),
        exports={"s": {"link": f"${source}.secret.secrets.$s"}}))
    assert a_element["status"] == "ACTIVE", a_element
    assert world.em_element(source)["project_id"] == world.a

    name = _name("thief")
    before = world.snapshot()
    repo_element = world.install(world.b, manifest(name, {"$core.secret.secrets": {"s": {
        "name": _name("stolen"), "project_id": world.b, "constructor": {"kind": "plain"},
        "default_value": f"${name}.imports.$v:value"}}},
        imports={"v": {"element": f"${source}", "link": f"${source}.secret.secrets.$s"}}))
    assert repo_element["status"] == "ERROR", repo_element
    assert f"element {source} is another project's" in repo_element["status_reason"]
    assert world.snapshot() == before
    assert VICTIM_VALUE not in str(world.server.store.collection("secret_secrets").by(
        "project_id", world.b))


def test_an_import_reads_only_what_the_project_may_read(world):
    """A platform element may be imported from (its exports are the platform's to share),
    but a link through the import reads only what a reader of the importing project may
    read, as the API decides: an admin project's secret is not shared with projects."""
    source = _name("pvault")
    platform = world.install(ADMIN_PROJECT, manifest(
        source, secret_in(ADMIN_PROJECT, VICTIM_VALUE),
        exports={"s": {"link": f"${source}.secret.secrets.$s"}}))
    assert platform["status"] == "ACTIVE", platform

    name = _name("reader")
    before = world.snapshot()
    repo_element = world.install(world.b, manifest(name, {"$core.secret.secrets": {"s": {
        "name": _name("read"), "project_id": world.b, "constructor": {"kind": "plain"},
        "default_value": f"${name}.imports.$v:value"}}},
        imports={"v": {"element": f"${source}", "link": f"${source}.secret.secrets.$s"}}))
    assert repo_element["status"] == "ERROR", repo_element
    assert f"link ${name}.imports.$v:value: no Secret this element's project " \
        f"{world.b} may read" in repo_element["status_reason"], repo_element
    assert world.snapshot() == before


def test_an_element_in_its_own_project_installs(world):
    name = _name("own")
    zone_name = f"{name.replace('_', '-')}.b-zone.test"
    other_node = world.admin.post("/v1/compute/nodes", {
        "name": _name("n").replace("_", "-"), "project_id": world.b, "cores": 1,
        "ram": 1024, "node_type": "HW"})
    assert other_node.status == 201, other_node
    resources = {**secret_in(world.b), **zone(zone_name, world.b),
                 **config_on(other_node.json["uuid"], world.b)}
    repo_element = world.install(world.b, manifest(name, resources))
    assert repo_element["status"] == "ACTIVE", repo_element
    em = world.em_element(name)
    assert em["project_id"] == world.b
    for key in ("secret.secrets.$s", "dns.domains.$z", "config.configs.$c"):
        slot = em["resources"][key]
        record = world.server.api.resources[slot["collection"]].collection().get(
            slot["uuid"])
        assert record["project_id"] == world.b, (key, record)


def test_a_platform_element_still_does_platform_things(world):
    """The same kinds of resources that are refused to B, in the admin project's own
    repository: the element acts for the platform."""
    name = _name("platform")
    resources = {**zone(f"tld{uuid.uuid4().hex[:6]}", ADMIN_PROJECT),
                 **config_on(world.appliance, ADMIN_PROJECT),
                 **secret_in(ADMIN_PROJECT)}
    repo_element = world.install(ADMIN_PROJECT, manifest(name, resources))
    assert repo_element["status"] == "ACTIVE", repo_element
    assert world.em_element(name)["project_id"] is None


def test_a_manifest_posted_to_the_element_manager_acts_for_its_caller(world):
    body = manifest(_name("direct"), secret_in(ADMIN_PROJECT))
    # a project owner has no Element Manager manifest permission at all
    assert world.owner_b.post("/v1/em/manifests", body).status == 403
    resp = world.admin.post("/v1/em/manifests", body)
    assert resp.status == 201, resp
    assert resp.json["project_id"] is None
    # read-only: nobody sets it
    forged = world.admin.post("/v1/em/manifests", {**manifest(_name("forged"), secret_in(
        world.b)), "project_id": world.b})
    assert forged.status == 403, forged


def em_manifest_role(admin):
    """A role granting the Element Manager's manifests (no built-in role does)."""
    role = admin.post("/v1/iam/roles", {"name": f"em-{uuid.uuid4().hex[:6]}"}).json
    perm = admin.post("/v1/iam/permissions", {"name": "em.manifest.*"}).json
    if perm.get("uuid") is None:
        perm = admin.get("/v1/iam/permissions", query={"name": "em.manifest.*"}).json[0]
    assert admin.post("/v1/iam/permission_bindings", {
        "role": role["uuid"], "permission": perm["uuid"]}).status == 201
    return role["name"]


def test_a_project_caller_of_the_element_manager_acts_for_its_project(world):
    """A role may give a project's user the Element Manager's manifests: what it posts
    acts for its project (and is refused like a repository's element), and it sees and
    installs no manifest of the platform's or of another project."""
    role = em_manifest_role(world.admin)
    user, name, password = make_user(world.admin)
    bind(world.admin, user, role, world.b)
    bind(world.admin, user, "owner", world.b)
    caller = world.server.client(world.server.login(name, password,
                                                    scope=f"project:{world.b}"))
    platform = world.admin.post("/v1/em/manifests", manifest(_name("adm"), secret_in(
        ADMIN_PROJECT)))
    assert platform.status == 201, platform
    assert caller.get(f"/v1/em/manifests/{platform.json['uuid']}").status == 404
    assert platform.json["uuid"] not in [m["uuid"] for m in caller.get(
        "/v1/em/manifests").json]
    installed = caller.post(f"/v1/em/manifests/{platform.json['uuid']}/actions/install/"
                            "invoke", {})
    assert installed.status == 404, installed

    element_name = _name("posted")
    own = caller.post("/v1/em/manifests", manifest(element_name, secret_in(ADMIN_PROJECT)))
    assert own.status == 201, own
    assert own.json["project_id"] == world.b
    before = world.snapshot()
    assert caller.post(f"/v1/em/manifests/{own.json['uuid']}/actions/install/invoke",
                       {}).status == 200
    element = wait_for(lambda: (e := world.em_element(element_name)) and e["status"] in (
        "ACTIVE", "ERROR") and e, 30)
    assert element["status"] == "ERROR" and "is not this element's project" in element[
        "status_reason"], element
    assert element["project_id"] == world.b
    assert world.snapshot() == before


def test_a_project_element_upgrades_and_uninstalls_in_its_project(world):
    """The whole life of a project's element through its repository, as its owner: the
    new version's manifest acts for the project too, so the upgrade is allowed, and the
    uninstall removes the records the element made."""
    name = _name("life")
    first = world.install(world.b, manifest(name, secret_in(world.b, "one")))
    assert first["status"] == "ACTIVE", first
    second = world.owner_b.post(
        f"{R}/{world.repo[world.b]['uuid']}/actions/upload/invoke", {
            "element_name": name, "element_version": "2.0.0",
            "manifest": {**manifest(name, secret_in(world.b, "two")), "version": "2.0.0"}})
    assert second.status == 200, second
    moved = world.owner_b.post(f"{E}/{first['uuid']}/actions/upgrade/invoke",
                               {"target": second.json["uuid"]})
    assert moved.status == 200, moved
    wait_for(lambda: (e := world.em_element(name))["version"] == "2.0.0" and e[
        "status"] == "ACTIVE" and e, 30)
    em = world.em_element(name)
    assert em["project_id"] == world.b
    slot = em["resources"]["secret.secrets.$s"]
    assert world.server.store.collection("secret_secrets").get(slot["uuid"])[
        "project_id"] == world.b
    gone = world.owner_b.post(f"{E}/{second.json['uuid']}/actions/uninstall/invoke", {})
    assert gone.status == 200, gone
    wait_for(lambda: world.em_element(name) is None, 30)
    assert world.server.store.collection("secret_secrets").get(slot["uuid"]) is None
