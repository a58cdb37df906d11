"""Storage-pool volumes of the compute pass (docs/compute-daemon.md, "Volumes" and "Image
cache"): volume records made into pool volumes, a node's disks (overlays of its images),
local files uploaded into the pool, and the sweep of pool volumes whose record is gone.

Names are the only link between a pool volume and its record (`<prefix><node>-disk<i>.qcow2`,
`appliance-vol-<uuid>.qcow2`, `appliance-image-<sha256[:32]>.<fmt>`), so every step looks
up by name before it creates, and the sweep deletes only volumes named so."""

import os

from . import domain_xml, migration, volume_xml
from .virt import GB, NODES, VOLUMES, NodeFailure, hv_pool, libvirt, log, write

VOLUME_PREFIX = "appliance-vol-"
IMAGE_PREFIX = "appliance-image-"


def make_volumes(store, hv, conn, volumes, first):
    """Every volume record that belongs on this hypervisor gets its pool volume: an
    attached one where its node is, a loose one on `first` (the first ACTIVE hypervisor)."""
    coll, nodes = store.collection(VOLUMES), store.collection(NODES)
    pool = hv_pool(conn, hv)
    for vol in volumes:
        node = nodes.get((vol.get("node") or "").rsplit("/", 1)[-1]) if vol.get("node") \
            else None
        home = vol.get("hypervisor") or (node or {}).get("hypervisor") or \
            (first if not vol.get("node") else None)
        if home != hv["uuid"]:
            if node is not None and vol.get("hypervisor") and node.get("hypervisor") \
                    and node["hypervisor"] != vol["hypervisor"]:
                write(coll, vol, status="ERROR", status_reason=(
                    f"the volume is on hypervisor {vol['hypervisor']}, its node on "
                    f"{node['hypervisor']}"))
            continue
        name = volume_name(vol)
        found = lookup(pool, name)
        if found is None:
            pool.createXML(volume_xml.qcow2(name, int(vol["size"])), 0)
        elif found.info()[1] < int(vol["size"]) * GB:
            found.resize(int(vol["size"]) * GB, 0)
        write(coll, vol, hypervisor=hv["uuid"], status="ACTIVE", status_reason=None)


def volume_name(vol):
    return VOLUME_PREFIX + vol["uuid"] + ".qcow2"


def disk_name(prefix, node_uuid, index):
    return f"{prefix}{node_uuid}-disk{index}.qcow2"


def dev(index):
    return "vd" + "abcdefghijklmnopqrstuvwxyz"[index]


def volume_path(pool, vol):
    found = lookup(pool, volume_name(vol))
    return None if found is None else found.path()


def node_disks(pool, prefix, node, cached, no_upload):
    """The node's disk_spec disks, each a pool volume (an overlay of its image, or
    blank), created when missing; [{"path", "dev", "format"}]."""
    spec = node.get("disk_spec") or {}
    specs = spec.get("disks") if spec.get("kind") == "disks" else [spec]
    disks = []
    for index, disk in enumerate(specs or []):
        name = disk_name(prefix, node["uuid"], index)
        image = cached.get(disk.get("image")) if disk.get("image") else None
        vol = lookup(pool, name)
        if vol is None:
            backing = None if image is None else in_pool(
                pool, IMAGE_PREFIX + image["sha256"][:32] + "." + image["format"],
                image["path"], no_upload)
            vol = pool.createXML(volume_xml.qcow2(name, int(disk.get("size") or 10), image,
                                                  backing), 0)
        disks.append({"path": vol.path(), "dev": dev(index), "format": "qcow2"})
    if not disks:
        raise NodeFailure("disk_spec has no disk to boot from")
    return disks


def volume_devices(paths, current, taken):
    """The attached volumes as disks: [(volume uuid, path)] in order, each keeping the
    device it has (`current`: path -> dev), so that detaching one never renames the
    others; a new one takes the first device free in `taken` and `current`. Pure."""
    taken, placed = set(taken), []
    for uuid, path in paths:
        device = current.get(path)
        if device is None or device in taken:
            device = next(dev(i) for i in range(26) if dev(i) not in taken
                          and dev(i) not in current.values())
        taken.add(device)
        placed.append({"path": path, "dev": device, "format": "qcow2", "serial": uuid[:20]})
    return placed


