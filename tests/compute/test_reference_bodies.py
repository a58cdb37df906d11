"""The bodies the reference's own clients send (/work/shared/reference-api.md §1, §6),
exactly as they send them: each is accepted with 201 and stored right. And the rule
behind several of them: a null where a field has no use for null means "not given"
(docs/validation.md, "null")."""

import uuid

import pytest

from appliance.api.fields import accepts_null
from appliance.compute.drivers import DRIVER_DEFAULTS
from appliance.compute.resources import LIBVIRT_SPEC

from .conftest import ADMIN_PROJECT, H, IMAGE, N, S, created, node_body, refused

SSH = "/v1/secret/ssh_keys"


def test_the_cli_node_add_body_with_the_sdk_default_network(admin):
    """`exordos compute nodes add` and the SDK's node (default_network: {})."""
    node_uuid = str(uuid.uuid4())
    body = {"uuid": node_uuid, "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024,
            "name": "node", "description": "",
            "disk_spec": {"kind": "root_disk", "size": 10, "image": IMAGE},
            "default_network": {}}
    node = created(admin.post(N, body))
    assert node["uuid"] == node_uuid and node["default_network"] == {}
    assert node["disk_spec"] == {"kind": "root_disk", "size": 10, "image": IMAGE,
                                 "tier": "WARM", "ephemeral": True}
    assert admin.get(f"{N}/{node_uuid}").json == node
    # a PUT that carries it back empty asks for nothing either
    put = admin.put(f"{N}/{node_uuid}", {"cores": 2, "default_network": {}})
    assert put.status == 200 and put.json["cores"] == 2 and put.json["default_network"] == {}


def test_a_default_network_with_content_stays_the_services(admin):
    node = created(admin.post(N, node_body()))
    for body in ({"default_network": {"ipv4": "10.0.0.9"}},):
        assert "set that" in refused(admin.post(N, node_body(**body)), 403)
        assert "IPAM" in refused(admin.put(f"{N}/{node['uuid']}", body), 403)
    assert admin.get(f"{N}/{node['uuid']}").json == node


def test_the_cli_set_add_body_with_default_network(admin):
    set_uuid = str(uuid.uuid4())
    body = {"uuid": set_uuid, "project_id": ADMIN_PROJECT, "cores": 1, "ram": 1024,
            "name": "set", "description": "", "replicas": 1,
            "disk_spec": {"kind": "root_disk", "size": 10, "image": IMAGE},
            "default_network": {}}
    got = created(admin.post(S, body))
    assert (got["uuid"], got["replicas"], got["default_network"]) == (set_uuid, 1, {})
    assert got["disk_spec"]["size"] == 10 and got["disk_spec"]["image"] == IMAGE
    assert admin.get(f"{S}/{set_uuid}").json["default_network"] == {}
    assert "read-only" in refused(admin.post(S, {**body, "uuid": str(uuid.uuid4()),
                                                 "default_network": {"ipv4": "10.0.0.1"}}),
                                  403)


def test_the_cli_ssh_key_body_with_its_constructor(admin):
    node = created(admin.post(N, node_body()))
    key_uuid = str(uuid.uuid4())
    body = {"description": "", "user": "ubuntu", "project_id": ADMIN_PROJECT,
            "uuid": key_uuid, "name": f"ssh_key_to_{node['name']}",
            "target": {"kind": "node", "node": node["uuid"]},
            "constructor": {"kind": "plain"}}
    key = created(admin.post(SSH, body))
    assert key["uuid"] == key_uuid and key["constructor"] == {"kind": "plain"}
    assert key["target"] == {"kind": "node", "node": node["uuid"]}
    assert key["user"] == "ubuntu" and key["authorized_keys"] == ".ssh/authorized_keys"
    # without it, the same default
    other = created(admin.post(SSH, {**body, "uuid": str(uuid.uuid4()), "name": "k2",
                                     "constructor": None}))
    assert other["constructor"] == {"kind": "plain"}
    assert "constructor.kind" in refused(admin.post(SSH, {
        **body, "uuid": str(uuid.uuid4()), "name": "k3", "constructor": {"kind": "vault"}}),
        400)


def test_the_hypervisor_driver_spec_with_null_storage_pool(admin):
    body = {"uuid": str(uuid.uuid4()), "name": "hypervisor", "description": "",
            "driver_spec": {"kind": "libvirt", "connection_uri":
                            f"test:///{uuid.uuid4().hex}", "storage_pool": None}}
    h = created(admin.post(H, body))
    assert h["driver_spec"]["storage_pool"] == "default"
    assert admin.get(f"{H}/{h['uuid']}").json["driver_spec"]["storage_pool"] == "default"
    # a field that takes null on purpose keeps it
    nets = created(admin.post(H, {"name": "h", "driver_spec": {
        "kind": "libvirt", "connection_uri": f"test:///{uuid.uuid4().hex}", "network": None}}))
    assert nets["driver_spec"]["network"] is None


def test_every_defaulted_driver_spec_property_takes_null_as_its_default(admin):
    """Walks the libvirt driver_spec: each property that refuses null gets dropped
    (then defaulted); the DRIVER_DEFAULTS land in the record."""
    refusing = [name for name, schema in LIBVIRT_SPEC["properties"].items()
                if name not in ("kind", "connection_uri") and not accepts_null(schema)]
    assert set(DRIVER_DEFAULTS) <= set(refusing)
    spec = {"kind": "libvirt", "connection_uri": f"test:///{uuid.uuid4().hex}",
            **{name: None for name in refusing}}
    h = created(admin.post(H, {"name": "h", "driver_spec": spec}))
    for name in refusing:
        assert h["driver_spec"].get(name) == DRIVER_DEFAULTS.get(name), name
    put = admin.put(f"{H}/{h['uuid']}", {"driver_spec": spec})
    assert put.status == 200 and put.json["driver_spec"] == h["driver_spec"]


@pytest.mark.parametrize("spec,expected", [
    ({"kind": "root_disk", "image": IMAGE, "size": None, "tier": None, "ephemeral": None},
     {"kind": "root_disk", "image": IMAGE, "size": 10, "tier": "WARM", "ephemeral": True}),
    ({"kind": "disks", "disks": [{"size": 5, "image": IMAGE, "tier": None, "label": None}]},
     {"kind": "disks", "disks": [{"size": 5, "image": IMAGE, "tier": "WARM",
                                  "ephemeral": True, "label": None}]}),
])
def test_null_inside_disk_spec_is_the_default(admin, spec, expected):
    assert created(admin.post(N, node_body(disk_spec=spec)))["disk_spec"] == expected


def test_a_required_null_is_still_refused(admin):
    before = len(admin.get(N).json)
    assert "cores" in refused(admin.post(N, node_body(cores=None)), 400)
    assert "image" in refused(admin.post(N, node_body(
        disk_spec={"kind": "root_disk", "image": None})), 400)
    assert len(admin.get(N).json) == before
