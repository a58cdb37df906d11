import uuid

import pytest

from tests.iam.helpers import ADMIN_PROJECT, bind, make_project, make_user
from tests.workdirs import removed_unless_failed

IMAGE = "https://images.example.test/base.qcow2"
N, S, V = "/v1/compute/nodes", "/v1/compute/sets", "/v1/compute/volumes"
H, P = "/v1/compute/hypervisors", "/v1/compute/placement_policies"


def node_body(**fields):
    return {"name": f"n-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, "cores": 1,
            "ram": 1024, "disk_spec": {"kind": "root_disk", "image": IMAGE}, **fields}


def created(resp):
    assert resp.status == 201, resp
    return resp.json


def refused(resp, status):
    """A clean 4xx: the status and the JSON error body."""
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"} and body["code"] == status, body
    return body["message"]


class Member:
    """A user bound as owner in a project of its own, with a token scoped to it."""

    def __init__(self, server, admin, role="owner"):
        self.project = make_project(admin)
        user, name, password = make_user(admin)
        bind(admin, user, role, self.project)
        self.client = server.client(server.login(name, password,
                                                 scope=f"project:{self.project}"))


@pytest.fixture(scope="module")
def member(server, admin):
    return Member(server, admin)


@pytest.fixture(scope="module")
def other(server, admin):
    return Member(server, admin)


@pytest.fixture(scope="package")
def tcg_env(tmp_path_factory, request):
    """The appliance in a test network namespace with its libvirt registered as a
    hypervisor (tests/compute/tcg.py), made once for the VM tests of a run
    (test_e2e_tcg.py, test_two_hypervisors.py): its start and libvirt's first QEMU probe
    are paid once. Each module leaves it as it found it (its nodes, sets and extra
    hypervisors deleted)."""
    import faulthandler

    from tests.compute import tcg
    reason = tcg.missing()
    if reason:
        pytest.skip(reason)
    faulthandler.cancel_dump_traceback_later()
    # its image cache and state are half a gigabyte that the rest of the run does not need
    with removed_unless_failed(tmp_path_factory, request, "tcg-env") as workdir, \
            tcg.appliance_in_netns(str(workdir)) as env:
        env.hypervisor = env.register_hypervisor()
        yield env


@pytest.fixture(scope="package")
def tcg_second(tcg_env):
    """A second hypervisor host for the run's appliance (tcg.second_machine: its own
    namespace, libvirtd and sshd, a veth to the appliance's), made once for the modules
    that need two machines (test_two_hypervisors.py, test_sqldb_on_vms.py)."""
    from tests.compute import tcg
    from tests.compute.netns import sshd_unavailable
    reason = sshd_unavailable()
    if reason:
        pytest.skip(reason)
    with tcg.second_machine(tcg_env) as second:
        tcg_env.second = second
        try:
            yield second
        finally:
            del tcg_env.second


@pytest.fixture(scope="package")
def tcg_hv2(tcg_env, tcg_second):
    """The second machine registered through the API as `qemu+ssh://` with its host key
    pinned, ACTIVE; both hypervisors on the underlay (the veth: docs/network.md, "Networks
    across hypervisors"), so a set spread over them has one network across both, and a
    node moves both ways over it (a move goes to the target's underlay address). Deleted,
    and the first hypervisor's driver_spec put back, when tests/compute/ is done (each
    module deletes its own nodes first)."""
    env = tcg_env
    first = f"{H}/{env.hypervisor['uuid']}"
    spec = env.ok(env.admin.get(first))["driver_spec"]

    def status_is(path, status):
        def reached():
            rec = env.ok(env.admin.get(path))
            return rec if rec["status"] == status else None
        return reached
    # the first's URI (qemu:///system) names no host: the second's QEMU reaches it for a
    # move back at its underlay_address (migrate.migration_address's default)
    env.ok(env.admin.put(first, {"driver_spec": {
        **spec, "underlay_address": tcg_second.OWN_ADDRESS}}))
    hv = None
    try:
        env.wait("the appliance's hypervisor ACTIVE on the underlay",
                 status_is(first, "ACTIVE"), 300)
        hv = env.ok(env.admin.post(H, {"name": "hv2", "driver_spec": {
            "kind": "libvirt", "connection_uri": tcg_second.uri,
            "host_key": tcg_second.host_key, "underlay_address": tcg_second.ADDRESS}}), 201)
        yield env.wait("hv2 ACTIVE over qemu+ssh", status_is(f"{H}/{hv['uuid']}", "ACTIVE"),
                       300)
    finally:
        if hv is not None:
            env.admin.delete(f"{H}/{hv['uuid']}")
        env.admin.put(first, {"driver_spec": spec})
