"""Shared set-up of the compute reconciler tests: a store, settings, ONE `test:///default`
connection (its state lives in the connection, so every Reconciler of a test shares it),
a hypervisor record on it, and a real Waitress server on loopback serving images."""

import gzip
import os
import uuid as uuidlib

import libvirt

from appliance import config
from appliance.compute.reconcile import Reconciler
from state import Store
from tests.wsgiserver import LoopbackServer

PROJECT = "11111111-2222-3333-4444-555555555555"
TEST_URI = "test:///default"


def settings_for(state_dir):
    # the images are served on loopback to nodes of a project: the admin's setting
    # allows it, as it would allow an outside image server (tenancy/addresses)
    return {**config.DEFAULTS, "state_dir": state_dir, "network_routing": "isolated",
            "allowed_outside_networks": "127.0.0.0/8"}


def image_app(directory, hits):
    def app(environ, start_response):
        name = environ["PATH_INFO"].lstrip("/")
        path = os.path.join(directory, name)
        hits.append(name)
        if "/" in name or not os.path.isfile(path):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"no such image"]
        with open(path, "rb") as f:
            body = f.read()
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", str(len(body)))])
        return [body]
    return app


class World:
    def __init__(self, tmp_path):
        self.state_dir = str(tmp_path / "state")
        self.store = Store(self.state_dir)
        self.settings = settings_for(self.state_dir)
        self.conn = libvirt.open(TEST_URI)
        self.image_dir = str(tmp_path / "served")
        os.makedirs(self.image_dir)
        self.hits = []
        self.http = LoopbackServer(image_app(self.image_dir, self.hits)).start()
        raw = b"\x00" * 510 + b"\x55\xaa" + b"\x00" * (1 << 16)
        with open(os.path.join(self.image_dir, "base.raw"), "wb") as f:
            f.write(raw)
        with open(os.path.join(self.image_dir, "base.raw.gz"), "wb") as f:
            f.write(gzip.compress(raw))
        with open(os.path.join(self.image_dir, "other.qcow2"), "wb") as f:
            f.write(b"QFI\xfb" + b"\x00" * 508)
        self.hypervisor = self.store.collection("compute_hypervisors").insert({
            "name": "test", "description": "", "machine_type": "VM",
            "driver_spec": {"kind": "libvirt", "connection_uri": TEST_URI,
                            "storage_pool": "default-pool", "machine_prefix": "vm-"},
            "cores_ratio": 1.0, "ram_ratio": 1.0, "status": "IN_PROGRESS",
            "status_reason": None, "all_cores": 0, "all_ram": 0, "all_disk": 0,
            "avail_cores": 0, "avail_ram": 0, "avail_disk": 0, "accel": None})

    def url(self, name):
        return f"http://127.0.0.1:{self.http.port}/{name}"

    def reconciler(self, cls=Reconciler):
        return cls(self.store, self.settings, connect=lambda uri: self.conn)

    def add_node(self, name="n1", cores=1, ram=512, image="base.raw", size=10, **extra):
        record = {"uuid": str(uuidlib.uuid4()), "name": name, "description": "",
                  "project_id": PROJECT, "cores": cores, "ram": ram, "node_type": "VM",
                  "disk_spec": {"kind": "root_disk", "image": self.url(image), "size": size},
                  "hostname": None, "placement_policies": [], "network": None,
                  "status": "NEW", "status_reason": None, "hypervisor": None,
                  "default_network": {}, "node_set": None, "power_state": "on",
                  "reboot_requested_at": None}
        record.update(extra)
        return self.store.collection("compute_nodes").insert(record)

    def add_volume(self, node=None, size=1, name="data"):
        """A volume record, attached to `node` (a record) when given."""
        return self.store.collection("compute_volumes").insert({
            "name": name, "description": "",
            "project_id": node["project_id"] if node else PROJECT, "size": size,
            "image": None, "boot": False, "label": None, "tier": "WARM", "ephemeral": False,
            "node": "/v1/compute/nodes/" + node["uuid"] if node else None, "status": "NEW",
            "status_reason": None, "hypervisor": None})

    def node(self, uuid):
        return self.store.collection("compute_nodes").get(uuid)

    def domain(self, uuid):
        try:
            return self.conn.lookupByUUIDString(uuid)
        except libvirt.libvirtError:
            return None

    def pool(self):
        return self.conn.storagePoolLookupByName("default-pool")

    def close(self):
        self.http.stop()
        self.store.close()
        for dom in self.conn.listAllDomains(0):
            if dom.name() != "test":
                if dom.isActive():
                    dom.destroy()
                dom.undefine()
        for name in self.pool().listVolumes():
            self.pool().storageVolLookupByName(name).delete(0)
