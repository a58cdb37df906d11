"""The two shapes of the reference's DBaaS element (dbaas.yaml.j2) that our Element
Manager did not know, installed for real: a permission binding that carries `project_id`,
and DNS records declared under an imported domain (`$<me>.imports.$<domain>.records`).
The bodies are the reference's, with its names; only the element names and the role
differ (dbaas is built in here, and the reference's owner role uuid is not ours)."""

import uuid as uuidlib

import pytest

from .conftest import ADMIN_PROJECT, act, element, install, post_manifest, wait_element

P = ADMIN_PROJECT


def _provider(name, zone):
    """An element that exports a domain, as the reference's core exports local_domain."""
    return {"name": name, "version": "1.0.0", "resources": {
        "$core.dns.domains": {"local_domain": {"name": zone, "project_id": P}}},
        "exports": {"local_domain": {"link": "$core.dns.domains.$local_domain"}}}


def _consumer(name, provider, address="10.20.0.44", record_name="dbaas-cp"):
    return {"name": name, "version": "1.0.0",
            "requirements": {provider: {"from_version": "1.0.0"}},
            "imports": {"core_local_domain": {
                "element": f"${provider}", "kind": "resource",
                "link": "$core.dns.domains.$local_domain"}},
            "resources": {
                f"${name}.imports.$core_local_domain.records": {"dbaas_cp": {
                    "domain": f"${name}.imports.$core_local_domain:uuid",
                    "project_id": P, "type": "A",
                    "record": {"kind": "A", "name": record_name, "address": address}}}}}


def test_records_under_an_imported_domain_are_made_in_that_domain(admin):
    install(admin, _provider("dom-provider", "local-dom.test"))
    zone = wait_element(admin, "dom-provider")["resources"]["dns.domains.$local_domain"]
    install(admin, _consumer("dom-consumer", "dom-provider"))
    consumer = wait_element(admin, "dom-consumer")
    slot = consumer["resources"]["imports.$core_local_domain.records.$dbaas_cp"]
    record = admin.get(f"/v1/dns/domains/{zone['uuid']}/records/{slot['uuid']}")
    assert record.status == 200, record
    assert record.json["record"] == {"kind": "A", "name": "dbaas-cp",
                                     "address": "10.20.0.44"}
    # its resource view points at the record under the imported domain
    view = admin.get(f"/v1/em/resources/{slot['uuid']}").json
    assert view["resource"] == f"/v1/dns/domains/{zone['uuid']}/records/{slot['uuid']}"
    # uninstalled, the record goes and the provider's domain stays
    manifest = consumer["manifest"].rsplit("/", 1)[1]
    assert act(admin, manifest, "uninstall").status == 200
    from tests.secret.conftest import wait_for
    wait_for(lambda: element(admin, "dom-consumer") is None)
    assert admin.get(f"/v1/dns/domains/{zone['uuid']}/records/{slot['uuid']}").status == 404
    assert admin.get(f"/v1/dns/domains/{zone['uuid']}").status == 200


def test_the_parent_field_may_be_left_out_and_is_the_imported_domain(admin):
    install(admin, _provider("dom-provider2", "local-dom2.test"))
    zone = wait_element(admin, "dom-provider2")["resources"]["dns.domains.$local_domain"]
    manifest = _consumer("dom-consumer2", "dom-provider2")
    records = manifest["resources"]["$dom-consumer2.imports.$core_local_domain.records"]
    del records["dbaas_cp"]["domain"]
    install(admin, manifest)
    slot = wait_element(admin, "dom-consumer2")["resources"][
        "imports.$core_local_domain.records.$dbaas_cp"]
    assert admin.get(f"/v1/dns/domains/{zone['uuid']}/records/{slot['uuid']}").status == 200


def test_records_under_an_import_refused_when_posted_for_what_is_wrong(admin):
    before = admin.get("/v1/em/manifests").json
    # the import is not declared
    manifest = _consumer("dom-bad1", "dom-provider")
    del manifest["imports"]
    resp = post_manifest(admin, manifest)
    assert resp.status == 400 and "no import core_local_domain" in resp.json["message"], resp
    # another element's imports are not this one's
    manifest = _consumer("dom-bad2", "dom-provider")
    manifest["resources"] = {"$other.imports.$core_local_domain.records":
                             manifest["resources"].popitem()[1]}
    resp = post_manifest(admin, manifest)
    assert resp.status == 400 and "$<this element>.imports" in resp.json["message"], resp
    # a domain has no sub-collection `zones`
    manifest = _consumer("dom-bad3", "dom-provider")
    manifest["resources"] = {"$dom-bad3.imports.$core_local_domain.zones":
                             manifest["resources"].popitem()[1]}
    resp = post_manifest(admin, manifest)
    assert resp.status == 400 and "no sub-collection zones" in resp.json["message"], resp
    # the parent field names another resource than the import it is declared under
    manifest = _consumer("dom-bad4", "dom-provider")
    manifest["imports"]["other"] = dict(manifest["imports"]["core_local_domain"])
    item = manifest["resources"]["$dom-bad4.imports.$core_local_domain.records"]["dbaas_cp"]
    item["domain"] = "$dom-bad4.imports.$other:uuid"
    resp = post_manifest(admin, manifest)
    assert resp.status == 400 and resp.json["message"].endswith(
        "must link to the resource it is declared under "
        "($<element>.imports.$core_local_domain[:uuid])"), resp
    assert admin.get("/v1/em/manifests").json == before


