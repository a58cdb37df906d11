"""The three daemons that fetch a URL a project chose (issue 25, "Fetches made on a
project's behalf"): the compute daemon's image download, the builder's repository fetch
and the node agent's local_dir_download. A marker server on loopback must never be hit
when a project owner points one of them at it: a literal address is a 400 at the API, a
name that resolves there makes the resource ERROR with the reason. A platform caller, or
the admin's setting that allows 127.0.0.0/8, makes the same fetch work."""

import io
import os
import tarfile
import uuid

import pytest

from appliance.agent.host import Host
from appliance.lb.node import Driver
from appliance.tenancy.addresses import PLATFORM, Reach
from tests.apiserver import ApiServer
from tests.compute.conftest import Member, node_body, refused
from tests.compute.reconcile_helpers import World
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import ADMIN_PROJECT
from tests.lb.conftest import LB_IMAGE
from tests.lb.helpers import make_lb, make_vhost, register_appliance, routes
from tests.secret.conftest import DaemonProcess, wait_for

from .marker import Marker

R = "/v1/repo/repositories"


@pytest.fixture
def marker():
    with Marker() as m:
        yield m


# ---- the compute daemon: a node's image ---------------------------------------------------

@pytest.fixture
def compute(tmp_path):
    w = World(tmp_path)
    w.settings["allowed_outside_networks"] = ""         # the default: loopback refused
    yield w
    w.close()


def converge(world, passes=2):
    rec = world.reconciler()
    for _ in range(passes):
        rec.pass_once()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_project_node_image_on_loopback_is_never_fetched(compute, host):
    node = compute.add_node(image="base.raw")
    url = compute.url("base.raw").replace("127.0.0.1", host)
    compute.store.collection("compute_nodes").update(node["uuid"], {"disk_spec": {
        "kind": "root_disk", "size": 10, "image": url}})
    converge(compute)
    node = compute.node(node["uuid"])
    assert node["status"] == "ERROR", node
    assert "loopback" in node["status_reason"] and "refused" in node["status_reason"]
    assert compute.hits == []
    assert compute.domain(node["uuid"]) is None


def test_a_platform_node_image_on_loopback_is_fetched(compute):
    node = compute.add_node(image="base.raw", project_id=ADMIN_PROJECT)
    converge(compute)
    assert compute.node(node["uuid"])["status"] == "ACTIVE"
    assert compute.hits == ["base.raw"]


def test_the_cache_does_not_hand_a_project_what_the_platform_fetched(compute):
    """The platform's node fetched the image into the cache; a project's node naming
    the same URL is refused all the same (its disk would be that content)."""
    platform_node = compute.add_node("p", image="base.raw", project_id=ADMIN_PROJECT)
    converge(compute)
    assert compute.node(platform_node["uuid"])["status"] == "ACTIVE"
    node = compute.add_node("tenant", image="base.raw")
    converge(compute)
    assert compute.node(node["uuid"])["status"] == "ERROR"
    assert compute.hits == ["base.raw"]


def test_the_admin_setting_lets_project_nodes_fetch_from_loopback(compute):
    compute.settings["allowed_outside_networks"] = "127.0.0.0/8"
    node = compute.add_node(image="base.raw")
    converge(compute)
    assert compute.node(node["uuid"])["status"] == "ACTIVE"
    assert compute.hits == ["base.raw"]


# ---- the API: literal addresses are a 400 at create and update ------------------------------

@pytest.fixture(scope="module")
def api(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    lb_image=LB_IMAGE).start()
    register_appliance(srv.store)
    admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
    yield srv, admin, Member(srv, admin)
    srv.stop()


def test_literal_loopback_urls_are_400_for_project_owners(api, marker):
    srv, admin, owner = api
    url = marker.url("/base.raw")
    body = node_body(project_id=owner.project, disk_spec={"kind": "root_disk",
                                                          "image": url})
    nodes_before = len(srv.store.collection("compute_nodes").records())
    assert "loopback" in refused(owner.client.post("/v1/compute/nodes", body), 400)
    set_body = {"name": f"s-{uuid.uuid4().hex[:6]}", "project_id": owner.project,
                "cores": 1, "ram": 1024, "replicas": 0,
                "disk_spec": {"kind": "root_disk", "image": url}}
    assert "loopback" in refused(owner.client.post("/v1/compute/sets", set_body), 400)
    volume = {"name": "v", "project_id": owner.project, "size": 1,
              "image": "http://169.254.169.254/disk.raw"}
    assert "link-local" in refused(owner.client.post("/v1/compute/volumes", volume), 400)
    assert len(srv.store.collection("compute_nodes").records()) == nodes_before
    # an update of a node it owns, the same
    ok = owner.client.post("/v1/compute/nodes", node_body(project_id=owner.project))
    assert ok.status == 201, ok
    assert "loopback" in refused(owner.client.put(
        f"/v1/compute/nodes/{ok.json['uuid']}", {"disk_spec": body["disk_spec"]}), 400)
    assert owner.client.get(f"/v1/compute/nodes/{ok.json['uuid']}").json["disk_spec"] == \
        ok.json["disk_spec"]
    # the platform may
    resp = admin.post("/v1/compute/nodes", node_body(disk_spec={"kind": "root_disk",
                                                                "image": url}))
    assert resp.status == 201, resp
    assert marker.hits == []


