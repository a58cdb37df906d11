"""Issue 31's second hypervisor, for real: the appliance in one network namespace
(tests/compute/tcg.py) and a second machine in another, with its own libvirtd and an sshd,
joined by a veth pair; the second is registered through the API as
`qemu+ssh://root@10.99.0.2/system` with its host key pinned, and reached with the key
the appliance made (appliance/compute/remote.py). Both hypervisors are on the underlay (the
veth), so the set spread over them has its network across both (a VXLAN, docs/network.md).

Root only; skips with the reason where the namespaces, libvirt or sshd are missing. No OS
is booted: a node is ACTIVE once its domain runs, which is all placement and the
hypervisor's loss and return need, so the set's nodes boot a boot sector under TCG that
writes a line to its serial port every second (SERIAL), which their consoles show.
"""

import faulthandler
import struct
import xml.etree.ElementTree as ET

import libvirt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from appliance.network import netxml
from tests.compute import tcg
from tests.compute.netns import sshd_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

H, SETS = "/v1/compute/hypervisors", "/v1/compute/sets"
WAIT = 300      # a bound on a hang: a pass every 30 s, ssh gives up on a silent host in ~15 s


@pytest.fixture(autouse=True)
def no_stack_dumps():
    # the suite dumps stacks after 45 s (to catch a hung request); these waits take longer
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def env(tmp_path_factory, request):
    # the module's fixtures (image build, boots) run in its first test's set-up, before
    # the function-scoped no_stack_dumps: the suite's 45 s stack dump is off from here
    faulthandler.cancel_dump_traceback_later()
    reason = tcg.missing() or sshd_unavailable()
    if reason:
        pytest.skip(reason)
    # the run's appliance in its namespace and its second machine (conftest.py's session
    # fixtures), shared with test_e2e_tcg.py and test_sqldb_on_vms.py
    env = request.getfixturevalue("tcg_env")
    request.getfixturevalue("tcg_second")
    env.image = str(boot_sector(tmp_path_factory.mktemp("two-hv") / "serial.raw", SERIAL))
    env.cleanup = []
    try:
        yield env
    finally:
        # what this module made goes, so the shared appliance is as it was
        for path in reversed(env.cleanup):
            env.admin.delete(path)


# sti; cld; loop: xor ax,ax; mov ds,ax; mov si,0x7c00+line; next: lodsb; test al,al;
# jz wait; mov dx,0x3f8; out dx,al; jmp next; wait: mov ah,0x86; mov cx,0x000f;
# mov dx,0x4240; int 0x15 (the BIOS waits 1 s); jmp loop; line: SERIAL_LINE, 0
SERIAL_LINE = "APPLIANCE-SERIAL-LINE"
SERIAL = bytes.fromhex("fbfc31c08ed8be207cac84c07406baf803eeebf5b486b90f00ba4042cd15ebe0") \
    + SERIAL_LINE.encode() + b"\r\n\0"


def boot_sector(path, code):
    """A 1 MiB raw disk whose boot sector is `code`."""
    path.write_bytes(code + b"\x00" * (510 - len(code)) + b"\x55\xaa" + b"\x00" * (1 << 20))
    return path


def hypervisor(env, hv_uuid):
    return env.ok(env.admin.get(f"{H}/{hv_uuid}"))


def wait_status(env, path, status, what, timeout=WAIT):
    def reached():
        rec = env.ok(env.admin.get(path))
        return rec if rec["status"] == status else None
    return env.wait(what, reached, timeout)


@pytest.fixture(scope="module")
def hv2(env, tcg_hv2):
    # registered once for the run (conftest.py), both hypervisors on the underlay
    return tcg_hv2


def test_a_wrong_host_key_is_error_saying_so(env):
    second = env.second
    impostor = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    # the same host by another spelling of its URI (one URI is registered once)
    hv = env.ok(env.admin.post(H, {"name": "wrong-key", "driver_spec": {
        "kind": "libvirt", "connection_uri": f"qemu+ssh://root@{second.ADDRESS}:22/system",
        "host_key": impostor}}), 201)
    env.cleanup.append(f"{H}/{hv['uuid']}")
    rec = wait_status(env, f"{H}/{hv['uuid']}", "ERROR", "the wrong-key hypervisor ERROR")
    assert f"host key of {second.ADDRESS} does not match driver_spec.host_key" in \
        rec["status_reason"]
    assert "Host key verification failed" in rec["status_reason"]
    assert rec["all_cores"] is None or rec["all_cores"] == 0
    env.ok(env.admin.delete(f"{H}/{hv['uuid']}"), 204)


