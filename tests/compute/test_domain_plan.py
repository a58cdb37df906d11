"""`plan_node` (appliance/compute/domains.py) as a pure function: a node's record, its
volumes and what libvirt holds (its XML) in, the actions out. No libvirt, no store: the
domain XML is the one domain_xml.build writes, as the executor would have defined it."""

from appliance.compute import domain_xml
from appliance.compute.domains import Action, Held, fingerprint, plan_node
from appliance.compute.volumes import disk_name, volume_devices, volume_name

PREFIX = "vm-"
UUID = "11111111-2222-3333-4444-555555555555"
IMAGE = "http://127.0.0.1:8080/base.raw"
BUILD = ["status", "step", "images", "step", "disks", "step", "seed", "step"]


def node(**changes):
    record = {"uuid": UUID, "revision": 7, "name": "n1", "cores": 1, "ram": 512,
              "status": "ACTIVE", "power_state": "on", "reboot_requested_at": None,
              "disk_spec": {"kind": "root_disk", "image": IMAGE, "size": 10}}
    record.update(changes)
    return record


def xml(cores=1, ram=512, image=IMAGE, reboot=None, volumes=(), seed=True, accel=None):
    disks = [{"path": "/pool/" + disk_name(PREFIX, UUID, 0), "dev": "vda"}]
    disks += [{"path": "/pool/" + volume_name(v), "dev": "vd" + "bcd"[i]}
              for i, v in enumerate(volumes)]
    if seed:
        disks.append({"path": f"/pool/{PREFIX}{UUID}-seed.iso", "dev": "hdc",
                      "device": "cdrom", "format": "raw"})
    return domain_xml.build({"uuid": UUID, "name": "n1", "cores": cores, "ram": ram},
                            PREFIX + UUID, accel, disks, {"mac": "52:54:00:00:00:01"}, "net",
                            "/console.log", image=image, reboot=reboot)


def held(running=True, **xml_args):
    text = xml(**xml_args)
    return Held(running=running, live_xml=text, persistent_xml=text, seed_on_disk=True)


def verbs(actions):
    return [a.verb for a in actions]


def test_a_new_node_is_built_defined_started_and_made_active():
    actions = plan_node(node(status="SCHEDULED"), [], Held(), PREFIX)
    assert verbs(actions) == BUILD + ["define", "step", "start", "step", "active"]
    assert Action("status", "IN_PROGRESS") in actions
    assert Action("images", [IMAGE]) in actions
    assert [a.arg for a in actions if a.verb == "step"] == [
        "images", "disks", "seed", "define", "start", "active"]
    assert actions[-1] == Action("active", True)


def test_a_new_node_honours_the_reboot_it_was_born_after():
    actions = plan_node(node(status="SCHEDULED", reboot_requested_at="T1"), [], Held(), PREFIX)
    assert Action("define", "T1") in actions
    assert "reboot" not in verbs(actions) and "mark_reboot" not in verbs(actions)


def test_a_node_powered_off_is_defined_but_not_started():
    actions = plan_node(node(status="SCHEDULED", power_state="off"), [], Held(), PREFIX)
    assert "start" not in verbs(actions) and "restart" not in verbs(actions)
    assert actions[-1] == Action("active", False)


def test_a_remembered_node_needs_nothing():
    record = node()
    remembered = fingerprint(record, [], True)
    assert plan_node(record, [], held(), PREFIX, remembered) == []


def test_a_restarted_daemon_remembers_a_domain_in_place_without_redefining():
    assert plan_node(node(), [], held(), PREFIX) == [Action("remember", True)]


OUTAGE = {"status": "ERROR", "status_reason": "hypervisor hv2 (u) is unreachable: ssh: "
          "connect to host 10.99.0.2 port 22: No route to host"}


def test_a_node_back_from_its_hypervisors_outage_is_active_without_a_rebuild():
    # the domain ran on while the hypervisor was away: only the status is written
    assert plan_node(node(**OUTAGE), [], held(), PREFIX) == [Action("active", True)]
    assert plan_node(node(power_state="off", **OUTAGE), [], held(running=False), PREFIX) \
        == [Action("active", False)]


def test_a_node_back_from_an_outage_is_built_again_only_where_its_domain_needs_it():
    # the domain stopped meanwhile: started again (it was running), not rebuilt
    stopped = plan_node(node(**OUTAGE), [], held(running=False), PREFIX, was_running=True)
    assert "restart" in verbs(stopped) and "replace_root" not in verbs(stopped)
    # the domain is gone (the host was reinstalled): built anew
    gone = plan_node(node(**OUTAGE), [], Held(), PREFIX)
    assert verbs(gone) == BUILD + ["define", "step", "start", "step", "active"]
    # another ERROR (not the hypervisor's) is no shortcut
    other = node(status="ERROR", status_reason="image http://x: HTTP 404 Not Found")
    assert plan_node(other, [], held(), PREFIX) != [Action("active", True)]


def test_a_missing_seed_file_is_not_in_place():
    state = held()._replace(seed_on_disk=False)
    assert "define" in verbs(plan_node(node(), [], state, PREFIX))


