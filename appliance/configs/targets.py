"""The platform side of configs: what each node gets (`for_node`, the producer of kind
`config` in appliance/agent/capabilities.py), and how a config's links are resolved.

Pure over the store (through `appliance.agent.targets.View`): the API calls it when an
agent asks for its payload and the status step when it compares targets with actuals.
A linked value enters the item's `content`, so a changed password changes the item's
hash and the agent rewrites the file: that is link tracking, with no watch list to keep.
Of two configs that write one path on a node, only the earlier is delivered there
(paths.py); the later one's item says why and is refused.
"""

from appliance.em.links import Unavailable
from appliance.kinds import (SECRET_PASSWORDS, SECRET_RSA_KEYS, SECRET_SECRETS, SECRET_SSH_KEYS,
                             VS_VARIABLES, target_uuid)

from . import paths, render

KIND = "config"
MASTER_KIND = "config_configs"
# fields of secret kinds that are read opened (the sealed value the record delivers)
SECRET_VALUE_FIELDS = {SECRET_SECRETS: "value", SECRET_PASSWORDS: "value",
                       SECRET_SSH_KEYS: "private_key", SECRET_RSA_KEYS: "private_key"}


def link_target(link):
    """(store kind, uuid) a config link names: `$core.<service>.<collection>.$<uuid>`."""
    service, collection, ref = link.segments
    return f"{service}_{collection}", ref[1:].lower()


def resolve_link(view, link, project_id):
    """The value a link gives for a config of `project_id`; Unavailable while it has none.
    A record of another project is never read (the config's owner may not see it)."""
    kind, uuid = link_target(link)
    record = view.record(kind, uuid)
    if record is None:
        raise Unavailable(link.text, "resource")
    if record.get("project_id") != project_id:
        raise Unavailable(link.text, "resource of another project")
    if not link.fields:
        return uuid
    first = link.fields[0]
    if SECRET_VALUE_FIELDS.get(kind) == first:
        value = view.secret_value(kind, uuid)
    elif kind == VS_VARIABLES and first == "value":
        from appliance.vs.values import NoValue, variable_value
        try:
            value = variable_value(view.store, record)
        except NoValue:
            value = None
    else:
        value = record.get(first)
    for field in link.fields[1:]:
        value = value.get(field) if isinstance(value, dict) else None
    if value is None:
        raise Unavailable(link.text, link.fields[-1])
    return value


def item_value(view, config):
    """The value of a config's items (the same on every node it targets)."""
    content = render.render(config["body"],
                            lambda link: resolve_link(view, link, config["project_id"]))
    return {"path": config["path"], "owner": config["owner"], "group": config["group"],
            "mode": config["mode"], "content": content, "on_change": config["on_change"]}


def for_node(view, node):
    # one view serves one payload, or the status step's pass over every node: a config is
    # rendered (its secrets opened) once per view, not once per node it targets
    rendered = view.__dict__.setdefault("_configs_rendered", {})
    items = []
    delivered = [c for c in view.store.collection(MASTER_KIND).records()
                 if view.delivers(c, node)]
    for config, earlier in paths.winners(delivered):
        if earlier is not None:
            items.append(_item(node, config, {"value": None, "refused": True,
                                              "unavailable": collides(config, earlier)}))
            continue
        key = (config["uuid"], config["revision"])
        if key not in rendered:
            try:
                rendered[key] = {"value": item_value(view, config)}
            except Unavailable as u:
                rendered[key] = {"value": None, "unavailable": waiting(u)}
        items.append(_item(node, config, rendered[key]))
    return items


def _item(node, config, value):
    return {"uuid": target_uuid(node["uuid"], KIND, config["uuid"]), "kind": KIND,
            "master": config["uuid"], "master_kind": MASTER_KIND, **value}


def collides(config, earlier):
    """Why a later config is not delivered where an earlier one writes its path
    (paths.py); `refused` with it makes that node's status ERROR, and the agent, seeing
    `unavailable`, writes nothing for it and keeps the earlier config's file."""
    return (f"path {config['path']} is written on this node by config "
            f"{earlier.get('name') or '(no name)'} ({earlier['uuid']}), created earlier: "
            "change this config's path or target")


def waiting(unavailable):
    if unavailable.reason == "resource":
        return f"waiting for {unavailable.link}"
    return f"waiting for {unavailable.link} (no {unavailable.reason})"
