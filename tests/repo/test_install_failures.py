"""Installs that cannot finish say so: refused at once (409 naming the dependency and
the reason) when the API can tell, else the element goes ERROR with the reason; never an
endless IN_PROGRESS. Real API and builder daemon (tests/repo/conftest.py).

Ways an install can fail, and where each is caught:
- a repository element named like a built-in element (core, dbaas): refused at install;
  a requirement on that name is met by the appliance, which the repository's element
  never replaces (a constraint the built-in misses is a 409 naming it);
- a lazy element whose manifest cannot be fetched: refused at install (resolving fetches
  every manifest of the closure);
- an import of what no installed element exports: ERROR, with the Element Manager's reason;
- a resource the Element Manager's write is refused (a name taken): ERROR, with the reason;
- a dependency in ERROR before it was handed over: its dependents go ERROR naming it.
A dependency cannot be removed between install and build: deleting or uninstalling an
element, or deleting its repository, is refused while it is installed or required
(test_install_flow.py).
"""

import os

import pytest

from .conftest import (ADMIN_PROJECT, E, elements_of, make_repo, manifest, wait_element,
                       wait_repo, write_manifest)


def with_import(name, element, link):
    m = manifest(name, "1.0.0")
    m["imports"] = {"wanted": {"element": f"${element}", "link": link}}
    m["resources"]["$core.secret.secrets"]["s"]["default_value"] = \
        f"${name}.imports.$wanted:value"
    return m


@pytest.fixture(scope="module")
def repo(admin, tmp_path_factory):
    directory = tmp_path_factory.mktemp("failing")
    write_manifest(directory, manifest("core", "0.0.1"))
    write_manifest(directory, manifest("core", "9.0.0"))
    write_manifest(directory, manifest("dbaas", "2.1.0"))
    write_manifest(directory, manifest("needs-core", "1.0.0", {"core": {"from_version": "0.0.0"},
                                                               "dbaas": {"from_version": "2.1.0"}}))
    write_manifest(directory, manifest("needs-new-core", "1.0.0",
                                       {"core": {"from_version": "9.0.0"}}))
    write_manifest(directory, manifest("gone-manifest", "1.0.0"))
    write_manifest(directory, with_import("imports-ghost", "ghost-element",
                                          "$ghost-element.secret.secrets.$s"))
    write_manifest(directory, manifest("on-broken", "1.0.0",
                                       {"imports-ghost": {"from_version": "1.0.0"}}))
    taken = manifest("name-taken", "1.0.0")
    taken["resources"]["$core.secret.secrets"]["s"]["name"] = "already-taken-secret"
    write_manifest(directory, taken)
    made = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(directory)},
                     sync_mode="lazy")
    wait_repo(admin, made["uuid"])
    return {"directory": directory,
            "elements": {k: v["uuid"] for k, v in elements_of(admin, made["uuid"]).items()}}


def state(admin, element_uuid):
    found = admin.get(f"{E}/{element_uuid}").json
    return found["installation_state"], found["status"]


def install(admin, element_uuid):
    return admin.post(f"{E}/{element_uuid}/actions/install/invoke", {})


@pytest.mark.parametrize("version", ["0.0.1", "9.0.0"])
def test_a_repository_element_named_like_a_built_in_is_refused_at_once(admin, repo, version):
    target = repo["elements"][("core", version)]
    before = admin.get(f"{E}/{target}").json
    resp = install(admin, target)
    assert resp.status == 409, resp
    assert f"core {version}" in resp.json["message"]
    assert "built into this appliance" in resp.json["message"]
    assert admin.get(f"{E}/{target}").json == before


def test_a_requirement_the_built_in_misses_is_refused_at_once_naming_it(admin, repo):
    """A repository `core` 9.0.0 would meet it, but could never be installed (the old
    endless IN_PROGRESS): the install is refused, naming core and why."""
    target = repo["elements"][("needs-new-core", "1.0.0")]
    resp = install(admin, target)
    assert resp.status == 409, resp
    message = resp.json["message"]
    assert "core" in message and "built into this appliance" in message, message
    assert state(admin, target) == ("UNINSTALLED", "AVAILABLE")
    assert state(admin, repo["elements"][("core", "9.0.0")]) == ("UNINSTALLED", "AVAILABLE")


def test_requirements_on_built_ins_are_met_by_the_appliance(admin, repo):
    target = repo["elements"][("needs-core", "1.0.0")]
    resp = install(admin, target)
    assert resp.status == 200, resp
    assert wait_element(admin, target, "ACTIVE")["status_reason"] is None
    for key in (("core", "0.0.1"), ("core", "9.0.0"), ("dbaas", "2.1.0")):
        assert state(admin, repo["elements"][key]) == ("UNINSTALLED", "AVAILABLE")


def test_a_manifest_that_cannot_be_fetched_is_refused_at_once(admin, repo):
    os.remove(os.path.join(repo["directory"], "gone-manifest-1.0.0.yaml"))
    target = repo["elements"][("gone-manifest", "1.0.0")]
    resp = install(admin, target)
    assert resp.status == 409, resp
    assert "gone-manifest 1.0.0: manifest cannot be downloaded" in resp.json["message"]
    assert state(admin, target)[0] == "UNINSTALLED"