def test_a_new_revision_redefines_and_hotplugs_a_running_domain():
    vol = {"uuid": "99999999-0000-0000-0000-000000000001"}
    actions = plan_node(node(revision=8), [vol], held(), PREFIX,
                        fingerprint(node(), [], True), accel="tcg")
    assert verbs(actions) == ["step", "images", "step", "disks", "step", "seed", "step",
                              "hotplug", "define", "step", "step", "active"]
    assert Action("define", None) in actions


def test_a_driver_other_than_qemu_gets_the_change_by_its_definition_alone():
    """libvirt 11's test driver (accel None) attaches live without the config flag and has
    no detach: the redefinition carries the change to the next start."""
    vol = {"uuid": "99999999-0000-0000-0000-000000000001"}
    actions = plan_node(node(revision=8), [vol], held(), PREFIX,
                        fingerprint(node(), [], True), accel=None)
    assert "hotplug" not in verbs(actions) and Action("define", None) in actions


def test_power_off_comes_first_and_the_domain_stays_defined():
    actions = plan_node(node(power_state="off"), [], held(), PREFIX, accel="tcg")
    assert actions[0] == Action("power_off")
    assert "hotplug" not in verbs(actions) and "start" not in verbs(actions)
    assert actions[-1] == Action("active", False)


def test_an_image_change_replaces_the_root_disk_and_starts_again():
    actions = plan_node(node(disk_spec={"kind": "root_disk", "image": "http://x/new.raw"}),
                        [], held(), PREFIX, accel="tcg")
    assert actions[0] == Action("status", "IN_PROGRESS")
    assert Action("replace_root", "http://x/new.raw") in actions
    assert "hotplug" not in verbs(actions)      # the domain was stopped for it
    assert verbs(actions).index("replace_root") < verbs(actions).index("disks")
    assert "start" in verbs(actions)


def test_a_shape_change_restarts_the_domain_with_the_new_definition():
    actions = plan_node(node(cores=2), [], held(), PREFIX, accel="tcg")
    assert verbs(actions)[verbs(actions).index("hotplug"):] == [
        "hotplug", "restart_for_shape", "define", "step", "start", "step", "active"]
    assert "status" not in verbs(actions)       # the image is the same: no IN_PROGRESS


def test_a_domain_of_the_wrong_type_is_redefined_without_a_restart():
    """A daemon restarted after KVM came (or went) finds domains of the other type: each
    is redefined for the hypervisor's accel, and runs on until its next start."""
    for held_accel, accel, want in ((None, "kvm", "kvm"), ("kvm", "tcg", "qemu"),
                                    ("kvm", None, "qemu")):
        actions = plan_node(node(), [], held(accel=held_accel), PREFIX, accel=accel)
        assert "define" in verbs(actions), (held_accel, accel)
        assert not {"status", "restart_for_shape", "start", "restart",
                    "power_off"} & set(verbs(actions)), actions
        assert actions[-1] == Action("active", True)
        assert domain_xml.type_of(xml(accel=accel)) == want
    # the type it should have: nothing to redefine
    assert plan_node(node(), [], held(accel="kvm"), PREFIX, accel="kvm") == [
        Action("remember", True)]
    assert plan_node(node(), [], held(accel="tcg"), PREFIX, accel=None) == [
        Action("remember", True)]


def test_a_reboot_request_is_honoured_once_and_marked():
    actions = plan_node(node(reboot_requested_at="T2"), [], held(reboot="T1"), PREFIX)
    assert Action("define", "T1") in actions    # the mark moves only once it is done
    assert actions[-4:] == [Action("reboot", "T2"), Action("mark_reboot", "T2"),
                            Action("step", "active"), Action("active", True)]
    # the same request, honoured: nothing left to do
    assert plan_node(node(reboot_requested_at="T2"), [], held(reboot="T2"), PREFIX) == [
        Action("remember", True)]


def test_a_domain_stopped_on_its_own_is_restarted_and_counted():
    actions = plan_node(node(), [], held(running=False), PREFIX, was_running=True)
    assert "restart" in verbs(actions) and "start" not in verbs(actions)
    first = plan_node(node(), [], held(running=False), PREFIX, was_running=False)
    assert "start" in verbs(first) and "restart" not in verbs(first)


def test_a_stopped_domain_with_a_pending_reboot_boots_fresh_and_marks_it():
    actions = plan_node(node(reboot_requested_at="T2"), [], held(running=False), PREFIX)
    assert "reboot" not in verbs(actions)
    assert verbs(actions)[-4:] == ["start", "mark_reboot", "step", "active"]


def test_the_plan_is_pure():
    record, state = node(cores=2, reboot_requested_at="T2"), held()
    before = (dict(record), state)
    assert plan_node(record, [], state, PREFIX) == plan_node(record, [], state, PREFIX)
    assert (record, state) == before


def test_attached_volumes_keep_their_devices_and_new_ones_take_the_first_free():
    current = {"/p/a": "vdc", "/p/root": "vda"}
    placed = volume_devices([("a" * 36, "/p/a"), ("b" * 36, "/p/b")], current, {"vda"})
    assert [(d["path"], d["dev"]) for d in placed] == [("/p/a", "vdc"), ("/p/b", "vdb")]
    assert placed[0]["serial"] == "a" * 20 and placed[1]["format"] == "qcow2"
