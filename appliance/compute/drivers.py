"""A hypervisor's `driver_spec` as the API stores it and the compute daemon reads it: its
kinds, the defaults the API fills in, and the storage pool and machine prefix the daemon
takes from it (the same defaults, so a record written without the API reads the same).
No import of the API framework (the daemon imports it)."""

LOCAL_HYPER = "exordos_local_hyper"
DRIVER_DEFAULTS = {"storage_pool": "default", "machine_prefix": "vm-"}


def with_defaults(spec):
    return {**DRIVER_DEFAULTS, **spec}


def pool_of(spec):
    """The storage pool's name: a plain name, or the first (only) entry of an
    exordos_local_hyper's list [{name, tier, ephemeral}] (docs/compute.md)."""
    pool = spec.get("storage_pool") or DRIVER_DEFAULTS["storage_pool"]
    return pool[0]["name"] if isinstance(pool, list) else pool


def machine_prefix(hv):
    return (hv.get("driver_spec") or {}).get("machine_prefix") or \
        DRIVER_DEFAULTS["machine_prefix"]
