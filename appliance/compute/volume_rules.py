"""The checks of a volume before the API writes it (docs/compute.md, "Volumes"): its image
as the caller may give it, a size that never shrinks, and the node it attaches to (of the
volume's project, a VM: a HW node takes no volumes). Raises the API's 4xx errors;
resources.py calls them from its hooks and actions.
"""

from appliance.api.errors import BadRequest, NotFound
from appliance.api.fields import UUID_RE

from .lifecycle import NEW, REDO
from .machine_rules import check_image


def new_volume(store, settings, call, record, node_uuid, load_node):
    """A volume as created: its image and its node (`node_uuid`, from the body's `node`)
    checked, NEW."""
    if record.get("image") is not None:
        check_image(store, settings, call, "image", record["image"], record["project_id"])
    if record.get("node") is not None:
        attachable_node(call, record["project_id"], node_uuid, load_node)
    record.update(NEW)
    return record


def volume_changes(store, settings, call, current, changes):
    """A PUT: a new image checked, no shrinking, IN_PROGRESS again."""
    if changes.get("image") is not None:
        check_image(store, settings, call, "image", changes["image"], current["project_id"])
    if changes.get("size", current["size"]) < current["size"]:
        raise BadRequest(f"size: a volume cannot shrink (from {current['size']} GB)")
    changes.update(REDO)
    return changes


def attachable_node(call, volume_project, uuid, load_node):
    """The node (by uuid; `load_node(call, uuid)` reads it as the caller may see it, 404
    otherwise) a volume of `volume_project` may attach to."""
    if not isinstance(uuid, str) or not UUID_RE.match(uuid):
        raise BadRequest("node: must be a node uuid or path")
    node = load_node(call, uuid)
    if node.get("project_id") != volume_project:
        raise NotFound(f"Node {uuid} not found")
    if node.get("node_type") == "HW":
        raise BadRequest(f"node: {uuid} is a HW node, which takes no volumes")
    return node


def attach(call, volume, uuid, load_node):
    """The changes that attach `volume` to the node `uuid`; 400 when it is attached
    already."""
    if volume.get("node"):
        raise BadRequest("Volume is already attached to a node")
    node = attachable_node(call, volume["project_id"], uuid, load_node)
    return {"node": node["uuid"], **REDO}


def detach(volume):
    if not volume.get("node"):
        raise BadRequest("Volume is not attached to a node")
    return {"node": None, **REDO}
