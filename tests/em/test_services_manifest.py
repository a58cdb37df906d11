"""Services in a manifest: `$core.em.services`, with one service ordered after another
through a link, materialized by the real builder."""

import uuid

from tests.secret.conftest import wait_for

from .conftest import ADMIN_PROJECT, element, install, post_manifest


def node(admin):
    resp = admin.post("/v1/compute/nodes", {"name": f"hw-{uuid.uuid4().hex[:6]}", "cores": 1,
                                            "ram": 1024, "node_type": "HW",
                                            "project_id": ADMIN_PROJECT})
    assert resp.status == 201, resp
    return resp.json["uuid"]


def manifest(target, command="exec /usr/bin/db"):
    base = {"project_id": ADMIN_PROJECT, "target": {"kind": "node", "node": target},
            "service_type": {"kind": "simple"}}
    return {"name": "svcapp", "version": "1.0.0", "requirements": {"core": {}},
            "resources": {"$core.em.services": {
                "db": {**base, "name": "db", "path": command},
                "web": {**base, "name": "web", "path": "exec /usr/bin/web",
                        "before": [{"kind": "service",
                                    "service": "$svcapp.em.services.$db"}]}}}}


def test_a_manifest_makes_services_linked_to_each_other(admin):
    install(admin, manifest(node(admin)))
    keys = ("em.services.$db", "em.services.$web")
    elem = wait_for(lambda: (e := element(admin, "svcapp")) and all(
        (e["resources"].get(k) or {}).get("uuid") for k in keys) and e, 15)
    db = elem["resources"]["em.services.$db"]["uuid"]
    web = admin.get(f"/v1/em/services/{elem['resources']['em.services.$web']['uuid']}").json
    assert web["before"] == [{"kind": "service", "service": db}]
    assert admin.get(f"/v1/em/services/{db}").json["path"] == "exec /usr/bin/db"


def test_a_bad_service_in_a_manifest_is_refused_up_front(admin):
    resp = post_manifest(admin, {**manifest(node(admin), command="a\nb"), "name": "svcbad"})
    assert resp.status == 400 and "path" in resp.json["message"], resp
