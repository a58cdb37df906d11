"""`appliance compute ...` against the real API. No compute daemon runs here: where a
command waits, the test moves the record's status in the store, as the daemon would."""

from __future__ import annotations

import os
import re
import threading
import time

from appliance.compute.resources import console_path

from .conftest import ADMIN_PROJECT

IMAGE = "https://images.example.test/base.qcow2"
NODES = "/v1/compute/nodes/"


def add_node(cli, *extra):
    result = cli("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE, *extra)
    assert result.code == 0, result.stderr
    return result.json()


def later(store_kind, uuid, *moves, pause=0.5):
    """A thread that plays the daemon: writes each (status, reason) after a pause."""
    def run():
        for status, reason in moves:
            time.sleep(pause)
            store_kind.update(uuid, {"status": status, "status_reason": reason})
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_nodes_add_sends_the_reference_shape_and_lists(logged_in):
    node = add_node(logged_in, "-n", "web", "-c", "2", "-r", "2048", "-d", "20",
                    "--hostname", "web-a")
    sent = logged_in.transport.to(NODES)[-1]
    assert sent.method == "POST" and sent.body == {
        "name": "web", "project_id": ADMIN_PROJECT, "cores": 2, "ram": 2048,
        "hostname": "web-a", "disk_spec": {"kind": "root_disk", "image": IMAGE, "size": 20}}
    assert node["status"] == "NEW"
    listed = logged_in("compute", "nodes", "list")
    assert listed.code == 0 and "web" in listed.stdout and node["uuid"] in listed.stdout
    shown = logged_in("--json", "compute", "nodes", "show", "web")
    assert shown.json()["uuid"] == node["uuid"]
    # the reference's defaults: 1 core, 1024 MB
    plain = add_node(logged_in, "-n", "plain")
    assert (plain["cores"], plain["ram"]) == (1, 1024)


def test_update_resends_the_whole_disk_spec_with_the_root_changed(logged_in):
    spec = ('disk_spec:={"kind": "disks", "disks": [{"size": 5, "image": "%s"}, '
            '{"size": 1, "label": "data", "fs": "ext4"}]}' % IMAGE)
    node = logged_in("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-n", "multi",
                     spec).json()
    image2 = IMAGE.replace("base", "base-2")
    result = logged_in("--json", "compute", "nodes", "update", "multi", "-i", image2, "-d", "6")
    assert result.code == 0, result.stderr
    disks = result.json()["disk_spec"]["disks"]
    assert (disks[0]["image"], disks[0]["size"]) == (image2, 6)
    assert disks[1]["label"] == "data"
    assert result.json()["status"] == "IN_PROGRESS"
    refused = logged_in("compute", "nodes", "update", node["uuid"], "-d", "1")
    assert refused.code == 1 and "cannot shrink" in refused.stderr
    nothing = logged_in("compute", "nodes", "update", node["uuid"])
    assert nothing.code == 2 and "nothing to update" in nothing.stderr


def test_power_actions_and_console(logged_in, real_api):
    node = add_node(logged_in, "-n", "pw")
    off = logged_in("--json", "compute", "nodes", "power-off", "pw")
    assert off.code == 0 and off.json()["power_state"] == "off"
    reboot = logged_in("compute", "nodes", "reboot", "pw")
    assert reboot.code == 1 and "powered off" in reboot.stderr
    assert logged_in("--json", "compute", "nodes", "power-on", "pw").json()[
        "power_state"] == "on"
    assert logged_in("--json", "compute", "nodes", "reboot", node["uuid"]).json()[
        "reboot_requested_at"]
    path = console_path(real_api.settings, node["uuid"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("cloud-init: ready 10.20.0.20\n")
    console = logged_in("compute", "nodes", "console", "pw")
    assert console.code == 0 and console.stdout == "cloud-init: ready 10.20.0.20\n"


def test_console_follow_prints_what_is_new(logged_in, real_api):
    node = add_node(logged_in, "-n", "follow")
    path = console_path(real_api.settings, node["uuid"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("booting\n")
    waits = []

    def node_writes_then_user_interrupts(seconds):
        # between the CLI's asks: the node writes a line, then the user presses Ctrl-C
        waits.append(seconds)
        if len(waits) == 1:
            with open(path, "a") as f:
                f.write("login: \n")
        elif len(waits) == 3:
            raise KeyboardInterrupt
    logged_in.sleep = node_writes_then_user_interrupts
    logged_in.sent.clear()
    followed = logged_in("compute", "nodes", "console", "follow", "-f", "--interval", "0.5")
    assert followed.code == 0 and followed.stdout == "booting\nlogin: \n"
    assert waits == [0.5, 0.5, 0.5]
    asks = [s for s in logged_in.sent if s.path.endswith("/actions/console")]
    assert [s.query for s in asks] == [[], [("offset", "8")], [("offset", "16")]]


def test_wait_prints_each_status_and_ends_at_active(logged_in, real_api):
    nodes = real_api.store.collection("compute_nodes")
    # the node is made by the CLI; the daemon's part starts once it exists
    found = threading.Event()

    def daemon():
        while not found.is_set():
            for record in nodes.find(name="waited"):
                found.set()
                later(nodes, record["uuid"], ("SCHEDULED", None), ("IN_PROGRESS", None),
                      ("ACTIVE", None), pause=0.3).join()
            time.sleep(0.05)
    thread = threading.Thread(target=daemon, daemon=True)
    thread.start()
    result = logged_in("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-i", IMAGE,
                       "-n", "waited", "--wait", "--wait-timeout", "60")
    thread.join(5)
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ACTIVE"
    lines = result.stderr.splitlines()
    assert lines[0].startswith("waiting up to 60 s for the compute daemon")
    seen = [line.split(": ")[1].split(" ")[0] for line in lines[1:]]
    assert seen[-1] == "ACTIVE" and seen == sorted(set(seen), key=seen.index)
    assert set(seen) <= {"NEW", "SCHEDULED", "IN_PROGRESS", "ACTIVE"}


def test_wait_ends_non_zero_on_error_and_on_timeout(logged_in, real_api):
    nodes = real_api.store.collection("compute_nodes")
    node = add_node(logged_in, "-n", "doomed")
    later(nodes, node["uuid"], ("ERROR", "no hypervisor has 1 free core"))
    result = logged_in("compute", "nodes", "show", "doomed", "--wait")
    assert result.code == 1
    assert "ERROR: no hypervisor has 1 free core" in result.stderr
    stuck = logged_in("compute", "nodes", "show", add_node(logged_in)["uuid"], "--wait",
                      "--wait-timeout", "0.5")
    assert stuck.code == 1 and "still NEW after 0.5 s" in stuck.stderr


def test_an_image_path_is_sent_as_a_file_url(logged_in, tmp_path):
    disk = tmp_path / "disk.raw"
    disk.write_bytes(b"\0" * 512)
    made = logged_in("--json", "compute", "nodes", "add", "-p", ADMIN_PROJECT, "-n", "local",
                     "-i", str(disk))
    assert made.code == 0, made.stderr
    assert made.json()["disk_spec"]["image"] == disk.as_uri()
    sent = len(logged_in.sent)
    missing = logged_in("compute", "nodes", "add", "-p", ADMIN_PROJECT, "-n", "gone",
                        "-i", str(tmp_path / "nowhere.raw"))
    assert missing.code == 2 and "no such file" in missing.stderr
    assert len(logged_in.sent) == sent        # a usage error sends nothing
    assert logged_in("compute", "nodes", "delete", "local").code == 0


def test_volumes_attach_and_detach(logged_in):
    add_node(logged_in, "-n", "holder")
    volume = logged_in("--json", "compute", "volumes", "add", "-p", ADMIN_PROJECT, "-n",
                       "data", "--size", "2")
    assert volume.code == 0, volume.stderr
    attached = logged_in("--json", "compute", "volumes", "attach", "data", "holder")
    assert attached.code == 0, attached.stderr
    assert attached.json()["node"].startswith(NODES)
    again = logged_in("compute", "volumes", "attach", "data", "holder")
    assert again.code == 1 and "Volume is already attached to a node" in again.stderr
    busy = logged_in("compute", "volumes", "delete", "data")
    assert busy.code == 1 and "detach it first" in busy.stderr
    assert logged_in("--json", "compute", "volumes", "detach", "data").json()["node"] is None
    assert logged_in("compute", "volumes", "delete", "data").code == 0


def test_hypervisors_sets_and_policies(logged_in):
    hyper = logged_in("--json", "compute", "hypervisors", "add", "-n", "local",
                      "--uri", "test:///default")
    assert hyper.code == 0, hyper.stderr
    assert hyper.json()["driver_spec"]["storage_pool"] == "default"
    dup = logged_in("compute", "hypervisors", "add", "--uri", "test:///default")
    assert dup.code == 1
    # the pool that test:///default has, and overcommit: the rest of driver_spec is kept
    pooled = logged_in("--json", "compute", "hypervisors", "update", "local",
                       "--storage-pool", "default-pool", "--ram-ratio", "4")
    assert pooled.code == 0, pooled.stderr
    assert pooled.json()["driver_spec"]["connection_uri"] == "test:///default"
    assert pooled.json()["driver_spec"]["storage_pool"] == "default-pool"
    assert (pooled.json()["ram_ratio"], pooled.json()["cores_ratio"]) == (4.0, 1.0)
    joined = logged_in("--json", "compute", "hypervisors", "update", "local",
                       "--underlay-address", "198.51.100.20")
    assert joined.code == 0, joined.stderr
    assert joined.json()["driver_spec"]["underlay_address"] == "198.51.100.20"
    assert joined.json()["driver_spec"]["storage_pool"] == "default-pool"
    refused = logged_in("compute", "hypervisors", "update", "local",
                        "--underlay-address", "127.0.0.1")
    assert refused.code == 1 and "loopback" in refused.stderr
    # a remote one: its pinned host key and where QEMU reaches it, as options
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ"
    remote = logged_in("--json", "compute", "hypervisors", "add", "-n", "remote",
                       "--uri", "qemu+ssh://root@192.0.2.10/system", "--host-key", key,
                       "--migration-address", "192.0.2.10")
    assert remote.code == 0, remote.stderr
    assert {k: remote.json()["driver_spec"][k] for k in (
        "connection_uri", "host_key", "migration_address")} == {
        "connection_uri": "qemu+ssh://root@192.0.2.10/system", "host_key": key,
        "migration_address": "192.0.2.10"}
    unpinned = logged_in("compute", "hypervisors", "add", "-n", "unpinned",
                         "--uri", "qemu+ssh://root@192.0.2.11/system")
    assert unpinned.code == 1 and "ssh-keyscan" in unpinned.stderr
    assert logged_in("compute", "hypervisors", "delete", "remote").code == 0
    policy = logged_in("--json", "compute", "placement-policies", "add", "-p", ADMIN_PROJECT,
                       "-n", "spread", "--kind", "hard-anti-affinity")
    assert policy.code == 0 and policy.json()["kind"] == "hard-anti-affinity"
    made = logged_in("--json", "compute", "sets", "add", "-p", ADMIN_PROJECT, "-n", "web",
                     "-i", IMAGE, "--replicas", "3",
                     f"placement_policies:=[\"{policy.json()['uuid']}\"]")
    assert made.code == 0, made.stderr
    assert made.json()["replicas"] == 3
    scaled = logged_in("--json", "compute", "sets", "update", "web", "--replicas", "1")
    assert scaled.json()["replicas"] == 1
    assert logged_in("compute", "sets", "delete", "web").code == 0
    assert logged_in("compute", "placement-policies", "delete", "spread").code == 0
    assert logged_in("compute", "hypervisors", "delete", "local").code == 0
    gone = logged_in("compute", "hypervisors", "show", "local")
    assert gone.code == 1 and "no name 'local'" in gone.stderr


def test_hypervisors_show_prints_the_acceleration_and_why(logged_in, real_api):
    made = logged_in("--json", "compute", "hypervisors", "add", "-n", "probed",
                     "--uri", "qemu:///nowhere")
    assert made.code == 0, made.stderr
    assert (made.json()["accel"], made.json()["accel_reason"]) == (None, None)
    why = "the kvm guest failed: could not access KVM kernel module"
    # what the compute daemon writes after its probe (no daemon runs here)
    real_api.store.collection("compute_hypervisors").update(
        made.json()["uuid"], {"accel": "tcg", "accel_reason": why})
    shown = logged_in("compute", "hypervisors", "show", "probed")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(re.fullmatch(r"accel\s+tcg", line) for line in lines), shown.stdout
    assert any(re.fullmatch(r"accel_reason\s+" + re.escape(why), line) for line in lines), \
        shown.stdout
    # read only: the daemon's to write
    refused = logged_in("compute", "hypervisors", "update", "probed", "accel_reason=mine")
    assert refused.code == 1 and "accel_reason" in refused.stderr
    assert logged_in("compute", "hypervisors", "delete", "probed").code == 0


def test_migrate_names_the_target_and_waits_for_the_move(logged_in, real_api):
    """`nodes migrate NODE --hypervisor H --wait`: the action's body, then the move's
    progress until done; a move the daemon refuses ends non-zero with its reason. No
    daemon here: the test writes the hypervisors' state and the move as the daemon does."""
    hvs = real_api.store.collection("compute_hypervisors")
    for hv in hvs.records():
        hvs.update(hv["uuid"], {"status": "ERROR", "status_reason": "not this test's"})
    made = []
    for name in ("mig-a", "mig-b"):
        result = logged_in("--json", "compute", "hypervisors", "add", "-n", name, "--uri",
                           f"test:///default?{name}", "--storage-pool", "default-pool")
        assert result.code == 0, result.stderr
        made.append(hvs.update(result.json()["uuid"], {
            "status": "ACTIVE", "all_cores": 8, "all_ram": 8192, "all_disk": 100,
            "accel": "tcg", "arch": "x86_64"}))
    node = add_node(logged_in, "-n", "mover")
    nodes = real_api.store.collection("compute_nodes")
    nodes.update(node["uuid"], {"status": "ACTIVE", "hypervisor": made[0]["uuid"]})

    def daemon(final, reason=None):
        def run():
            for _ in range(200):
                current = nodes.get(node["uuid"])
                if (current.get("migration") or {}).get("state") == "requested":
                    break
                time.sleep(0.05)
            for fields in ({"state": "running", "progress": 0},
                           {"state": "running", "progress": 60},
                           {"state": final, "reason": reason,
                            "progress": 100 if final == "done" else 60}):
                time.sleep(0.3)
                current = nodes.get(node["uuid"])
                nodes.update(node["uuid"], {"migration": {**current["migration"], **fields}})
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    thread = daemon("refused", "libvirt: this function is not supported")
    refused = logged_in("compute", "nodes", "migrate", "mover", "--hypervisor", "mig-b",
                        "--wait", "--wait-timeout", "60")
    thread.join(5)
    assert refused.code == 1
    assert "not moved (refused): libvirt: this function is not supported" in refused.stderr
    sent = [s for s in logged_in.sent if s.path.endswith("/actions/migrate/invoke")]
    assert sent[-1].body == {"hypervisor": made[1]["uuid"]}

    thread = daemon("done")
    moved = logged_in("--json", "compute", "nodes", "migrate", "mover", "--wait",
                      "--wait-timeout", "60")
    thread.join(5)
    assert moved.code == 0, moved.stderr
    assert moved.json()["migration"]["state"] == "done"
    # placement picked the only other ACTIVE hypervisor; the progress was printed
    assert [s.body for s in logged_in.sent if s.path.endswith("/actions/migrate/invoke")][
        -1] == {}
    assert "running 60%" in moved.stderr and "done" in moved.stderr.splitlines()[-1]
    # a target that does not resolve: the CLI says so and asks for no move
    asked = len([s for s in logged_in.sent if s.path.endswith("/migrate/invoke")])
    again = logged_in("compute", "nodes", "migrate", "mover", "--hypervisor", "nonesuch")
    assert again.code == 1 and "nonesuch" in again.stderr
    assert len([s for s in logged_in.sent if s.path.endswith("/migrate/invoke")]) == asked
