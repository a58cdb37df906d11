"""The cloud-init NoCloud seed of a node: an ISO 9660 image labelled `cidata` with
`meta-data`, `user-data` and `network-config` (Rock Ridge and Joliet names, as
`cloud-localds`/genisoimage write them), built in Python by pycdlib: ~9 ms per seed against
~105 ms for `cloud-localds` (a shell script around genisoimage, a process per seed), which
was most of the time from POST to a running domain (docs/dependencies.md).

SSH keys (docs/compute-daemon.md, "Which SSH keys"): a key without a `target` goes to
every node of its project (its public_key and target_public_key). A key with a target
(docs/secrets.md, "SSH-key targets") goes only to the nodes it names, as the one line it
authorizes; the node agent also puts it into its `user`'s authorized_keys.

The ready marker: a script written by `write_files` and run by `runcmd` (list form: the
machine facts found that an unquoted `: ` in a runcmd line makes cloud-init drop the whole
user-data) prints `APPLIANCE-NODE-READY <uuid> <ipv4>` on the serial console, where the
IPv4 is the address the guest really holds (so the marker proves the DHCP lease).
"""

import hashlib
import io
import json
import os
import re

import pycdlib

READY_SCRIPT = """#!/bin/sh
# prints the ready marker with the address DHCP gave us (waits up to 120 s for one)
for i in $(seq 120); do
  ip4=$(ip -4 -o addr show scope global | awk '{{print $4}}' | cut -d/ -f1 | head -n1)
  [ -n "$ip4" ] && break
  sleep 1
done
echo "APPLIANCE-NODE-READY {uuid} $ip4" > /dev/ttyS0
echo "APPLIANCE-NODE-READY {uuid} $ip4"
"""


def hostname_of(node):
    """The node's hostname, else its name made a valid label, else node-<uuid prefix>."""
    if node.get("hostname"):
        return node["hostname"]
    label = re.sub(r"[^a-z0-9-]+", "-", (node.get("name") or "").lower()).strip("-")[:63]
    return label or "node-" + node["uuid"][:8]


def keys_for(node, ssh_keys):
    """The public keys (sorted, unique) of `ssh_keys` records that go to `node`: a key
    with a target only when it targets the node, and then the line it authorizes (its
    target_public_key, else its own public key); one without, as before."""
    from appliance import targeting
    from appliance.secret.ssh_targets import authorized_line
    keys = set()
    for record in ssh_keys:
        if record.get("project_id") != node.get("project_id"):
            continue
        if record.get("target"):
            if targeting.names(record["target"], node) and authorized_line(record):
                keys.add(authorized_line(record))
            continue
        for field in ("public_key", "target_public_key"):
            if record.get(field):
                keys.add(record[field].strip())
    return sorted(keys)


AGENT_FILE = "/etc/appliance/agent.json"


def seed_files(node, port, ssh_keys, agent=None):
    """{"meta-data", "user-data", "network-config"} texts of the node's seed. `agent`: the
    node agent's credential (appliance.agent.enroll.vm_credential), written root-only."""
    meta = {"instance-id": node["uuid"], "local-hostname": hostname_of(node)}
    files = [{"path": "/usr/local/sbin/appliance-ready", "permissions": "0755",
              "content": READY_SCRIPT.format(uuid=node["uuid"])}]
    if agent:
        files.append({"path": AGENT_FILE, "permissions": "0600", "owner": "root:root",
                      "content": json.dumps(agent, indent=1, sort_keys=True) + "\n"})
    user = {
        "hostname": hostname_of(node),
        "ssh_authorized_keys": keys_for(node, ssh_keys),
        "write_files": files,
        "runcmd": [["/usr/local/sbin/appliance-ready"]],
    }
    network = {"version": 2, "ethernets": {"eth0": {
        "match": {"macaddress": port["mac"]}, "set-name": "eth0", "dhcp4": True}}}
    # JSON is YAML, and json writes it ~20x faster than PyYAML's pure-Python emitter
    return {"meta-data": _dump(meta), "user-data": "#cloud-config\n" + _dump(user),
            "network-config": _dump(network)}


def _dump(value):
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


def digest(files):
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def write_seed(path, files):
    """Build the ISO at `path` (atomically) unless the one there was built from the same
    files (its digest is kept beside it). Returns True when it wrote a new one."""
    want = digest(files)
    stamp = path + ".sha256"
    try:
        with open(stamp) as f:
            if f.read().strip() == want and os.path.exists(path):
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    for name, text in sorted(files.items()):
        data = text.encode()
        iso.add_fp(io.BytesIO(data), len(data), "/" + name.upper().replace("-", "_") + ";1",
                   rr_name=name, joliet_path="/" + name)
    tmp = path + ".part"
    try:
        iso.write(tmp)
    finally:
        iso.close()
    os.chmod(tmp, 0o644)    # read by the hypervisor's QEMU
    os.replace(tmp, path)
    with open(stamp, "w") as f:
        f.write(want)
    return True
