"""The node API: ranges, disk_spec rules, images, read-only fields, actions, scoping."""

import os

import pytest

from appliance.compute.resources import CONSOLE_TAIL, console_path

from .conftest import IMAGE, ADMIN_PROJECT, N, P, V, Member, created, node_body, refused


def count(admin):
    return len(admin.get(N).json)


def test_create_fills_the_reference_defaults_and_hides_internals(admin):
    node = created(admin.post(N, node_body()))
    assert node["status"] == "NEW" and node["status_reason"] is None
    assert node["disk_spec"] == {"kind": "root_disk", "image": IMAGE, "size": 10,
                                 "tier": "WARM", "ephemeral": True}
    assert (node["node_type"], node["power_state"], node["placement_policies"]) == (
        "VM", "on", [])
    assert node["default_network"] == {} and node["hypervisor"] is None
    assert node["node_set"] is None and node["reboot_requested_at"] is None
    assert node["network"] is None and node["hostname"] is None
    assert not {"set_index", "agent_key"} & set(node)
    assert admin.get(f"{N}/{node['uuid']}").json == node


@pytest.mark.parametrize("field,low,high", [("cores", 1, 4096), ("ram", 512, 4194304)])
def test_ranges_of_cores_and_ram(admin, field, low, high):
    for value in (low, high):
        assert created(admin.post(N, node_body(**{field: value})))[field] == value
    before = count(admin)
    for value in (low - 1, high + 1, 2.0, "2"):
        assert field in refused(admin.post(N, node_body(**{field: value})), 400)
    assert count(admin) == before


@pytest.mark.parametrize("spec", [
    lambda size: {"kind": "root_disk", "image": IMAGE, "size": size},
    lambda size: {"kind": "disks", "disks": [{"size": 5, "image": IMAGE},
                                             {"size": size, "label": "data"}]},
])
def test_disk_size_range(admin, spec):
    for size in (1, 1000000):
        created(admin.post(N, node_body(disk_spec=spec(size))))
    before = count(admin)
    for size in (0, 1000001):
        assert "size: must be at" in refused(admin.post(N, node_body(disk_spec=spec(size))),
                                             400)
    assert count(admin) == before


@pytest.mark.parametrize("spec,words", [
    ({"kind": "root_disk"}, "disk_spec.image: required"),
    ({"kind": "root_disk", "image": IMAGE, "colour": 1}, "unknown field"),
    ({"kind": "floppy"}, "disk_spec.kind: must be one of"),
    ({"image": IMAGE}, "disk_spec.kind: required"),
    ({"kind": "root_disk", "image": IMAGE, "tier": "LUKEWARM"}, "tier"),
    ({"kind": "disks", "disks": [{"size": 5}]}, "disks[0].image: required"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE, "mount_point": "/data"}]},
     "root disk's must be /"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE}, {"size": 1}]},
     "disks[1].label: required"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE},
                                 {"size": 1, "label": "root-volume"}]}, "reserved"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE}, {"size": 1, "label": "a"},
                                 {"size": 1, "label": "a"}]}, "disks[2].label: a is used twice"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE},
                                 {"size": 1, "label": "a", "mount_point": "/d"},
                                 {"size": 1, "label": "b", "mount_point": "/d"}]},
     "disks[2].mount_point"),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE},
                                 {"size": 1, "label": "a", "fs": "ext4", "image": IMAGE}]},
     "fs or image, not both"),
    ({"kind": "root_disk", "image": "ftp://example.test/x.raw"}, "http(s) URL"),
    ({"kind": "root_disk", "image": "https:///no-host"}, "with a host"),
    ({"kind": "root_disk", "image": "http://[::1/x"}, "not a URL"),
])
def test_disk_spec_rules(admin, spec, words):
    before = count(admin)
    assert words in refused(admin.post(N, node_body(disk_spec=spec)), 400)
    assert count(admin) == before


def test_disks_kind_accepted_with_its_defaults(admin):
    spec = {"kind": "disks", "disks": [
        {"size": 5, "image": IMAGE, "mount_point": "/"},
        {"size": 2, "label": "data", "fs": "ext4", "mount_point": "/data"},
        {"size": 3, "label": "raw", "tier": "HOT", "ephemeral": False}]}
    node = created(admin.post(N, node_body(disk_spec=spec)))
    assert [(d["tier"], d["ephemeral"]) for d in node["disk_spec"]["disks"]] == [
        ("WARM", True), ("WARM", True), ("HOT", False)]
    # an empty list is the reference's too (no disks at all)
    created(admin.post(N, node_body(disk_spec={"kind": "disks", "disks": []})))