def test_repository_urls_and_bootstrap_dirs(api, marker):
    srv, admin, owner = api
    repo = {"name": f"r-{uuid.uuid4().hex[:6]}", "project_id": owner.project,
            "driver_spec": {"kind": "nginx", "url": marker.url("/repo")}}
    assert "loopback" in refused(owner.client.post(R, repo), 400)
    boot = {**repo, "driver_spec": {"kind": "bootstrap", "manifests_dir": "/etc"}}
    assert "administrators" in refused(owner.client.post(R, boot), 403)
    assert owner.client.get(R, query={"project_id": owner.project}).json == []
    assert marker.hits == []


def test_local_dir_download_literal_loopback_is_400(api, marker):
    srv, admin, owner = api
    lb = make_lb(owner.client, project=owner.project, type={"kind": "core"})
    vhost = make_vhost(owner.client, lb)
    condition = {"kind": "prefix", "value": "/", "actions": [
        {"kind": "local_dir_download", "url": marker.url("/site.tar.gz")}]}
    message = refused(owner.client.post(routes(lb, vhost), {"condition": condition}), 400)
    assert "loopback" in message
    assert owner.client.get(routes(lb, vhost)).json == []
    resp = admin.post(routes(lb, vhost), {"condition": condition})
    assert resp.status == 201, resp
    assert marker.hits == []


# ---- the builder: a repository's url ---------------------------------------------------------

def builder_world(tmp_path, **settings):
    srv = ApiServer(os.path.join(str(tmp_path), "state"), ADMIN_PASSWORD, **settings).start()
    env = {f"APPLIANCE_{k.upper()}": v for k, v in settings.items()}
    builder = DaemonProcess("builder", srv.settings["state_dir"], env=env).start()
    return srv, builder


def serve_repository(marker):
    marker.files["/repo/inventory.json"] = b'{"elements": {}}'


@pytest.mark.parametrize("allow", [False, True])
def test_the_builder_never_fetches_a_project_repository_on_loopback(tmp_path, marker,
                                                                     allow):
    srv, builder = builder_world(tmp_path, **(
        {"allowed_outside_networks": "127.0.0.0/8"} if allow else {}))
    try:
        serve_repository(marker)
        admin = srv.client(srv.login("admin", ADMIN_PASSWORD))
        owner = Member(srv, admin)
        # a name resolves there: only the builder's resolution can tell
        resp = owner.client.post(R, {
            "name": "r", "project_id": owner.project,
            "driver_spec": {"kind": "nginx", "url": marker.url("/repo", "localhost")}})
        assert resp.status == 201, resp
        done = wait_for(lambda: (r := owner.client.get(f"{R}/{resp.json['uuid']}").json)[
            "status"] in ("ERROR", "ACTIVE") and r, 30)
        if allow:
            assert done["status"] == "ACTIVE", done
            assert ("/repo/inventory.json", f"localhost:{marker.port}") in marker.hits
        else:
            assert done["status"] == "ERROR", done
            assert "localhost resolves to 127.0.0.1" in done["status_reason"]
            assert marker.hits == []
        # the platform's repository on the same server is read
        mine = admin.post(R, {"name": "p", "project_id": ADMIN_PROJECT, "driver_spec": {
            "kind": "nginx", "url": marker.url("/repo")}})
        assert mine.status == 201, mine
        wait_for(lambda: admin.get(f"{R}/{mine.json['uuid']}").json["status"] == "ACTIVE",
                 30)
        assert marker.hits
    finally:
        builder.stop()
        srv.stop()


# ---- the node agent: an LB's local_dir_download ----------------------------------------------

def tar_gz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def downloads_of(tmp_path, marker, reach):
    """What the agent's LB driver does before it renders: fetch the archives."""
    host = Host(root=str(tmp_path / "root"), state_dir=str(tmp_path / "state"),
                settings={"agent_lb_listen": "127.0.0.1"})
    driver = Driver(host)
    route = str(uuid.uuid4())
    value = {"reach": reach.as_dict()} if reach is not None else {}
    return driver.fetch_downloads(str(uuid.uuid4()),
                                  {route: marker.url("/site.tar.gz", "localhost")}, value)


def test_the_agent_never_fetches_a_project_archive_on_loopback(tmp_path, marker):
    from appliance.lb.node import Failed
    marker.files["/site.tar.gz"] = tar_gz({"index.html": b"site"})
    project = Reach(project_id=str(uuid.uuid4()), own=[("10.32.0.0/24", "default")])
    with pytest.raises(Failed, match="localhost resolves to 127.0.0.1"):
        downloads_of(tmp_path / "a", marker, project)
    with pytest.raises(Failed, match="no address rule"):
        downloads_of(tmp_path / "b", marker, None)
    assert marker.hits == []
    allowed = Reach(project_id=project.project_id, outside=["127.0.0.0/8"])
    for reach, where in ((PLATFORM, "c"), (allowed, "d")):
        (directory,) = downloads_of(tmp_path / where, marker, reach).values()
        with open(os.path.join(directory, "index.html"), "rb") as f:
            assert f.read() == b"site"
    assert len(marker.hits) == 2


def test_the_producer_sends_the_lb_projects_rule_with_downloads(api):
    from appliance.agent.targets import View
    from appliance.lb import targets
    srv, admin, owner = api
    lb = make_lb(owner.client, project=owner.project, type={"kind": "core"})
    vhost = make_vhost(owner.client, lb)
    assert owner.client.post(routes(lb, vhost), {"condition": {
        "kind": "prefix", "value": "/", "actions": [
            {"kind": "local_dir_download", "url": "https://site.example.test/a.tar.gz"}]}}
    ).status == 201
    value = targets.value(View(srv.store, settings=srv.settings),
                          srv.store.collection("network_lb").get(lb["uuid"]))
    reach = Reach.from_dict(value["reach"])
    assert not reach.platform and reach.project_id == owner.project
    assert reach.refusal("127.0.0.1") is not None
