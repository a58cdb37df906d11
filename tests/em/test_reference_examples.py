"""The reference's own example manifests (shared/examples/manifests, copied verbatim from
the reference's repositories) load through POST /v1/em/manifests, as JSON and as YAML.

They live beside the repository (CI puts shared/ beside the clone, as /work/shared is
beside /work/main), not in it: the module is skipped, saying so, when they are absent
(APPLIANCE_SHARED_DIR names another shared/).
The `.j2` ones are Jinja2 templates of the reference's build; Jinja2 is no dependency
here, so `render` fills the two forms they use, `{{ var }}` and
`{{ var | default('text') }}`, by plain substitution (VARIABLES, else the default).
"""

import os
import re
from pathlib import Path

import pytest
import yaml

from .conftest import post_manifest

# APPLIANCE_SHARED_DIR: for a checkout that has no shared/ beside it (a git worktree)
SHARED = Path(os.environ.get("APPLIANCE_SHARED_DIR")
              or Path(__file__).resolve().parents[2] / ".." / "shared")
EXAMPLES = SHARED / "examples" / "manifests"
VARIABLES = {"version": "2.1.0"}
INVALID = {"invalid-import-not-exported.yaml"}
# Examples that do not load yet, each for a difference named here (strict: the test fails
# once they load, so the entry is removed then)
NOT_YET = {}
# The reference's manifest.md example exports `my_node` as
# `$core_service_example.em.services.$example_node`, a resource it does not declare (its
# node is under compute.nodes). The reference refuses its install for that export; here
# it is refused when posted, for the same export (docs/element-manager.md)
BROKEN_EXPORT = "core_service_example.with_to_version.yaml"
_HOLE = re.compile(r"\{\{\s*(\w+)\s*(?:\|\s*default\(\s*'([^']*)'\s*\)\s*)?\}\}")

pytestmark = pytest.mark.skipif(
    not EXAMPLES.is_dir(),
    reason=f"the reference's example manifests are not at {EXAMPLES} (shared/ beside the "
           "repository's clone)")


def render(text):
    def fill(match):
        name, default = match.groups()
        if name in VARIABLES:
            return VARIABLES[name]
        assert default is not None, f"no value for template variable {name}"
        return default
    return _HOLE.sub(fill, text)


def load(file_name):
    return yaml.safe_load(render((EXAMPLES / file_name).read_text()))


def example_files():
    return sorted(p.name for p in EXAMPLES.iterdir()) if EXAMPLES.is_dir() else []


VALID = [pytest.param(name, marks=pytest.mark.xfail(reason=NOT_YET[name], strict=True))
         if name in NOT_YET else name
         for name in example_files() if name not in INVALID | {BROKEN_EXPORT}]


@pytest.mark.parametrize("as_yaml", [True, False], ids=["yaml", "json"])
@pytest.mark.parametrize("file_name", VALID)
def test_valid_example_loads(admin, file_name, as_yaml):
    manifest = load(file_name)
    resp = post_manifest(admin, manifest, as_yaml=as_yaml)
    if resp.status == 409:      # the same manifest, posted in the other body format first
        assert "already" in resp.json["message"] or "exists" in resp.json["message"], resp
        return
    assert resp.status == 201, (file_name, resp.json)
    assert resp.json["name"] == manifest["name"]
    assert admin.get(f"/v1/em/manifests/{resp.json['uuid']}").json["version"] == \
        manifest["version"]


def test_hyphenated_example_name_is_kept(admin):
    found = admin.get("/v1/em/manifests", query={"name": "passwords-example"}).json
    if not found:
        assert post_manifest(admin, load("passwords-example.yaml")).status == 201
        found = admin.get("/v1/em/manifests", query={"name": "passwords-example"}).json
    assert [m["name"] for m in found] == ["passwords-example"]


def test_invalid_import_example_is_refused_for_its_import(admin):
    """The reference wrote it to fail on its import. Here its resource's link
    `$test_export_node_1.imports.$test_node` already fails when it is posted: an import is
    reached as `$<this element>.imports.$<import>`. The refusal names that link, never the
    element's name."""
    manifest = load("invalid-import-not-exported.yaml")
    before = admin.get("/v1/em/manifests").json
    resp = post_manifest(admin, manifest)
    assert resp.status == 400, resp
    message = resp.json["message"]
    assert "$test_export_node_1.imports.$test_node" in message and "imports" in message
    assert "pattern" not in message and not message.startswith("name")
    assert admin.get("/v1/em/manifests").json == before