def test_file_images_are_for_administrators_only(admin, member):
    spec = {"kind": "root_disk", "image": "file:///var/lib/images/base.qcow2"}
    created(admin.post(N, node_body(disk_spec=spec)))
    before = len(member.client.get(N).json)
    assert "administrators" in refused(member.client.post(
        N, node_body(project_id=member.project, disk_spec=spec)), 403)
    mine = created(member.client.post(N, node_body(project_id=member.project)))
    assert "administrators" in refused(member.client.put(
        f"{N}/{mine['uuid']}", {"disk_spec": spec}), 403)
    assert len(member.client.get(N).json) == before + 1


def test_node_type_hw_has_no_disks_and_vm_needs_them(admin):
    hw = created(admin.post(N, node_body(node_type="HW", disk_spec=None)))
    assert "disk_spec" not in hw    # left out, as the reference's clients expect
    assert "HW node gets no disks" in refused(admin.post(N, node_body(node_type="HW")), 400)
    body = node_body()
    del body["disk_spec"]
    assert "required for node_type VM" in refused(admin.post(N, body), 400)


def test_hostname(admin):
    assert created(admin.post(N, node_body(hostname="web-1.example")))["hostname"] == \
        "web-1.example"
    for bad in ("bad_host", "-x", "a" * 64, "x" * 254):
        assert "hostname" in refused(admin.post(N, node_body(hostname=bad)), 400)


def test_put_resets_status_and_guards_the_disks(admin, server):
    node = created(admin.post(N, node_body()))
    server.store.collection("compute_nodes").update(node["uuid"], {"status": "ACTIVE"})
    put = admin.put(f"{N}/{node['uuid']}", {"cores": 2})
    assert put.status == 200 and put.json["status"] == "IN_PROGRESS" and put.json["cores"] == 2
    grown = {**node["disk_spec"], "size": 20, "image": IMAGE + "?v=2"}
    assert admin.put(f"{N}/{node['uuid']}", {"disk_spec": grown}).json["disk_spec"] == grown
    for change, words in [({"tier": "HOT"}, "Changing tier or ephemeral"),
                          ({"ephemeral": False}, "Changing tier or ephemeral"),
                          ({"size": 19}, "cannot shrink")]:
        assert words in refused(admin.put(f"{N}/{node['uuid']}",
                                          {"disk_spec": {**grown, **change}}), 400)
    for field, value in [("node_type", "HW"), ("project_id", ADMIN_PROJECT.replace("0", "1")),
                         ("status", "ACTIVE"), ("hypervisor", node["uuid"]),
                         ("network", node["uuid"]), ("power_state", "off")]:
        assert field in refused(admin.put(f"{N}/{node['uuid']}", {field: value}), 403)
    assert admin.get(f"{N}/{node['uuid']}").json["disk_spec"] == grown
    # what was read may be sent back as it is
    current = admin.get(f"{N}/{node['uuid']}").json
    assert admin.put(f"{N}/{node['uuid']}", current).status == 200


def test_placement_policies_of_the_project_only(admin, member, other):
    theirs = created(other.client.post(P, {"project_id": other.project}))
    mine = created(member.client.post(P, {"project_id": member.project,
                                          "kind": "hard-affinity"}))
    body = node_body(project_id=member.project)
    node = created(member.client.post(N, {**body, "placement_policies": [mine["uuid"]]}))
    assert node["placement_policies"] == [mine["uuid"]]
    for policies in ([theirs["uuid"]], [node["uuid"]], [mine["uuid"], mine["uuid"]]):
        assert "placement_policies" in refused(
            member.client.post(N, {**body, "placement_policies": policies}), 400)
    assert "placement_policies" in refused(member.client.put(
        f"{N}/{node['uuid']}", {"placement_policies": [theirs["uuid"]]}), 400)


def test_network_must_be_one_of_the_project(admin, member):
    theirs = created(admin.post("/v1/network/networks",
                                {"name": "n", "project_id": ADMIN_PROJECT}))
    mine = created(member.client.post("/v1/network/networks",
                                      {"name": "n", "project_id": member.project}))
    body = node_body(project_id=member.project)
    assert created(member.client.post(N, {**body, "network": mine["uuid"]}))["network"] == \
        mine["uuid"]
    for network in (theirs["uuid"], "6d1f1c55-1111-4a44-9999-000000000000"):
        assert "network" in refused(member.client.post(N, {**body, "network": network}), 400)