def test_a_host_that_refuses_the_appliances_key_is_error_saying_to_install_it(env):
    second = env.second
    # no such user there: sshd refuses every key, as for a user whose authorized_keys
    # lacks the appliance's
    hv = env.ok(env.admin.post(H, {"name": "no-key", "driver_spec": {
        "kind": "libvirt", "connection_uri": f"qemu+ssh://ghost@{second.ADDRESS}/system",
        "host_key": second.host_key}}), 201)
    env.cleanup.append(f"{H}/{hv['uuid']}")
    rec = wait_status(env, f"{H}/{hv['uuid']}", "ERROR", "the refused hypervisor ERROR")
    assert f"{second.ADDRESS} refused the appliance's SSH key" in rec["status_reason"]
    assert "ssh_public_key" in rec["status_reason"] and "Permission denied" in \
        rec["status_reason"]
    env.ok(env.admin.delete(f"{H}/{hv['uuid']}"), 204)


def test_the_second_hypervisor_is_active_with_its_capacity(env, hv2):
    assert hv2["status_reason"] is None
    assert hv2["all_cores"] > 0 and hv2["all_ram"] > 0 and hv2["all_disk"] > 0
    assert hv2["avail_cores"] > 0 and hv2["accel"] == "tcg"
    assert hv2["driver_spec"]["host_key"] == " ".join(env.second.host_key.split()[:2])
    # one platform key for every hypervisor, and it is what the second machine trusts
    assert hv2["ssh_public_key"] == env.hypervisor["ssh_public_key"]
    assert "Accepted publickey for root" in env.second.ns.sshd_log()


def test_a_set_with_anti_affinity_puts_one_node_on_each_hypervisor(env, hv2):
    policy = env.ok(env.admin.post("/v1/compute/placement_policies/", {
        "project_id": tcg.ADMIN_PROJECT, "name": "spread", "kind": "hard-anti-affinity"}),
        201)
    node_set = env.ok(env.admin.post(f"{SETS}/", {
        "project_id": tcg.ADMIN_PROJECT, "name": "pair", "replicas": 2, "cores": 1,
        "ram": 512, "placement_policies": [policy["uuid"]],
        "disk_spec": {"kind": "root_disk", "size": 1, "image": f"file://{env.image}"}}), 201)
    env.cleanup += [f"/v1/compute/placement_policies/{policy['uuid']}",
                    f"{SETS}/{node_set['uuid']}"]
    rec = wait_status(env, f"{SETS}/{node_set['uuid']}", "ACTIVE", "the set ACTIVE")
    members = [env.node(uuid) for uuid in rec["nodes"]]
    assert len(members) == 2
    where = {m["hypervisor"]: m["uuid"] for m in members}
    assert set(where) == {env.hypervisor["uuid"], hv2["uuid"]}
    # each domain runs on the libvirtd placement named, and only there
    first, second = where[env.hypervisor["uuid"]], where[hv2["uuid"]]
    assert len(tcg.domains_in(env.ns, first)) == 1 and env.second.domains_of(first) == {}
    assert len(env.second.domains_of(second)) == 1 and tcg.domains_in(env.ns, second) == {}
    assert all(dom_id > 0 for dom_id in env.second.domains_of(second).values())  # running
    env.pair = (node_set["uuid"], first, second)


def serial_lines(env, node_uuid):
    return env.console(node_uuid).count(SERIAL_LINE)


def test_each_nodes_console_shows_its_serial_port_on_either_hypervisor(env, hv2):
    """The first node's console is libvirt's file under the appliance's state; the
    second's is a pty on hv2, copied by the compute daemon's console stream over the
    qemu+ssh connection (appliance/compute/remote_console.py): the same action shows both."""
    _set, first, second = env.pair
    for node_uuid in (first, second):
        env.wait(f"{node_uuid}'s serial lines in its console",
                 lambda: serial_lines(env, node_uuid) >= 3, WAIT)


