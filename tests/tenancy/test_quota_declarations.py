"""The facts quotas need about a capability's records are declared by that capability
(appliance/tenancy/quotas.py, "what a capability declares"): the API's capabilities declare
every one a quota counts through, and a record whose capability declared nothing is an
error, never a use of 0 that would let a project past its limits."""

import pytest

from appliance import app
from appliance.tenancy import quotas

VM = {"node_type": "VM", "cores": 2, "ram": 1024, "disk_spec": {
    "kind": "disks", "disks": [{"image": "x", "size": 20}, {"size": 5}]}}


@pytest.fixture(scope="module", autouse=True)
def capabilities():
    app.preload()       # what the API imports: every capability's resources


def amounts(kind, record):
    return {q.name: q.amount(kind, record) for q in quotas.QUOTAS if kind in q.counts}


def test_the_capabilities_declare_what_their_records_take():
    assert amounts("compute_nodes", VM) == {"nodes": 1, "cores": 2, "ram": 1024, "disk": 25}
    # a set's disks are counted once per replica; a root_disk without size is 10 GB
    assert amounts("compute_sets", {**VM, "replicas": 3, "disk_spec": {
        "kind": "root_disk", "image": "x"}})["disk"] == 30
    lb = {"type": {"kind": "core", "nodes_number": 2, "cpu": 1, "ram": 512, "disk_size": 10}}
    assert amounts("network_lb", lb) == {"nodes": 2, "cores": 2, "ram": 1024, "disk": 20,
                                         "lbs": 1}
    assert amounts("network_lb", {"type": {"kind": "core_agent"}})["nodes"] == 0
    instance = {"nodes_number": 3, "cpu": 2, "ram": 2048, "disk_size": 8}
    # each member's root disk (10 GB, sqldb/sets.py) and its data disk
    assert amounts("sqldb_instances", instance) == {
        "nodes": 3, "cores": 6, "ram": 6144, "disk": 54, "sqldb_instances": 1}
    assert amounts("sqldb_instances", {**instance, "placement": {
        "kind": "nodes", "nodes": []}}) == {"nodes": 0, "cores": 0, "ram": 0, "disk": 0,
                                            "sqldb_instances": 1}


def test_a_record_whose_capability_declared_nothing_is_an_error(monkeypatch):
    monkeypatch.delitem(quotas._declared, ("hidden_set", "network_lb"))
    monkeypatch.delitem(quotas._declared, "disk_sizes")
    with pytest.raises(LookupError, match="network_lb"):
        amounts("network_lb", {"type": {"kind": "core", "nodes_number": 1}})
    with pytest.raises(LookupError, match="disk_sizes"):
        amounts("compute_nodes", VM)
