"""Each instance's stable endpoint: an A record `<instance uuid>` in the zone of the
setting `sqldb_zone`, pointing at the primary's host (docs/sqldb-failover.md, "Endpoint").

The zone is a dns_domains record of the admin project, made here when missing (with its
SOA, as the DNS API makes it). It is found by name *and* the admin project: a zone of that
name in another project (left from before zones had one owner, docs/security.md) is never
written into, nor is the zone made beside another owner's parent or child zone; the
instances then get no endpoint, and the reason is logged, until an admin removes it.
Our records carry the tag `sqldb`; a record of ours whose instance is gone, or has no
primary with an address, is deleted. Every change bumps the zone's SOA serial, through the
zone rules the DNS API follows too (appliance/dns/records.py, which loads no API).
"""

import logging

from appliance.dns.records import bump_serial, soa_record
from appliance.kinds import ADMIN_PROJECT, DNS_DOMAINS, DNS_RECORDS
from appliance.tenancy import zones as zone_rule

from .members import INSTANCES, NODES, host_of

DOMAINS, RECORDS = DNS_DOMAINS, DNS_RECORDS
TAG = "sqldb"
# short: a client resolving again after a failover finds the new primary within this
TTL = 5

log = logging.getLogger("appliance.sqldb.endpoint")
_reported = set()       # refusals already logged (the planner passes every second)


class ZoneTaken(Exception):
    """The DBaaS zone cannot be the platform's: another owner's zone has its name, or is
    its parent or child."""


def ensure_zone(store, name):
    """The platform's zone record `name`, made (with its SOA) when missing; ZoneTaken when
    another owner's zone stands in the way. Under the kind's lock, as the DNS API's
    creation, so that no project's zone slips in between the check and the insert."""
    domains = store.collection(DOMAINS, unique=[("name",)])
    with domains.lock:
        every = domains.records()
        zone = zone_rule.platform_zone(name, every)
        if zone is not None:
            return zone
        why = zone_rule.refusal(name, ADMIN_PROJECT, every, {}, None)
        if why is not None:
            raise ZoneTaken(f"the DBaaS zone is not made: {why[0]}; endpoints are "
                            "withheld until an admin deletes that zone")
        zone = domains.insert({"name": name, "project_id": ADMIN_PROJECT, "mirror": None,
                               "description": "endpoints of DBaaS instances (sqldb)",
                               "tags": [TAG], "sync_to_ecosystem": False})
        store.collection(RECORDS).insert(soa_record(zone))
    return zone


def wanted(store):
    """{instance uuid: the primary's host} for every instance whose primary has one."""
    nodes = store.collection(NODES)
    out = {}
    for instance in store.collection(INSTANCES).records():
        node = nodes.get(instance.get("primary") or "")
        if node is not None and host_of(node):
            out[instance["uuid"]] = host_of(node)
    return out


def sync(store, zone_name):
    """Records and the instances' `endpoint` fields in line; returns how many records
    were written."""
    want = wanted(store)
    instances = store.collection(INSTANCES)
    if not want and not zone_rule.platform_zone(zone_name, store.collection(DOMAINS).records()):
        zone = None         # no instance needs the zone yet: it is made with the first
    else:
        try:
            zone = ensure_zone(store, zone_name)
            _reported.clear()
        except ZoneTaken as e:
            # a name in another owner's zone would resolve to that owner's records
            if str(e) not in _reported:
                _reported.add(str(e))
                log.error("%s", e)
            zone, want = None, {}
    written = 0
    if zone is not None:
        records = store.collection(RECORDS)
        ours = {r["record"]["name"]: r for r in records.by("domain", zone["uuid"])
                if r["type"] == "A" and TAG in (r.get("tags") or ())}
        fresh, updates = [], {}
        for uuid, host in sorted(want.items()):
            current = ours.get(uuid)
            if current is None:
                fresh.append({"domain": zone["uuid"], "project_id": ADMIN_PROJECT,
                              "type": "A", "ttl": TTL, "prio": None, "disabled": False,
                              "tags": [TAG], "record": {"kind": "A", "name": uuid,
                                                        "address": host}})
            elif current["record"].get("address") != host:
                updates[current["uuid"]] = (current["revision"], {
                    "record": {**current["record"], "address": host}})
        if fresh:
            records.insert_many(fresh)
        done = records.update_many(updates) if updates else {}
        gone = records.delete_where(lambda r: r["domain"] == zone["uuid"] and
                                    r["type"] == "A" and TAG in (r.get("tags") or ()) and
                                    r["record"]["name"] not in want)
        written = len(fresh) + len(done) + len(gone)
        if written:
            bump_serial(records, zone["uuid"])
    endpoints = {}
    for instance in instances.records():
        endpoint = f"{instance['uuid']}.{zone_name}" if instance["uuid"] in want else None
        if instance.get("endpoint") != endpoint:
            endpoints[instance["uuid"]] = (instance["revision"], {"endpoint": endpoint})
    if endpoints:
        instances.update_many(endpoints)
    return written
