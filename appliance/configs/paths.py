"""One file per node: two configs may not write the same path on the same node
(docs/configs.md, "One writer per file").

Two such configs would have the agent write one file twice, and which content wins would
depend on the order it applies them in. So the API refuses the second one (409 on create,
and on a PUT that changes the path or the target), and the producer, should two of them
meet on a node anyway (records written before the rule, or restored from a backup),
delivers only the earlier one there: the later one is ERROR on that node, naming the
other.

Targets overlap when they reach a common node now or later: a node named by both, a
member of a set that the other names, or one set named by both (it collides as soon as
the set has a member, so it is refused while the set is still empty). Paths are compared
by their components: the API's path rule (resources.PATH) already refuses empty, `.` and
`..` components, so the comparison only guards records written before it. A symlink on
the node that makes two paths one file is not known here; the agent writes through it
only inside its allowed roots (node.py).

Check and insert happen under one cross-process lock per project (`guard`): a collision is
always within one project (a config targets only its own project's nodes and sets,
tenancy/nodes.py), so two concurrent creates of one path on one node cannot both pass.
"""

import contextlib
import zlib

from appliance.kinds import COMPUTE_NODES

CONFIGS, NODES = "config_configs", COMPUTE_NODES
LOCK_STRIPES = 16


def path_key(path):
    """The form two paths are compared in: `/etc//x`, `/etc/./x` and `/etc/x/` are one."""
    return "/" + "/".join(p for p in (path or "").split("/") if p not in ("", "."))


def reach(store, target):
    """What a target reaches: {("node", uuid)} for the nodes it names and the present
    members of the set it names, and ("set", uuid) for that set (its future members)."""
    target = target or {}
    kind = target.get("kind")
    if kind == "node":
        return {("node", target.get("node"))}
    if kind == "nodes":
        return {("node", uuid) for uuid in target.get("nodes") or ()}
    if kind == "node_set":
        node_set = target.get("node_set")
        return {("set", node_set)} | {("node", n["uuid"]) for n in store.collection(
            NODES).by("node_set", node_set)}
    return set()


def _where(shared):
    kind, uuid = sorted(shared)[0]
    return f"node {uuid}" if kind == "node" else f"the nodes of set {uuid}"


def collision(store, config):
    """(other config, where) of the first config of the project that writes the same path
    on a node `config` reaches; None when there is none."""
    key = path_key(config.get("path"))
    same_path = [c for c in store.collection(CONFIGS).by("project_id", config.get(
        "project_id")) if c["uuid"] != config.get("uuid") and path_key(c.get("path")) == key]
    mine = reach(store, config.get("target")) if same_path else set()
    for other in sorted(same_path, key=order):
        shared = mine & reach(store, other.get("target"))
        if shared:
            return other, _where(shared)
    return None


def check(store, config):
    """409 naming the other config when `config` (as it would be stored) writes a path
    that another config of its project already writes on a common node. Call it under
    `guard`, just before the write."""
    found = collision(store, config)
    if found is None:
        return
    other, where = found
    # here, not at the top: the node agent imports path_key, and never the API
    from appliance.api.errors import Conflict  # noqa: PLC0415
    raise Conflict(
        f"path {config['path']}: config {other.get('name') or '(no name)'} "
        f"({other['uuid']}) already writes this file on {where}; two configs writing one "
        "file would overwrite each other: use another path, change the target, or change "
        "that config instead")


@contextlib.contextmanager
def guard(store, project_id):
    """Held across a config write's collision check and the write itself (a named store
    lock: taken before the quota lock and any kind's lock)."""
    stripe = zlib.crc32(str(project_id).encode()) % LOCK_STRIPES
    with store.named_lock(f"config-paths-{stripe}"):
        yield


def order(config):
    """Which of two colliding configs is the earlier (the one delivered)."""
    return (config.get("created_at") or "", config["uuid"])


def winners(configs):
    """The configs delivered to one node, each with None, and each later one that
    writes a path an earlier one writes there with that earlier config:
    [(config, earlier or None)] in `order`."""
    first = {}
    out = []
    for config in sorted(configs, key=order):
        key = path_key(config.get("path"))
        out.append((config, first.get(key)))
        first.setdefault(key, config)
    return out
