"""A store with DBaaS records in the shapes the API writes them (appliance/sqldb/
resources.py) and agents' rows in `ua_resources` as the report handler stores them
(appliance/agent/resources.py), for the plan side's tests."""

import datetime
import uuid as uuidlib

from appliance import config
from appliance.agent import protocol
from appliance.secret.crypto import SecretBox
from appliance.sqldb.members import item_uuid
from state import Store
from state.collection import parse_time

PROJECT = "11111111-2222-3333-4444-555555555555"
ADMIN = "00000000-0000-0000-0000-000000000000"


def node_uuid(n):
    """Node uuids that sort as their number does."""
    return f"{n:08d}-0000-4000-8000-000000000000"


class World:
    def __init__(self, state_dir, **settings):
        self.store = Store(str(state_dir))
        self.settings = {**config.DEFAULTS, "state_dir": str(state_dir), **settings}
        self.box = SecretBox(self.store)
        self.version = self.add_version()

    def add_version(self, major=15, image="", name="15"):
        return self.store.collection("sqldb_versions").insert({
            "name": name, "description": "", "image": image, "major": major,
            "deprecated": False})

    def add_node(self, n, ipv4=None, node_set=None, name=None):
        return self.store.collection("compute_nodes").insert({
            "uuid": node_uuid(n), "name": name or f"node{n}", "project_id": PROJECT,
            "node_type": "HW", "node_set": node_set,
            "default_network": {"ipv4": ipv4} if ipv4 else None})

    def set_address(self, node, ipv4):
        return self.store.collection("compute_nodes").update(node["uuid"], {
            "default_network": {"ipv4": ipv4}})

    def add_instance(self, nodes=None, nodes_number=None, sync=1, name="db", **fields):
        uuid = str(uuidlib.uuid4())
        placement = {"kind": "nodes", "nodes": [n["uuid"] for n in nodes]} if nodes \
            else {"kind": "node_set"}
        record = {
            "uuid": uuid, "name": name, "description": "", "project_id": PROJECT,
            "cpu": 2, "ram": 2048, "disk_size": 10,
            "nodes_number": nodes_number or len(nodes or ()) or 1,
            "sync_replica_number": sync, "version": self.version["uuid"],
            "placement": placement, "status": "NEW", "status_reason": None, "ipsv4": [],
            "endpoint": None, "primary": None, "epoch": 0, "node_status": {},
            "replication_password": self.box.seal("sqldb_instances", uuid,
                                                  "replication_password", "repl-secret"),
            "admin_password": self.box.seal("sqldb_instances", uuid, "admin_password",
                                            "admin-secret"), **fields}
        return self.store.collection("sqldb_instances").insert(record)

    def instance(self, instance):
        return self.store.collection("sqldb_instances").get(instance["uuid"])

    def set_primary(self, instance, node, epoch=0):
        return self.store.collection("sqldb_instances").update(instance["uuid"], {
            "primary": node["uuid"], "epoch": epoch})

    def add_user(self, instance, name, verifier="SCRAM-SHA-256$4096:c2FsdA==$a:b"):
        return self.store.collection("sqldb_users").insert({
            "instance": instance["uuid"], "project_id": PROJECT, "name": name,
            "description": "", "password_hash": verifier, "status": "NEW",
            "status_reason": None})

    def add_database(self, instance, name, owner):
        return self.store.collection("sqldb_databases").insert({
            "instance": instance["uuid"], "project_id": PROJECT, "name": name,
            "description": "", "owner": owner["uuid"], "status": "NEW",
            "status_reason": None})

    def report(self, node, instance, status="ACTIVE", reason=None, hash="h", **value):
        """Write (insert or update) the row of `node`'s item of `instance` as the report
        handler does; `value` fields over a running replica's defaults."""
        uuid = item_uuid(node["uuid"], instance["uuid"])
        value = {"epoch": 0, "role": "replica", "running": True, "timeline": 1,
                 "lsn": "0/0", "lsn_int": 0, "streaming_from": None, "sync_standbys": [],
                 "users": {}, "databases": {},
                 "checked_at": datetime.datetime.now().isoformat(), **value}
        row = {"uuid": uuid, "kind": "sqldb", "hash": hash,
               "full_hash": protocol.item_hash({"kind": "sqldb", "value": value}),
               "status": status, "reason": reason, "value": value, "node": node["uuid"],
               "agent": node["uuid"], "res_uuid": instance["uuid"], "master_kind": None}
        coll = self.store.collection("ua_resources")
        if coll.get(uuid) is None:
            return coll.insert(row)
        return coll.update(uuid, row)

    def row(self, node, instance):
        return self.store.collection("ua_resources").get(item_uuid(node["uuid"],
                                                                   instance["uuid"]))


def at(row, seconds):
    """The moment `seconds` after the row was last written."""
    return parse_time(row["updated_at"]) + datetime.timedelta(seconds=seconds)