def test_import_of_a_domain_not_exported_is_refused_at_install(admin):
    install(admin, {"name": "dom-silent", "version": "1.0.0", "resources": {
        "$core.dns.domains": {"local_domain": {"name": "silent-dom.test", "project_id": P}}}})
    wait_element(admin, "dom-silent")
    resp = post_manifest(admin, _consumer("dom-orphan", "dom-silent"))
    assert resp.status == 201, resp
    done = act(admin, resp.json["uuid"], "install")
    assert done.status == 400, done
    assert done.json["message"] == ("import core_local_domain: element dom-silent does not "
                                    "export $core.dns.domains.$local_domain")
    assert element(admin, "dom-orphan") is None


def _bindings(name, project):
    return {"name": name, "version": "1.0.0", "resources": {
        "$core.iam.roles": {"db_owner": {"name": f"{name}-owner"}},
        "$core.iam.projects": {"dbaas_project": {"name": f"{name} project"}},
        "$core.iam.permissions": {"pg_instance_create": {
            "name": f"{name.replace('-', '_')}.pg_instance.create"}},
        "$core.iam.permissionbinding": {"pg_instance_create_binding": {
            "role": "$core.iam.roles.$db_owner:uuid",
            "permission": "$core.iam.permissions.$pg_instance_create:uuid",
            "project_id": project}}}}


def test_permission_binding_with_project_id_grants_the_role_its_permission(admin):
    """The reference's binding names the project it was made for; its IAM grants by role
    alone, as ours does, so the binding is made (global) and the slot keeps the project."""
    install(admin, _bindings("pb-project", "$core.iam.projects.$dbaas_project:uuid"))
    elem = wait_element(admin, "pb-project")
    slot = elem["resources"]["iam.permissionbinding.$pg_instance_create_binding"]
    project = elem["resources"]["iam.projects.$dbaas_project"]["uuid"]
    assert slot["project_id"] == project
    binding = admin.get(f"/v1/iam/permission_bindings/{slot['uuid']}")
    assert binding.status == 200, binding
    assert binding.json["role"].endswith(elem["resources"]["iam.roles.$db_owner"]["uuid"])
    assert binding.json["permission"].endswith(
        elem["resources"]["iam.permissions.$pg_instance_create"]["uuid"])
    assert "project_id" not in binding.json


def test_permission_binding_project_id_must_name_a_project(admin):
    # not a uuid nor a link: refused when posted
    resp = post_manifest(admin, _bindings("pb-word", "dbaas"))
    assert resp.status == 400, resp
    assert resp.json["message"] == (
        "resources.$core.iam.permissionbinding.pg_instance_create_binding.project_id: "
        "must be a project's uuid or a link to one")
    # a uuid of no project: the element goes ERROR naming it, and no binding is made
    missing = str(uuidlib.uuid4())
    install(admin, _bindings("pb-missing", missing))
    elem = wait_element(admin, "pb-missing", status="ERROR")
    assert elem["status_reason"] == (f"iam.permissionbinding.$pg_instance_create_binding: "
                                     f"project_id: project {missing} does not exist")
    slot = elem["resources"]["iam.permissionbinding.$pg_instance_create_binding"]
    assert admin.get(f"/v1/iam/permission_bindings/{slot['uuid']}").status == 404


def test_project_id_stays_unknown_on_other_iam_kinds(admin):
    manifest = _bindings("pb-role", P)
    manifest["resources"]["$core.iam.roles"]["db_owner"]["project_id"] = P
    resp = post_manifest(admin, manifest)
    assert resp.status == 400, resp
    assert resp.json["message"] == ("resources.$core.iam.roles.db_owner.project_id: unknown "
                                    "field of Role")


