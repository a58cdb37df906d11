"""Install, upgrade and uninstall of a 3-element chain through the API, with the
Element Manager following (spec 3.3)."""

import pytest

from tests.secret.conftest import wait_for

from .conftest import (E, elements_of, make_repo, manifest, wait_element, wait_repo,
                       write_manifest)


def em_element(admin, name):
    found = admin.get("/v1/em/elements", query={"name": name}).json
    return found[0] if found else None


@pytest.fixture(scope="module")
def chain(server, admin, tmp_path_factory):
    """lib 1.0.0 and 1.1.0 <- mid 1.0.0 (lib >=1.0.0 <2.0.0) <- top 1.0.0 (mid ==1.0.0)."""
    directory = tmp_path_factory.mktemp("chain")
    write_manifest(directory, manifest("lib", "1.0.0"))
    write_manifest(directory, manifest("lib", "1.1.0"))
    write_manifest(directory, manifest("lib", "2.0.0"))
    write_manifest(directory, manifest("mid", "1.0.0", {"lib": {"from_version": "1.0.0",
                                                               "to_version": "2.0.0"}}))
    write_manifest(directory, manifest("top", "1.0.0", {"mid": {"version": "1.0.0"},
                                                       "core": {"from_version": "0.0.0"}}))
    write_manifest(directory, manifest("orphan", "1.0.0", {"ghost": {"from_version": "1.0.0"}}))
    write_manifest(directory, manifest("badop", "1.0.0", {"lib": {"above": "1.0.0"}}))
    repo = make_repo(admin, {"kind": "bootstrap", "manifests_dir": str(directory)},
                     sync_mode="lazy")
    wait_repo(admin, repo["uuid"])
    return {k: v["uuid"] for k, v in elements_of(admin, repo["uuid"]).items()}


def test_install_refused_at_once_when_unresolvable(admin, chain):
    resp = admin.post(f"{E}/{chain[('orphan', '1.0.0')]}/actions/install/invoke", {})
    assert resp.status == 409 and "ghost" in resp.json["message"]
    resp = admin.post(f"{E}/{chain[('badop', '1.0.0')]}/actions/install/invoke", {})
    assert resp.status == 400 and "lib" in resp.json["message"]
    for key in (("orphan", "1.0.0"), ("badop", "1.0.0"), ("lib", "1.0.0")):
        assert admin.get(f"{E}/{chain[key]}").json["installation_state"] == "UNINSTALLED"


def test_install_chain_dependencies_first(admin, chain):
    top = chain[("top", "1.0.0")]
    resp = admin.post(f"{E}/{top}/actions/install/invoke", {})
    assert resp.status == 200, resp
    assert resp.json["installation_state"] == "INSTALLED"
    # the highest release in range is chosen for lib (1.1.0; 2.0.0 is out of range)
    for key in (("lib", "1.1.0"), ("mid", "1.0.0"), ("top", "1.0.0")):
        done = wait_element(admin, chain[key], "ACTIVE")
        assert done["element"].startswith("/v1/em/elements/")
    assert admin.get(f"{E}/{chain[('lib', '1.0.0')]}").json["installation_state"] == \
        "UNINSTALLED"
    for name, version in (("lib", "1.1.0"), ("mid", "1.0.0"), ("top", "1.0.0")):
        em = em_element(admin, name)
        assert em["version"] == version and em["status"] == "ACTIVE"
    bindings = admin.get(E, query={"name": "top"})
    assert bindings.status == 200


def test_install_of_another_version_is_409(admin, chain):
    resp = admin.post(f"{E}/{chain[('lib', '1.0.0')]}/actions/install/invoke", {})
    assert resp.status == 409 and "upgrade" in resp.json["message"]


def test_uninstall_of_depended_upon_is_409_naming_dependent(admin, chain):
    resp = admin.post(f"{E}/{chain[('mid', '1.0.0')]}/actions/uninstall/invoke", {})
    assert resp.status == 409 and "top 1.0.0" in resp.json["message"]
    resp = admin.post(f"{E}/{chain[('lib', '1.1.0')]}/actions/uninstall/invoke", {})
    assert resp.status == 409 and "mid 1.0.0" in resp.json["message"]
    assert admin.delete(f"{E}/{chain[('lib', '1.1.0')]}").status == 409


def test_upgrade_moves_the_runtime_element(admin, chain):
    old, new = chain[("lib", "1.1.0")], chain[("lib", "1.0.0")]    # a "downgrade" is a move too
    runtime = admin.get(f"{E}/{old}").json["element"]
    resp = admin.post(f"{E}/{old}/actions/upgrade/invoke", {"target": f"{E}/{new}"})
    assert resp.status == 200, resp
    assert resp.json["element"] == runtime
    done = wait_element(admin, new, "ACTIVE")
    assert done["element"] == runtime
    wait_for(lambda: admin.get(f"{E}/{old}").json["element"] is None, timeout=20)
    assert admin.get(f"{E}/{old}").json["status"] == "AVAILABLE"
    assert em_element(admin, "lib")["version"] == "1.0.0"
    # mid's binding now points at the new lib: it still holds it
    resp = admin.post(f"{E}/{new}/actions/uninstall/invoke", {})
    assert resp.status == 409 and "mid" in resp.json["message"]
    bad = admin.post(f"{E}/{new}/actions/upgrade/invoke",
                     {"target": chain[("mid", "1.0.0")]})
    assert bad.status == 400


def test_uninstall_chain_top_down(admin, chain):
    for name in ("top", "mid", "lib"):
        key = (name, "1.0.0")
        resp = admin.post(f"{E}/{chain[key]}/actions/uninstall/invoke", {})
        assert resp.status == 200, resp
        wait_element(admin, chain[key], "AVAILABLE")
        assert em_element(admin, name) is None
    # their resources went with them
    assert admin.get("/v1/secret/secrets", query={"name": "lib-secret"}).json == []


def test_edit_keeps_name_and_version(admin, chain):
    target = chain[("orphan", "1.0.0")]
    resp = admin.post(f"{E}/{target}/actions/edit/invoke",
                      {"manifest": manifest("orphan", "9.9.9")})
    assert resp.status == 400
    fixed = manifest("orphan", "1.0.0")
    resp = admin.post(f"{E}/{target}/actions/edit/invoke", {"manifest": fixed})
    assert resp.status == 200 and resp.json["manifest"]["requirements"] == {}
