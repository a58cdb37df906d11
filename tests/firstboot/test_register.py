"""First boot registers the local libvirt as a hypervisor and the box as a HW node of the
admin project (appliance/firstboot/register.py), once, across boots."""

import socket

from appliance.firstboot import register
from appliance.iam import builtin
from state import Store
from tests.firstboot.test_firstboot import boot, make_paths

# `ip -j -4 addr show` / `ip -j -4 route show default` as iproute2 prints them (trimmed)
ADDRESSES = [
    {"ifindex": 1, "ifname": "lo", "address": "00:00:00:00:00:00",
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifindex": 2, "ifname": "eth0", "address": "52:54:00:12:34:56",
     "addr_info": [{"family": "inet", "local": "10.0.2.15", "prefixlen": 24}]},
    {"ifindex": 3, "ifname": "eth1", "address": "52:54:00:ab:cd:ef",
     "addr_info": [{"family": "inet", "local": "192.168.5.9", "prefixlen": 16}]},
]
ROUTES = [{"dst": "default", "gateway": "10.0.2.2", "dev": "eth0"}]
NIC = {"network": None, "subnet": None, "port": None, "ipv4": "10.0.2.15", "mask": 24,
       "mac": "52:54:00:12:34:56", "gateway": "10.0.2.2", "dns": "10.0.2.3"}


def records(state_dir, kind):
    store = Store(str(state_dir))
    try:
        return store.collection(kind).records()
    finally:
        store.close()


def test_the_first_nic_with_an_address_is_the_default_network():
    assert register.first_nic(ADDRESSES, ROUTES, dns="10.0.2.3") == NIC
    # no default route (QEMU's restrict=on may give none): no gateway, still the address
    assert register.first_nic(ADDRESSES, [], dns=None)["gateway"] is None
    assert register.first_nic(ADDRESSES[:1], ROUTES, dns=None) is None
    assert register.first_nic([], ROUTES, dns=None) is None


def test_the_name_server_comes_from_the_dhcp_lease_else_resolv_conf(tmp_path):
    leases = tmp_path / "leases"
    leases.mkdir()
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# none\nnameserver 192.0.2.53\n")
    assert register.name_server(str(leases), str(resolv)) == "192.0.2.53"
    (leases / "2").write_text("ADDRESS=10.0.2.15\nDNS=10.0.2.3 10.0.2.4\n")
    assert register.name_server(str(leases), str(resolv)) == "10.0.2.3"
    assert register.name_server(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_a_boot_with_libvirt_registers_both_once(tmp_path):
    paths = make_paths(tmp_path)
    sock = tmp_path / "root/run/libvirt/libvirt-sock"
    sock.parent.mkdir(parents=True)
    sock.write_text("")           # its presence is the test: nothing connects to it
    boot(tmp_path, paths)
    state = tmp_path / "state"
    [hypervisor] = records(state, register.HYPERVISORS)
    assert hypervisor["driver_spec"] == {"kind": "libvirt", "connection_uri": "qemu:///system",
                                         "storage_pool": "default", "machine_prefix": "vm-"}
    assert hypervisor["connection_uri"] == "qemu:///system"
    # the compute daemon finds out whether libvirt works and moves it on
    assert (hypervisor["status"], hypervisor["machine_type"]) == ("IN_PROGRESS", "VM")
    [node] = records(state, register.NODES)
    assert (node["name"], node["hostname"]) == (socket.gethostname(),) * 2
    assert (node["node_type"], node["status"], node["project_id"]) == (
        "HW", "ACTIVE", builtin.ADMIN_PROJECT)
    assert node["cores"] >= 1 and node["ram"] > 0
    assert node["disk_spec"] is None and node["hypervisor"] is None
    assert node["default_network"] == {} or node["default_network"]["ipv4"]
    boot(tmp_path, paths)
    boot(tmp_path, paths)
    assert records(state, register.HYPERVISORS) == [hypervisor]
    assert [n["uuid"] for n in records(state, register.NODES)] == [node["uuid"]]


def test_without_libvirt_only_the_node_is_registered(tmp_path):
    boot(tmp_path, make_paths(tmp_path))
    assert records(tmp_path / "state", register.HYPERVISORS) == []
    assert len(records(tmp_path / "state", register.NODES)) == 1


def test_a_hypervisor_made_through_the_api_is_not_duplicated(tmp_path):
    store = Store(str(tmp_path))
    try:
        api_made = store.collection(register.HYPERVISORS, unique=[("connection_uri",)]).insert(
            {"name": "mine", "connection_uri": "qemu:///system", "status": "ACTIVE",
             "driver_spec": {"kind": "libvirt", "connection_uri": "qemu:///system"}})
        record, made = register.register_hypervisor(store)
        assert (record, made) == (api_made, False)
        assert len(store.collection(register.HYPERVISORS).records()) == 1
    finally:
        store.close()


def test_the_node_follows_a_new_address_and_keeps_its_uuid(tmp_path):
    store = Store(str(tmp_path))
    try:
        first, made = register.register_self(store, "box", NIC, 2, 1024)
        assert made and first["default_network"] == NIC
        same, made = register.register_self(store, "box", NIC, 2, 1024)
        assert not made and same["revision"] == first["revision"]    # nothing written
        moved = {**NIC, "ipv4": "10.0.2.16"}
        second, made = register.register_self(store, "box", moved, 2, 1024)
        assert not made and second["uuid"] == first["uuid"]
        assert second["default_network"]["ipv4"] == "10.0.2.16"
        # no address at all (no DHCP answer yet): {} as the API shows before a port
        bare, _ = register.register_self(store, "box", None, 2, 1024)
        assert bare["default_network"] == {}
        assert len(store.collection(register.NODES).records()) == 1
    finally:
        store.close()
