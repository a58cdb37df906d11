"""The producer of kind `ssh_key`: an SSH key with a target goes into its `user`'s
authorized_keys on every node the target names (docs/secrets.md, "SSH-key targets")."""

from appliance.kinds import target_uuid

KIND = "ssh_key"
MASTER_KIND = "secret_ssh_keys"


def authorized_line(record):
    """The public key line a record authorizes: target_public_key, else its own."""
    return (record.get("target_public_key") or record.get("public_key") or "").strip()


def for_node(view, node):
    items = []
    for record in view.store.collection(MASTER_KIND).records():
        if not record.get("target") or not view.delivers(record, node):
            continue
        items.append({"uuid": target_uuid(node["uuid"], KIND, record["uuid"]), "kind": KIND,
                      "master": record["uuid"], "master_kind": MASTER_KIND,
                      "value": {"user": record["user"],
                                "authorized_keys": record["authorized_keys"],
                                "key": authorized_line(record)}})
    return items
