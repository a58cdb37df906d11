"""Compute under TCG (issue 13's benchmark): POST of a node to its DHCP lease, and to SSH.

    python -m tests.bench compute_tcg
    BENCH_TCG_ROUNDS=3 python -m tests.bench compute_tcg

The appliance (API and compute daemon) runs inside a test network namespace with its own
libvirtd (tests/compute/netns.py, tests/compute/tcg.py: the end-to-end test's set-up).
Each round POSTs one node of the node image, through the API, with an SSH key that
targets it, and times from the POST's start to the first DHCP lease of the node's MAC
in libvirt, and to the first successful SSH with the key from inside the namespace; the
node is deleted before the next round. Needs root and the compute and network parts
(says why and skips otherwise). A round is minutes: cloud-init's stages dominate under
TCG (docs/image.md).
"""

import os

from . import note, remove, spread, table, temp_dir, title
from tests.compute import tcg
from tests.image import qemu

ROUNDS = int(os.environ.get("BENCH_TCG_ROUNDS", "1"))


def main():
    title("Compute under TCG: POST of a node to its DHCP lease and to SSH reachable")
    reason = tcg.missing()
    if reason:
        note(f"skipped: {reason}")
        return
    image = qemu.build_image("node")
    work = temp_dir("compute-tcg")
    leases, sshs = [], []
    try:
        with tcg.appliance_in_netns(work) as env:
            env.hypervisor = env.register_hypervisor()
            for i in range(ROUNDS):
                node_uuid, key, posted = env.create_node(image, f"bench-{i}")
                _, to_lease, to_ssh = env.wait_booted(node_uuid, key, posted)
                leases.append(to_lease)
                sshs.append(to_ssh)
                note(f"round {i + 1}: lease {to_lease:.1f} s, SSH {to_ssh:.1f} s")
                env.ok(env.admin.delete(f"/v1/compute/nodes/{node_uuid}"), 204)
                env.wait("the node's domain gone",
                         lambda: env.domains_of(node_uuid) == [], 300)
    finally:
        remove(work)
    table(["from the POST of a node to", "seconds min / median / max", "rounds"],
          [["its DHCP lease (libvirt)", spread(leases, "{:.1f}"), len(leases)],
           ["SSH reachable with the key", spread(sshs, "{:.1f}"), len(sshs)]])
    load1, _, _ = os.getloadavg()
    note(f"(load average after: {load1:.2f}; TCG on 2 shared cores: the guest's boot is CPU-bound)")
