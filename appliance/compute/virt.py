"""What every part of the compute pass shares (docs/compute-daemon.md): the optional libvirt
import, the names of the kinds it reads, the failure that puts a node in ERROR, the storage
pool's name, and the compare-and-set write of a record's status.

Kept apart so that hypervisors.py, domains.py, volumes.py and events.py import one floor
below them rather than each other or the orchestrator (reconcile.py)."""

import logging

from .drivers import machine_prefix, pool_of  # noqa: F401 (the pass imports them from here)

try:
    import libvirt
except ImportError:     # the API server imports nothing of this; only the daemon needs it
    libvirt = None

log = logging.getLogger("appliance.compute")

NODES, HYPERVISORS = "compute_nodes", "compute_hypervisors"
VOLUMES, POLICIES = "compute_volumes", "compute_placement_policies"
GB = 1024 ** 3


class NodeFailure(Exception):
    """A node cannot be brought up; the message is its status_reason."""


def quiet_errors():
    """Errors are raised as exceptions and logged by us; libvirt's default handler would
    also print every expected miss (a volume looked up before it is made)."""
    if libvirt is not None:
        libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def reason(error):
    return str(error.get_error_message() or error) if hasattr(error, "get_error_message") \
        else str(error)


def write(coll, record, **changes):
    """Compare-and-set of the fields that differ; the new record, or None when nothing
    differed or the record moved on (its change brings another pass)."""
    diff = {k: v for k, v in changes.items() if record.get(k) != v}
    if not diff:
        return None
    done = coll.update_many({record["uuid"]: (record["revision"], diff)})
    return done.get(record["uuid"])


def hv_pool(conn, hv):
    """The hypervisor's storage pool object."""
    return conn.storagePoolLookupByName(pool_of(hv.get("driver_spec") or {}))