def test_invalid_import_example_with_its_own_prefix_fails_at_install_naming_the_import(
        admin):
    """The same manifest with the link spelled for its own element posts; its install is
    refused for the reason the reference shows: the import `test_node` is not exported
    (its element is not installed here, nor exports $test_node_unknown)."""
    manifest = load("invalid-import-not-exported.yaml")
    node = manifest["resources"]["$core.compute.nodes"]["test_node"]
    node["description"] = f"${manifest['name']}.imports.$test_node:description"
    resp = post_manifest(admin, manifest)
    assert resp.status == 201, resp
    done = admin.post(f"/v1/em/manifests/{resp.json['uuid']}/actions/install/invoke", {})
    assert done.status == 400, done
    assert done.json["message"].startswith("import test_node:"), done.json
    assert "test_export_node_2" in done.json["message"]
    assert admin.get("/v1/em/elements", query={"name": manifest["name"]}).json == []


def test_example_with_an_export_of_nothing_is_refused_for_that_export(admin):
    """The reference refuses it as well: its install resolves every export link in the
    element's own resources and fails with "Resource with link string ... does not
    exist" (rolled back, nothing installed). Here the same check runs when it is posted,
    as every check that needs nothing installed does, so it is never stored."""
    manifest = load(BROKEN_EXPORT)
    before = admin.get("/v1/em/manifests").json
    resp = post_manifest(admin, manifest)
    assert resp.status == 400, resp
    assert resp.json["message"] == (
        "exports.my_node.link: $core_service_example.em.services.$example_node names no "
        "resource of this manifest (its $example_node is compute.nodes.$example_node)")
    assert admin.get("/v1/em/manifests").json == before
    assert post_manifest(admin, manifest, as_yaml=False).json["message"] == \
        resp.json["message"]
    manifest["exports"]["my_node"]["link"] = "$core_service_example.compute.nodes.$example_node"
    fixed = post_manifest(admin, manifest)
    assert fixed.status == 201, fixed.json


def test_iam_bindings_under_the_reference_kind_names(admin):
    """`$core.iam.permissionbinding` and `$core.iam.rolebinding` (the reference's kind
    names, dbaas.yaml.j2) are IAM's permission_bindings and role_bindings."""
    manifest = {"name": "iam-kinds-example", "version": "0.0.1", "resources": {
        "$core.iam.roles": {"reader": {"name": "iam-kinds-reader"}},
        "$core.iam.permissions": {"read": {"name": "iamkinds.thing.read"}},
        "$core.iam.permissionbinding": {"read_binding": {
            "role": "$core.iam.roles.$reader:uuid",
            "permission": "$core.iam.permissions.$read:uuid"}}}}
    resp = post_manifest(admin, manifest)
    assert resp.status == 201, resp.json
    plan = admin.get(f"/v1/em/manifests/{resp.json['uuid']}/actions/validate").json
    assert plan["valid"], plan
    assert plan["order"][-1] == "iam.permissionbinding.$read_binding"


def test_dbaas_example_plans_its_records_under_the_imported_domain_and_is_built_in(admin):
    """The reference's DBaaS element posts; its plan puts the record after nothing of its
    own (its parent is the import); its install is a 409 at once, since dbaas is built
    into this appliance (docs/element-manager.md, "Built-in elements")."""
    manifest = load("dbaas.yaml.j2")
    found = admin.get("/v1/em/manifests", query={"name": "dbaas"}).json
    uuid = found[0]["uuid"] if found else post_manifest(admin, manifest).json["uuid"]
    plan = admin.get(f"/v1/em/manifests/{uuid}/actions/validate").json
    assert "imports.$core_local_domain.records.$dbaas_cp" in plan["order"]
    assert plan["order"].index("imports.$core_local_domain.records.$dbaas_cp") > \
        plan["order"].index("compute.nodes.$dbaas_cp")
    before = admin.get("/v1/em/elements").json
    done = admin.post(f"/v1/em/manifests/{uuid}/actions/install/invoke", {})
    assert done.status == 409, done
    assert done.json["message"].startswith("element dbaas is built into this appliance")
    assert admin.get("/v1/em/elements").json == before


def test_version_in_the_reference_shape_takes_its_major_from_the_name(admin):
    """dbaas.yaml.j2's version is `{name: pg18, image: ...}`: no major."""
    manifest = {"name": "pg-version-example", "version": "1.0.0", "resources": {
        "$dbaas.types.postgres.versions": {"pg18": {"name": "pg18", "image": ""}}}}
    resp = post_manifest(admin, manifest)
    assert resp.status == 201, resp.json
    assert admin.post(f"/v1/em/manifests/{resp.json['uuid']}/actions/install/invoke",
                      {}).status == 200
    from .conftest import wait_element
    elem = wait_element(admin, "pg-version-example")
    slot = elem["resources"]["types.postgres.versions.$pg18"]
    version = admin.get(f"/v1/types/postgres/versions/{slot['uuid']}")
    assert version.status == 200 and version.json["major"] == 18, version
    # a name that does not say it, and no major: refused naming the field
    resp = admin.post("/v1/types/postgres/versions", {"name": "latest", "image": ""})
    assert resp.status == 400, resp
    assert resp.json["message"].startswith("major: required, since the name 'latest'")
    assert admin.get("/v1/types/postgres/versions", query={"name": "latest"}).json in (
        [], {"versions": []})
