"""Version ranges on uninstall, and bad manifests: each a 400 naming the problem."""

import pytest

from .conftest import ADMIN_PROJECT, act, element, install, post_manifest, wait_element
from tests.secret.conftest import wait_for

P = ADMIN_PROJECT


def lib(version):
    return {"name": "lib", "version": version, "resources": {"$core.secret.secrets": {
        "s": {"name": "lib-s", "project_id": P, "constructor": {"kind": "plain"},
              "default_value": f"lib {version}"}}}}


def dependent(name, requirement):
    return {"name": name, "version": "1.0.0", "requirements": {"lib": requirement},
            "resources": {}}


def manifest_uuid(admin, name):
    return element(admin, name)["manifest"].rsplit("/", 1)[1]


def test_uninstall_respects_ranges_and_exclusive_to_version(admin):
    install(admin, lib("0.9.0"))
    wait_element(admin, "lib")
    install(admin, dependent("below_one", {"from_version": "0.5.0", "to_version": "1.0.0"}))
    install(admin, dependent("from_nine", {"from_version": "0.9.0"}))
    wait_element(admin, "below_one")
    refused = act(admin, manifest_uuid(admin, "lib"), "uninstall")
    assert refused.status == 409 and "requires lib" in refused.json["message"]

    # from_nine (from_version inclusive at 0.9.0) goes; below_one still holds lib 0.9.0
    assert act(admin, manifest_uuid(admin, "from_nine"), "uninstall").status == 200
    wait_for(lambda: element(admin, "from_nine") is None)
    refused = act(admin, manifest_uuid(admin, "lib"), "uninstall")
    assert refused.status == 409 and "below_one" in refused.json["message"]

    # upgrade lib to exactly the exclusive bound: below_one's range no longer holds it
    v1 = post_manifest(admin, lib("1.0.0")).json["uuid"]
    assert act(admin, v1, "upgrade").status == 200
    wait_for(lambda: element(admin, "lib")["version"] == "1.0.0"
             and element(admin, "lib")["status"] == "ACTIVE")
    # a requirement that 1.0.0 does not meet cannot be installed now
    late = post_manifest(admin, dependent("too_late", {"to_version": "1.0.0"})).json["uuid"]
    resp = act(admin, late, "install")
    assert resp.status == 409 and "lib" in resp.json["message"]
    assert act(admin, v1, "uninstall").status == 200
    wait_for(lambda: element(admin, "lib") is None)


def test_requirement_on_a_missing_element_is_409(admin):
    resp = post_manifest(admin, dependent("needs_ghost", {"from_version": "1.0.0"}))
    body = act(admin, resp.json["uuid"], "install").json
    assert body["code"] == 409 and "lib" in body["message"]


GOOD = {"name": "shape", "version": "1.0.0", "resources": {"$core.secret.secrets": {
    "a": {"name": "shape-a", "project_id": P, "constructor": {"kind": "plain"}}}}}


def variant(**changes):
    import copy
    m = copy.deepcopy(GOOD)
    for path, value in changes.items():
        target = m
        keys = path.split("/")
        for k in keys[:-1]:
            target = target[k]
        if value is None:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return m