def test_the_sets_network_spans_both_hypervisors(env, hv2):
    """docs/network.md, "Networks across hypervisors": both hypervisors have an underlay
    address (the veth between them), so the set's network (the admin project's default)
    is one segment: homed on the appliance's hypervisor with both nodes' DHCP entries,
    a bare bridge on hv2 joined by the network's VXLAN (made by the appliance's network
    hook in each libvirtd), hv2's domain on it with the tunnel's MTU."""
    _set, first, second = env.pair
    node = env.node(second)
    net = env.ok(env.admin.get(f"/v1/network/networks/{node['default_network']['network']}"))
    assert net["home_hypervisor"] == env.hypervisor["uuid"] and net["vni"]
    macs = sorted(env.node(n)["default_network"]["mac"] for n in (first, second))
    name = netxml.network_name(net["uuid"])

    def network_xml(ns):
        conn = ns.connect()
        try:
            return conn.networkLookupByName(name).XMLDesc(0)
        finally:
            conn.close()

    def home_serves_both():
        # the home's pass adds the entry, then the peer: two live updates, each running
        # the hook, so one may be seen before the other
        xml = network_xml(env.ns)
        return xml if sorted(h["mac"] for h in netxml.hosts(xml)) == macs and \
            netxml.peers(xml) == [env.second.ADDRESS] else None
    env.wait("hv2's node's DHCP entry and hv2 as a peer at the home", home_serves_both, WAIT)
    member = network_xml(env.second.ns)
    assert netxml.shape(member)["ips"] == [] and netxml.hosts(member) == []
    assert netxml.peers(member) == [env.second.OWN_ADDRESS]
    for ns in (env.ns, env.second.ns):
        link = ns.run(["ip", "-d", "link", "show", "dev", f"vxlan{net['vni']}"]).stdout
        assert f"vxlan id {net['vni']}" in link and f"master {net['bridge']}" in link
    domain = ET.fromstring(next(iter(_domain_xmls(env.second.ns, second))))
    tap = domain.find("devices/interface/target").get("dev")
    link = env.second.ns.run(["ip", "link", "show", "dev", tap]).stdout
    assert "mtu 1450" in link and f"master {net['bridge']}" in link


def _domain_xmls(ns, node_uuid):
    conn = ns.connect()
    try:
        return [conn.lookupByName(name).XMLDesc(0) for name in tcg.domains_in(ns, node_uuid)]
    finally:
        conn.close()


def test_a_vanished_hypervisor_is_error_with_its_nodes_and_both_come_back(env, hv2):
    set_uuid, first, second = env.pair
    running = env.second.domains_of(second)
    env.second.set_reachable(False)
    try:
        down = wait_status(env, f"{H}/{hv2['uuid']}", "ERROR", "hv2 ERROR once it is gone")
        assert down["status_reason"]
        node = wait_status(env, f"/v1/compute/nodes/{second}", "ERROR",
                           "hv2's node ERROR once hv2 is gone")
        assert node["status_reason"].startswith(f"hypervisor hv2 ({hv2['uuid']}) is "
                                                "unreachable: ")
        assert node["hypervisor"] == hv2["uuid"]       # not moved: its domain may run on
        # the other hypervisor and its node are untouched
        assert hypervisor(env, env.hypervisor["uuid"])["status"] == "ACTIVE"
        assert env.node(first)["status"] == "ACTIVE"
        # the set's status follows its members' in the same pass's set step, written
        # after the node's: read it once it is there
        wait_status(env, f"{SETS}/{set_uuid}", "ERROR", "the set ERROR with its member")
    finally:
        env.second.set_reachable(True)
    wait_status(env, f"{H}/{hv2['uuid']}", "ACTIVE", "hv2 ACTIVE once it is back")
    back = wait_status(env, f"/v1/compute/nodes/{second}", "ACTIVE",
                       "hv2's node ACTIVE once hv2 is back")
    assert back["status_reason"] is None and back["hypervisor"] == hv2["uuid"]
    # the same domain, running on as it was: not rebuilt, not restarted
    assert env.second.domains_of(second) == running
    # and its console followed again (the stream went with the connection)
    seen = serial_lines(env, second)
    env.wait("hv2's node's console followed again", lambda: serial_lines(env, second) > seen + 1,
             WAIT)
    wait_status(env, f"{SETS}/{set_uuid}", "ACTIVE", "the set ACTIVE again")


# ---- moving a node between the two (the action migrate; appliance/compute/migrate.py) ----
# The node's image is a boot sector, not an OS: it stamps the TSC once at boot, then counts
# in a loop, both in guest memory that virDomainMemoryPeek reads. "A process keeps running
# across the move" is seen in the guest's own memory: on the target, the boot stamp is the
# one from before the move (the same boot, not a restart) and the count goes on. The move
# of a booted node of the node image (a process started over SSH runs on, SSH to its
# address after the move) is a DBaaS VM's, in test_sqldb_on_vms.py: its boot is shared.

