"""A test-only capability "testfile": a record of kind test_agent_files puts a file on
every node its target names. Tests register it in appliance.agent.capabilities (the API
process's producers, the agent's drivers) with `install()`."""

import os

from appliance.agent import capabilities
from appliance.agent.protocol import target_uuid

KIND, MASTER_KIND = "testfile", "test_agent_files"


def install():
    capabilities.PRODUCERS[KIND] = "tests.agent.testcap:for_node"
    capabilities.DRIVERS[KIND] = "tests.agent.testcap:Driver"
    capabilities.MASTERS[KIND] = MASTER_KIND


def uninstall():
    for table in (capabilities.PRODUCERS, capabilities.DRIVERS, capabilities.MASTERS):
        table.pop(KIND, None)


def for_node(view, node):
    out = []
    for record in view.store.collection(MASTER_KIND).records():
        if not view.targets(record["target"], node):
            continue
        item = {"uuid": target_uuid(node["uuid"], KIND, record["uuid"]), "kind": KIND,
                "master": record["uuid"], "master_kind": MASTER_KIND,
                "value": {"path": record["path"], "content": record["content"]}}
        if record.get("unavailable"):
            item.update(value=None, unavailable=record["unavailable"])
        out.append(item)
    return out


class Driver:
    """Writes value.content to value.path under the host's root; a path ending in
    ".fail" is an expected ERROR, one ending in ".raise" an exception."""

    def __init__(self, host):
        self.host = host
        self.applied = 0

    def apply(self, item, applied):
        value = item["value"]
        if value["path"].endswith(".raise"):
            raise RuntimeError("the driver blew up")
        if value["path"].endswith(".fail"):
            return {"status": "ERROR", "reason": "refused on purpose", "value": {}}
        if applied and applied["value"]["path"] != value["path"]:
            self.remove(applied)
        path = self.host.path(value["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.write(value["content"])
        os.replace(path + ".tmp", path)
        self.applied += 1
        return {"status": "ACTIVE", "reason": None, "value": {"size": len(value["content"])}}

    def remove(self, applied):
        try:
            os.unlink(self.host.path(applied["value"]["path"]))
        except FileNotFoundError:
            pass