def in_pool(pool, name, path, no_upload, replace=False):
    """The path, on the hypervisor, of a copy of the local file `path` in the storage
    pool (uploaded once; again when `replace`). The pool is where the hypervisor's
    QEMU may read (the state directory is 0700, and a remote hypervisor cannot see it
    at all). A completed upload is marked by a companion volume `<name>.done`, so one
    cut short by a kill is never used. Drivers without uploads (the test driver) get
    the local path; their URIs are remembered in `no_upload`."""
    conn = pool.connect()
    if conn.getURI() in no_upload:
        return path
    done = name + ".done"
    vol = lookup(pool, name)
    if vol is not None and not replace and lookup(pool, done) is not None:
        return vol.path()
    delete(pool, done)
    if vol is not None:
        vol.delete(0)
    size = os.path.getsize(path)
    vol = pool.createXML(volume_xml.raw(name, size), 0)
    if not _upload(conn, vol, path, size):
        no_upload.add(conn.getURI())
        return path
    pool.createXML(volume_xml.raw(done, 0), 0)
    return vol.path()


def _upload(conn, vol, path, size):
    """False (the volume deleted) where the driver takes no uploads."""
    stream = conn.newStream(0)
    try:
        vol.upload(stream, 0, size, 0)
    except libvirt.libvirtError as e:
        vol.delete(0)
        if e.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
            raise
        log.info("%s takes no uploads: its domains use local files", conn.getURI())
        return False
    with open(path, "rb") as f:
        stream.sendAll(lambda _stream, nbytes, handle: handle.read(nbytes), f)
    stream.finish()
    return True


def sweep_pool(store, hv, conn, prefix):
    """Pool volumes named as ours whose node or volume record is gone (a delete, or a
    creation killed half-way) or is on another hypervisor (the source's copies after a
    node's move) are deleted; nothing else in the pool is touched."""
    pool = hv_pool(conn, hv)
    volumes, nodes = store.collection(VOLUMES), store.collection(NODES)
    for name in pool.listVolumes():
        owner = owner_of(name, prefix)
        if owner is None:
            continue
        kind, uuid = owner
        if kind == "node":
            record = nodes.get(uuid)
            if record is not None and hv["uuid"] in (record.get("hypervisor"),
                                                     migration.target_of(record)):
                continue
        else:
            record = volumes.get(uuid)
            if record is not None and _volume_is_here(record, hv["uuid"], nodes):
                continue
            # a volume record on another hypervisor whose copy a domain here still uses
            # (a move that failed before the record said so) is kept
            if _attached_somewhere(conn, name):
                continue
        delete(pool, name)
        log.info("deleted pool volume %s: its %s %s is gone or elsewhere", name, kind, uuid)


def _volume_is_here(vol, hv_uuid, nodes):
    """A volume's copy belongs on `hv_uuid`: the hypervisor its record names (none yet:
    kept), or its node's move is going there."""
    if vol.get("hypervisor") in (None, hv_uuid):
        return True
    node = nodes.get((vol.get("node") or "").rsplit("/", 1)[-1]) if vol.get("node") else None
    return node is not None and migration.target_of(node) == hv_uuid


def _attached_somewhere(conn, name):
    for dom in conn.listAllDomains(0):
        if any(p and p.endswith("/" + name) for p in
               domain_xml.disks_of(dom.XMLDesc(0)).values()):
            return True
    return False


def owner_of(name, prefix):
    """("node"|"volume", uuid) of a pool volume named by us, else None."""
    if name.startswith(VOLUME_PREFIX) and name.endswith(".qcow2"):
        return "volume", name[len(VOLUME_PREFIX):-len(".qcow2")]
    if name.startswith(prefix) and (name.endswith(".qcow2") or name.endswith("-seed.iso")
                                    or name.endswith("-seed.iso.done")):
        uuid = name[len(prefix):len(prefix) + 36]
        if len(uuid) == 36 and name[len(prefix) + 36] == "-":
            return "node", uuid
    return None


def lookup(pool, name):
    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError:
        return None


def delete(pool, name):
    vol = lookup(pool, name)
    if vol is not None:
        vol.delete(0)