SECRETS = "resources/$core.secret.secrets"
BAD = [
    ("missing name", variant(name=None), "name"),
    ("missing version", variant(version=None), "version"),
    ("missing resources", variant(resources=None), "resources"),
    ("unknown top key", variant(colour="red"), "colour"),
    ("bad version", variant(version="one"), "version"),
    ("bad requirement op", variant(requirements={"core": {"above": "1.0.0"}}),
     "requirements.core"),
    ("unknown resource path", variant(**{"resources/$core.nothing.here": {"x": {}}}),
     "$core.nothing.here"),
    ("not a resource path", variant(**{"resources/secrets": {"x": {}}}), "resources.secrets"),
    ("unknown field", variant(**{f"{SECRETS}/a/colour": "red"}), "colour"),
    ("read-only field", variant(**{f"{SECRETS}/a/status": "ACTIVE"}), "status"),
    ("wrong literal type", variant(**{f"{SECRETS}/a/name": 5}), "name"),
    ("wrong nested value", variant(**{f"{SECRETS}/a/constructor": {"kind": "vault"}}),
     "constructor"),
    ("missing required field", variant(**{f"{SECRETS}/a/name": None}), "name"),
    ("malformed link", variant(**{f"{SECRETS}/a/default_value": "$shape.secret"}),
     "$shape.secret"),
    ("link to nothing", variant(**{f"{SECRETS}/a/default_value":
                                   "$shape.secret.secrets.$nope:value"}), "$nope"),
    ("link to another element", variant(**{f"{SECRETS}/a/default_value":
                                           "$other.secret.secrets.$x:value"}), "other"),
    ("import not declared", variant(**{f"{SECRETS}/a/default_value":
                                       "$shape.imports.$missing:value"}), "missing"),
    ("bad template", variant(**{f"{SECRETS}/a/default_value": 'f"x {nothing} y"'}), "nothing"),
    ("bad function", variant(**{f"{SECRETS}/a/default_value":
                                "index($shape.secret.secrets.$a:value, first)"}), "index"),
    ("cycle", variant(**{f"{SECRETS}/a/default_value": "$shape.secret.secrets.$b:value",
                         f"{SECRETS}/b": {"name": "shape-b", "project_id": P,
                                          "constructor": {"kind": "plain"},
                                          "default_value": "$shape.secret.secrets.$a:value"}}),
     "cycle"),
    ("export of nothing", variant(exports={"e": {"link": "$shape.secret.secrets.$zzz"}}),
     "exports.e"),
    ("resources not a mapping", variant(resources=["a"]), "resources"),
]


@pytest.mark.parametrize("why,manifest,word", BAD, ids=[b[0] for b in BAD])
def test_bad_manifest_is_400_naming_the_problem(admin, why, manifest, word):
    before = len(admin.get("/v1/em/manifests").json)
    for as_yaml in (True, False):
        resp = post_manifest(admin, manifest, as_yaml=as_yaml)
        assert resp.status == 400, (why, resp)
        assert word in resp.json["message"], (why, resp.json["message"])
    assert len(admin.get("/v1/em/manifests").json) == before
    assert admin.get("/v1/secret/secrets", query={"name": "shape-a"}).json == []


def test_malformed_yaml_is_400(admin):
    resp = admin.post("/v1/em/manifests", raw=b"name: [unclosed",
                      content_type="application/yaml")
    assert resp.status == 400 and "YAML" in resp.json["message"]


def test_good_manifest_is_accepted(admin):
    assert post_manifest(admin, GOOD).status == 201


def test_manifest_body_limit_is_the_configured_upload_limit(tmp_path):
    """1 MiB for ordinary bodies, max_upload_bytes for manifests (both configurable)."""
    from tests.apiserver import ApiServer
    from tests.conftest import ADMIN_PASSWORD
    limit = 3 * 1024 * 1024
    srv = ApiServer(str(tmp_path / "state"), ADMIN_PASSWORD, max_upload_bytes=limit).start()
    try:
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))

        def big(count):
            return {"name": "big", "version": f"1.0.{count}", "resources": {
                "$core.secret.secrets": {f"s{i}": {
                    "name": f"big-{count}-{i}", "project_id": P,
                    "constructor": {"kind": "plain"}, "default_value": "x" * 10000}
                    for i in range(count)}}}

        two_mib = big(200)          # about 2 MB: over 1 MiB, under the upload limit
        resp = admin.post("/v1/secret/secrets", {"name": "x", "project_id": P,
                                                 "constructor": {"kind": "plain"},
                                                 "description": "y" * (2 * 1024 * 1024)})
        assert resp.status == 413
        assert admin.post("/v1/em/manifests", two_mib).status == 201
        resp = admin.post("/v1/em/manifests", big(400))     # about 4 MB
        assert resp.status == 413 and str(limit) in resp.json["message"]
    finally:
        srv.stop()