def test_a_missing_import_ends_in_error_with_the_reason(admin, repo):
    target = repo["elements"][("imports-ghost", "1.0.0")]
    dependent = repo["elements"][("on-broken", "1.0.0")]
    resp = install(admin, dependent)    # installs imports-ghost too, as its dependency
    assert resp.status == 200, resp
    failed = wait_element(admin, target, "ERROR")
    assert failed["status_reason"].startswith("import wanted:"), failed
    assert "ghost-element" in failed["status_reason"]
    # and what depends on it says why it cannot go on, instead of waiting for ever
    waiting = wait_element(admin, dependent, "ERROR")
    assert waiting["status_reason"].startswith("dependency imports-ghost 1.0.0 failed: "
                                               "import wanted:"), waiting


def test_a_resource_the_element_manager_cannot_write_ends_in_error(admin, repo):
    resp = admin.post("/v1/secret/secrets", {"name": "already-taken-secret",
                                             "project_id": ADMIN_PROJECT,
                                             "constructor": {"kind": "plain"}})
    assert resp.status == 201, resp
    target = repo["elements"][("name-taken", "1.0.0")]
    assert install(admin, target).status == 200
    failed = wait_element(admin, target, "ERROR")
    assert failed["status_reason"], failed
    assert "already-taken-secret" in failed["status_reason"] or \
        "secret.secrets.$s" in failed["status_reason"], failed


# ---- the reference's shape: a repository with `core` and an `app` that requires it ---------

def reference_manifest(name, version, requirements=None):
    """The reference's test manifest, as its repo builder tests write it
    (tests/functional/service/test_repo_builder.py, `_make_manifest`): name, version, no
    resources, requirements when given; the file is `<name>-<version>.yaml`."""
    manifest = {"name": name, "version": version, "resources": {}}
    if requirements:
        manifest["requirements"] = requirements
    return manifest


@pytest.fixture(scope="module", params=["copy", "lazy"])
def reference_repo(admin, tmp_path_factory, request):
    directory = tmp_path_factory.mktemp(f"reference-{request.param}")
    write_manifest(directory, reference_manifest("core", "1.0.0"))
    write_manifest(directory, reference_manifest(
        "app", "1.0.0", requirements={"core": {"from_version": "1.0.0"}}))
    made = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(directory)},
                     sync_mode=request.param)
    wait_repo(admin, made["uuid"])
    return {k: v["uuid"] for k, v in elements_of(admin, made["uuid"]).items()}


def test_reference_app_whose_core_only_the_repository_has_is_refused_at_once(
        admin, reference_repo):
    """In the reference, `app` pulls the repository's `core` 1.0.0 in. Here core is the
    appliance (0.x, below app's from_version) and the repository's `core` could never be
    handed to the Element Manager: the install is a 409 at once naming the dependency and
    why, and nothing changes (never the old 200 followed by IN_PROGRESS for ever)."""
    app, core = reference_repo[("app", "1.0.0")], reference_repo[("core", "1.0.0")]
    before = [admin.get(f"{E}/{u}").json for u in (app, core)]
    resp = install(admin, app)
    assert resp.status == 409, resp
    assert resp.json["type"] == "Conflict"
    message = resp.json["message"]
    assert message.startswith("dependency core (>=1.0.0) required by app 1.0.0: the "
                              f"installed core {builtin_version('core')} does not satisfy "
                              "it"), message
    assert message.endswith("; core is built into this appliance at version "
                            f"{builtin_version('core')}, and a repository element of that "
                            "name is never installed"), message
    assert [admin.get(f"{E}/{u}").json for u in (app, core)] == before
    # and the repository's core itself is refused at once, for its name
    resp = install(admin, core)
    assert resp.status == 409 and "core 1.0.0: element core is built into this " \
        "appliance" in resp.json["message"], resp
    assert [admin.get(f"{E}/{u}").json for u in (app, core)] == before


def builtin_version(name):
    from appliance.em.builtin import BUILTIN
    return BUILTIN[name].version


def test_a_core_installed_before_the_rule_ends_in_error_with_its_dependent(
        admin, server, tmp_path):
    """A state written before the install rule (a repository `core` and its dependent
    both INSTALLED, as the old 200 left them): the builder cannot hand core over, so it
    goes ERROR with the Element Manager's reason, and app ERROR naming it; neither stays
    IN_PROGRESS."""
    write_manifest(tmp_path, reference_manifest("core", "1.0.0"))
    write_manifest(tmp_path, reference_manifest(
        "app", "1.0.0", requirements={"core": {"from_version": "1.0.0"}}))
    made = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(tmp_path)},
                     sync_mode="copy")
    wait_repo(admin, made["uuid"])
    found = elements_of(admin, made["uuid"])
    app, core = found[("app", "1.0.0")]["uuid"], found[("core", "1.0.0")]["uuid"]
    wait_element(admin, core, "AVAILABLE")
    wait_element(admin, app, "AVAILABLE")
    server.store.collection("repo_bindings").insert({"element": app, "depends_on": core})
    for uuid in (core, app):
        server.store.collection("repo_elements").update(uuid, {
            "installation_state": "INSTALLED", "status": "IN_PROGRESS",
            "status_reason": None})
    failed = wait_element(admin, core, "ERROR")
    assert failed["status_reason"].startswith("element core is built into this appliance"), \
        failed
    dependent = wait_element(admin, app, "ERROR")
    assert dependent["status_reason"].startswith("dependency core 1.0.0 failed: element "
                                                 "core is built into this appliance"), \
        dependent
    assert admin.get("/v1/em/elements", query={"name": "app"}).json == []
