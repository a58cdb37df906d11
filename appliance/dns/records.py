"""The zone rules every writer of DNS records follows, whether it is the DNS API
(appliance/dns/resources.py) or a daemon writing the store directly (the DBaaS endpoint,
the ACME challenges): a zone is made with its default SOA, and every change of a zone's
records increases that SOA's serial, so that secondaries and caches see the change.

Written once here, with no import of the API framework: the daemons that call it must not
load it (tests/supervisor/test_imports.py).
"""

DOMAINS, RECORDS = "dns_domains", "dns_records"
# RFC 1982 serial arithmetic: the serial is an unsigned 32-bit number that wraps
SERIAL_MODULUS = 2 ** 32
# the numbers of a new zone's SOA, and of one whose record leaves them out (zones.py)
SOA_DEFAULTS = {"serial": 1, "refresh": 10800, "retry": 3600, "expire": 604800, "ttl": 3600}


def default_soa(domain_name):
    """The `record` of the SOA a new zone gets."""
    return {"kind": "SOA", "name": "@", "primary_dns": f"ns1.{domain_name}", **SOA_DEFAULTS}


def soa_record(domain):
    """The dns_records row of the default SOA of `domain` (a dns_domains record)."""
    return {"domain": domain["uuid"], "project_id": domain["project_id"], "type": "SOA",
            "ttl": 3600, "prio": None, "disabled": False, "tags": [],
            "record": default_soa(domain["name"])}


def bump_serial(records, domain_uuid):
    """Increase the serial of the SOA of a zone by one; `records` is the dns_records
    collection."""
    for soa in records.by("domain", domain_uuid):
        if soa["type"] == "SOA":
            records.mutate(soa["uuid"], lambda r: {**r, "record": {
                **r["record"], "serial": (r["record"]["serial"] + 1) % SERIAL_MODULUS}})


def changes_serial(before, after):
    """Whether an update of a record must bump its zone's serial: every update but one of
    the SOA that sets the serial itself."""
    return after["type"] != "SOA" or after["record"]["serial"] == before["record"]["serial"]