@pytest.mark.parametrize("domain_given", [True, False], ids=["domain-linked", "domain-left-out"])
def test_a_project_element_cannot_put_records_in_an_imported_platform_domain(
        admin, server, domain_given):
    """The attack: a project's element imports a platform element's domain and declares
    records under it, to publish names in the platform's zone. The import itself is
    allowed (a platform element's exports are the platform's to share), but the record is
    written as the project's owner would write it: refused, the element ERROR with the
    reason, and the zone holds no new record."""
    from tests.iam.helpers import bind, make_project, make_user
    from tests.tenancy.test_element_tenancy import em_manifest_role
    provider, element_name = f"plat-zone-{domain_given}".lower(), f"squat-{domain_given}".lower()
    install(admin, _provider(provider, f"{provider}.test"))
    zone = wait_element(admin, provider)["resources"]["dns.domains.$local_domain"]
    before = admin.get(f"/v1/dns/domains/{zone['uuid']}/records").json

    project = make_project(admin)
    user, name, password = make_user(admin)
    bind(admin, user, em_manifest_role(admin), project)
    bind(admin, user, "owner", project)
    tenant = server.client(server.login(name, password, scope=f"project:{project}"))
    manifest = _consumer(element_name, provider)
    item = manifest["resources"][f"${element_name}.imports.$core_local_domain.records"][
        "dbaas_cp"]
    del item["project_id"]
    if not domain_given:
        del item["domain"]
    resp = post_manifest(tenant, manifest)
    assert resp.status == 201 and resp.json["project_id"] == project, resp
    assert act(tenant, resp.json["uuid"], "install").status == 200
    failed = wait_element(admin, element_name, status="ERROR")
    link = f"${element_name}.imports.$core_local_domain" + (":uuid" if domain_given else "")
    assert failed["status_reason"] == (
        f"imports.$core_local_domain.records.$dbaas_cp: link {link}: no Domain this "
        f"element's project {project} may read"), failed
    assert admin.get(f"/v1/dns/domains/{zone['uuid']}/records").json == before


REFERENCE_OWNER_ROLE = "726f6c65-0000-0000-0000-000000000002"


def test_the_reference_owner_role_uuid_is_our_owner_role(admin, server):
    """dbaas.yaml.j2's IAM part, as it is but for the names and the user's password:
    permissions bound to the reference's owner role uuid (with project_id), and its user
    bound to that role in its project. The role is our built-in owner, so the user,
    scoped to the project, holds the new permission."""
    from tests.iam.helpers import role_uuid
    user_uuid = str(uuidlib.uuid4())
    manifest = {"name": "ref-iam", "version": "1.0.0", "resources": {
        "$core.iam.organizations": {"dbaas_organization": {"name": "ref-iam organization"}},
        "$core.iam.projects": {"dbaas_project": {
            "name": "ref-iam project",
            "organization": "$core.iam.organizations.$dbaas_organization:uuid"}},
        "$core.iam.permissions": {"pg_instance_create": {
            "name": "ref_iam_db.pg_instance.create"}},
        "$core.iam.permissionbinding": {"pg_instance_create_binding": {
            "role": REFERENCE_OWNER_ROLE,
            "permission": "$core.iam.permissions.$pg_instance_create:uuid",
            "project_id": "$core.iam.projects.$dbaas_project:uuid"}},
        "$core.iam.users": {"dbaas_user": {
            "uuid": user_uuid, "username": "ref-iam-dbaas", "password": "a-good-password",
            "first_name": "DBaaS system user"}},
        "$core.iam.rolebinding": {"dbaas_role_binding": {
            "role": REFERENCE_OWNER_ROLE, "user": user_uuid,
            "project": "$core.iam.projects.$dbaas_project:uuid"}}}}
    manifest_uuid = install(admin, manifest)
    # the binding names its user by the uuid the manifest gives it (the reference's
    # "Hack, should be fixed"): that is a dependency, whatever the order of the keys
    # (YAML sorts them here, rolebinding before users)
    order = admin.get(f"/v1/em/manifests/{manifest_uuid}/actions/validate").json["order"]
    assert order.index("iam.users.$dbaas_user") < \
        order.index("iam.rolebinding.$dbaas_role_binding"), order
    elem = wait_element(admin, "ref-iam")
    owner = role_uuid(admin, "owner")
    slots = elem["resources"]
    for key in ("iam.permissionbinding.$pg_instance_create_binding",
                "iam.rolebinding.$dbaas_role_binding"):
        kind = "permission_bindings" if "permission" in key else "role_bindings"
        made = admin.get(f"/v1/iam/{kind}/{slots[key]['uuid']}").json
        assert made["role"].rsplit("/", 1)[-1] == owner, made
    project = slots["iam.projects.$dbaas_project"]["uuid"]
    token = server.login("ref-iam-dbaas", "a-good-password", scope=f"project:{project}")
    seen = server.client(token).get(
        "/v1/iam/clients/default/actions/introspect").json
    assert seen["project_id"] == project
    assert "ref_iam_db.pg_instance.create" in seen["permissions"], seen