def test_power_and_reboot_actions(admin):
    node = created(admin.post(N, node_body()))
    act = f"{N}/{node['uuid']}/actions"
    off = admin.post(f"{act}/power_off/invoke", {})
    assert off.status == 200 and off.json["power_state"] == "off"
    assert "powered off" in refused(admin.post(f"{act}/reboot/invoke", {}), 409)
    assert admin.post(f"{act}/power_on/invoke").json["power_state"] == "on"
    rebooted = admin.post(f"{act}/reboot/invoke", {}).json
    assert rebooted["reboot_requested_at"] is not None
    assert admin.get(f"{act}/details").json == {"hypervisor": None}
    unknown = node["uuid"][:-1] + ("1" if node["uuid"].endswith("0") else "0")
    refused(admin.post(f"{N}/{unknown}/actions/power_on/invoke", {}), 404)


def test_private_key_is_a_stable_bare_string(admin, server):
    node = created(admin.post(N, node_body()))
    first = admin.get(f"{N}/{node['uuid']}/actions/get_private_key")
    assert first.status == 200 and isinstance(first.json, str) and len(first.json) == 44
    assert admin.get(f"{N}/{node['uuid']}/actions/get_private_key").json == first.json
    stored = server.store.collection("compute_nodes").get(node["uuid"])["agent_key"]
    assert first.json not in stored      # sealed at rest
    # a node recorded without the API gets its key on the first ask, and keeps it
    bare = server.store.collection("compute_nodes").insert(
        {**server.store.collection("compute_nodes").get(node["uuid"]), "uuid": None,
         "agent_key": None})
    url = f"{N}/{bare['uuid']}/actions/get_private_key"
    key = admin.get(url).json
    assert len(key) == 44 and key != first.json and admin.get(url).json == key