# cli; xor ax,ax; mov ds,ax; rdtsc; mov [0x7e04],eax; mov [0x7e08],edx;
# loop: inc dword [0x7e00]; jmp loop
COUNTER = bytes.fromhex("fa31c08ed80f3166a3047e668916087e66ff06007eebf9")


def guest_memory(ns, node_uuid):
    """(count, boot stamp) read from the guest's memory on the namespace's libvirtd."""
    conn = ns.connect()
    try:
        raw = conn.lookupByUUIDString(node_uuid).memoryPeek(0x7e00, 12,
                                                            libvirt.VIR_MEMORY_PHYSICAL)
    finally:
        conn.close()
    count, low, high = struct.unpack("<III", raw)
    return count, (high << 32) | low


def interface_and_hosts(ns, node_uuid, home_ns):
    """The domain's MAC, and the (mac, ip) host entries of the network it is on, read at
    the network's home (`home_ns`): with both hypervisors on the underlay the network
    spans them, and a member hypervisor has a bare bridge with no DHCP of its own
    (docs/network.md, "Networks across hypervisors")."""
    conn = ns.connect()
    try:
        dom = ET.fromstring(conn.lookupByUUIDString(node_uuid).XMLDesc(0))
        iface = dom.find("devices/interface")
        name = iface.find("source").get("network")
        mac = iface.find("mac").get("address")
    finally:
        conn.close()
    conn = home_ns.connect()
    try:
        hosts = [(h.get("mac"), h.get("ip")) for h in ET.fromstring(
            conn.networkLookupByName(name).XMLDesc()).findall("ip/dhcp/host")]
        return mac, hosts
    finally:
        conn.close()


def test_a_running_node_moves_live_both_ways(env, hv2, tmp_path_factory):
    hv1 = hypervisor(env, env.hypervisor["uuid"])
    # the way back goes to the first's underlay address (its URI, qemu:///system, names no
    # host, and it has no migration_address): conftest.py's tcg_hv2
    assert "migration_address" not in hv1["driver_spec"]
    assert hv1["driver_spec"]["underlay_address"] == env.second.OWN_ADDRESS
    image = boot_sector(tmp_path_factory.mktemp("counter") / "counter.raw", COUNTER)
    node = env.ok(env.admin.post("/v1/compute/nodes/", {
        "project_id": tcg.ADMIN_PROJECT, "name": "mover", "cores": 1, "ram": 512,
        "disk_spec": {"kind": "root_disk", "size": 1, "image": f"file://{image}"}}), 201)
    env.cleanup.append(f"/v1/compute/nodes/{node['uuid']}")
    rec = wait_status(env, f"/v1/compute/nodes/{node['uuid']}", "ACTIVE", "the mover ACTIVE")
    namespaces = {hv1["uuid"]: env.ns, hv2["uuid"]: env.second.ns}
    port = (rec["default_network"]["mac"], rec["default_network"]["ipv4"])
    here = rec["hypervisor"]
    there = hv2["uuid"] if here == hv1["uuid"] else hv1["uuid"]
    count, boot = env.wait("the guest counting", lambda: guest_memory(
        namespaces[here], node["uuid"])[0] and guest_memory(namespaces[here], node["uuid"]),
        60, interval=0.2)
    for source, target in ((here, there), (there, here)):
        moved = env.move(node["uuid"], target, WAIT * 2)
        assert (moved["hypervisor"], moved["status"]) == (target, "ACTIVE")
        assert (moved["default_network"]["mac"], moved["default_network"]["ipv4"]) == port
        # one domain, on the target, of the same boot, counting on
        assert tcg.domains_in(namespaces[source], node["uuid"]) == {}
        assert len(tcg.domains_in(namespaces[target], node["uuid"])) == 1
        after, stamp = guest_memory(namespaces[target], node["uuid"])
        assert stamp == boot and after != count
        count = after
        # its MAC, and its network (homed on the appliance's hypervisor) gives that MAC
        # its address
        mac, hosts = interface_and_hosts(namespaces[target], node["uuid"], env.ns)
        assert mac == port[0] and port in hosts
    # a pass later it still runs as it was (no redefine, no restart)
    env.wait("the daemon's next passes", lambda: env.node(node["uuid"])["status"] == "ACTIVE",
             WAIT)
    assert guest_memory(namespaces[here], node["uuid"])[1] == boot
    env.ok(env.admin.delete(f"/v1/compute/nodes/{node['uuid']}"), 204)