def test_console_serves_the_tail_of_the_serial_log(admin, server):
    node = created(admin.post(N, node_body()))
    url = f"{N}/{node['uuid']}/actions/console"
    assert admin.get(url).json == {"log": "", "offset": 0, "next_offset": 0, "size": 0,
                                   "reset": False}
    path = console_path(server.settings, node["uuid"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * CONSOLE_TAIL + b"\nlogin: \xff\n")
    log = admin.get(url).json["log"]
    assert len(log.encode()) <= CONSOLE_TAIL + 2 and log.endswith("login: \ufffd\n")


def test_console_is_followed_by_offset(admin, server):
    """A client follows the log by asking from the last answer's next_offset; each
    answer carries at most CONSOLE_TAIL bytes, and never half a UTF-8 character."""
    node = created(admin.post(N, node_body()))
    url = f"{N}/{node['uuid']}/actions/console"
    path = console_path(server.settings, node["uuid"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # a 3-byte character across the first chunk's end
    first = b"a" * (CONSOLE_TAIL - 1) + "\u20ac".encode() + b"boot\n"
    with open(path, "wb") as f:
        f.write(first)
    seen, offset = b"", 0
    while True:
        answer = admin.get(url, query={"offset": offset}).json
        assert answer["offset"] == offset and answer["reset"] is False
        assert answer["next_offset"] - offset <= CONSOLE_TAIL
        seen += answer["log"].encode()
        if answer["next_offset"] == offset:
            break
        offset = answer["next_offset"]
    assert seen == first and offset == len(first)
    with open(path, "ab") as f:
        f.write(b"login: \n")
    more = admin.get(url, query={"offset": offset}).json
    assert more["log"] == "login: \n" and more["next_offset"] == len(first) + 8
    # the node's log started anew (shorter than the follower's offset)
    with open(path, "wb") as f:
        f.write(b"second boot\n")
    again = admin.get(url, query={"offset": more["next_offset"]}).json
    assert again == {"log": "second boot\n", "offset": 0, "next_offset": 12, "size": 12,
                     "reset": True}


@pytest.mark.parametrize("offset", ["-1", "x", "1.5", "99999999999999999999", "\u00b2"])
def test_console_offset_must_be_a_byte_count(admin, offset):
    node = created(admin.post(N, node_body()))
    resp = admin.get(f"{N}/{node['uuid']}/actions/console", query={"offset": offset})
    refused(resp, 400)
    assert resp.json["message"].startswith("offset:")


def test_delete_detaches_volumes_then_404(admin):
    node = created(admin.post(N, node_body()))
    volume = created(admin.post(V, {"project_id": ADMIN_PROJECT, "size": 1,
                                    "node": node["uuid"]}))
    assert volume["node"] == f"{N}/{node['uuid']}"
    assert admin.delete(f"{N}/{node['uuid']}").status == 204
    refused(admin.delete(f"{N}/{node['uuid']}"), 404)
    assert admin.get(f"{V}/{volume['uuid']}").json["node"] is None


def test_a_project_member_sees_and_writes_its_project_only(admin, server, member, other):
    mine = created(member.client.post(N, node_body(project_id=member.project)))
    theirs = created(other.client.post(N, node_body(project_id=other.project)))
    listed = {n["uuid"] for n in member.client.get(N).json}
    assert mine["uuid"] in listed and theirs["uuid"] not in listed
    for method in ("get", "delete"):
        refused(getattr(member.client, method)(f"{N}/{theirs['uuid']}"), 404)
    refused(member.client.put(f"{N}/{theirs['uuid']}", {"cores": 2}), 404)
    refused(member.client.post(f"{N}/{theirs['uuid']}/actions/power_off/invoke", {}), 404)
    refused(member.client.post(N, node_body(project_id=other.project)), 403)
    # a token without a project sees every node of the projects it may read
    assert {mine["uuid"], theirs["uuid"]} <= {n["uuid"] for n in admin.get(N).json}


def test_a_reader_reads_but_does_not_write(server, admin, member):
    reader = Member(server, admin, role="reader")
    node = created(admin.post(N, node_body(project_id=reader.project)))
    assert reader.client.get(f"{N}/{node['uuid']}").status == 200
    refused(reader.client.post(N, node_body(project_id=reader.project)), 403)
    refused(reader.client.post(f"{N}/{node['uuid']}/actions/power_off/invoke", {}), 403)
    refused(reader.client.get(f"{N}/{node['uuid']}/actions/console"), 403)
    refused(reader.client.get(f"{N}/{node['uuid']}/actions/get_private_key"), 403)


def test_filters_by_reference_and_status(admin):
    node = created(admin.post(N, node_body()))
    found = admin.get(N, query={"status": "NEW", "name": node["name"]}).json
    assert [n["uuid"] for n in found] == [node["uuid"]]
    refused(admin.get(N, query={"status": "SLEEPING"}), 400)


def test_images_named_by_repository_artifacts(admin, server, member, other):
    """An image may be a repository artifact of category images, by its path: one of the
    caller's project or of a shared repository (admin project); nothing else."""
    artifacts = server.store.collection("repo_artifacts")

    def artifact(project, category):
        return artifacts.insert({"element": None, "project_id": project,
                                 "urn": f"{category}:{os.urandom(4).hex()}",
                                 "uri": "https://images.example.test/a.raw.gz"})

    mine = artifact(member.project, "images")
    shared = artifact(ADMIN_PROJECT, "images")
    theirs = artifact(other.project, "images")
    manifest = artifact(member.project, "manifests")

    def spec(record_or_path):
        image = record_or_path if isinstance(record_or_path, str) else \
            f"/v1/repo/artifacts/{record_or_path['uuid']}"
        return {"kind": "root_disk", "image": image}

    for record in (mine, shared):
        node = created(member.client.post(N, node_body(project_id=member.project,
                                                       disk_spec=spec(record))))
        assert node["disk_spec"]["image"] == f"/v1/repo/artifacts/{record['uuid']}"
    before = len(member.client.get(N).json)
    for record, says in ((theirs, "no repository artifact"),
                         ("/v1/repo/artifacts/6d1f1c55-1111-4a44-9999-000000000000",
                          "no repository artifact"),
                         (manifest, "not an images artifact")):
        assert says in refused(member.client.post(
            N, node_body(project_id=member.project, disk_spec=spec(record))), 400)
    assert says in refused(member.client.put(f"{N}/{node['uuid']}",
                                             {"disk_spec": spec(manifest)}), 400)
    assert len(member.client.get(N).json) == before
    # the platform may boot any project's image artifact
    created(admin.post(N, node_body(disk_spec=spec(theirs))))


def test_console_offset_is_in_openapi(server):
    op = server.client().get("/v1/openapi.json").json["paths"][
        "/v1/compute/nodes/{uuid}/actions/console"]["get"]
    assert op["x-permission"] == "compute.node.console"
    offset = next(p for p in op["parameters"] if p["name"] == "offset")
    assert offset["in"] == "query" and offset["schema"]["minimum"] == 0
    assert "next_offset" in op["responses"]["200"]["content"]["application/json"]["schema"][
        "properties"]
