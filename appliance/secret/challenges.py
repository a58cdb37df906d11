"""The DNS side of an ACME order: the DNS-01 challenges' TXT records in our own zones.

Both sides of an order use it: the order's process (acme.py) publishes and withdraws
them, and the certificate daemon's pass (certificates.py) removes any left over. It is
apart from both so that neither imports the other (acme.py loads the `acme` library,
which the long-lived daemon never does), and `AcmeFailure` is here because publishing
raises it: a DNS server that does not answer in time fails the order.
"""

import time

from appliance.dns.records import bump_serial
from appliance.kinds import DNS_RECORDS

RECORDS = DNS_RECORDS
# every TXT record of ours carries it: found again after a crash, or after a certificate
# was deleted while its order ran
TAG = "appliance-certificate:"
TXT_PREFIX = "_acme-challenge"


class AcmeFailure(Exception):
    """An order that did not end in a certificate; str() is the reason shown to users."""


def remove_challenges(store, certificate_uuid=None):
    """Delete our TXT records (of one certificate, or all of them); bump the serial of
    each zone they were in."""
    records = store.collection(RECORDS)
    tag = TAG + (certificate_uuid or "")

    def ours(r):
        return r["type"] == "TXT" and any(
            t == tag if certificate_uuid else t.startswith(TAG) for t in r.get("tags") or ())
    gone = records.delete_where(ours)
    for zone in sorted({r["domain"] for r in gone}):
        bump_serial(records, zone)
    return gone


class Challenges:
    """The DNS side of one order: publish() writes the TXT records into our zones and
    returns once our DNS server answers all of them; withdraw() removes them."""

    def __init__(self, store, certificate, zones, server, wait_seconds):
        self.store, self.certificate = store, certificate
        self.zones = zones              # base name -> zone record
        self.server = server            # (host, port) of our DNS server
        self.wait_seconds = wait_seconds

    def publish(self, pairs):
        records = self.store.collection(RECORDS)
        wanted = {}
        for name, validation in pairs:
            zone = self.zones[name]
            relative = name[:-len(zone["name"])].rstrip(".")
            records.insert({
                "domain": zone["uuid"], "project_id": zone["project_id"], "type": "TXT",
                "ttl": 0, "prio": None, "disabled": False,
                "tags": [TAG + self.certificate["uuid"]],
                "record": {"kind": "TXT", "content": validation,
                           "name": TXT_PREFIX + ("." + relative if relative else "")}})
            wanted.setdefault(f"{TXT_PREFIX}.{name}", set()).add(validation)
        for zone in sorted({self.zones[name]["uuid"] for name, _ in pairs}):
            bump_serial(records, zone)
        self._wait(wanted)

    def withdraw(self):
        remove_challenges(self.store, self.certificate["uuid"])

    def _wait(self, wanted):
        deadline = time.monotonic() + self.wait_seconds
        pending = dict(wanted)
        while pending:
            for name in list(pending):
                if pending[name] <= self._answered(name):
                    del pending[name]
            if not pending:
                return
            if time.monotonic() > deadline:
                host, port = self.server
                raise AcmeFailure(f"our DNS server {host}:{port} did not answer "
                                  f"{', '.join(sorted(pending))} TXT within "
                                  f"{self.wait_seconds:g} s")
            time.sleep(0.05)

    def _answered(self, name):
        from dnslib import QTYPE, DNSRecord
        host, port = self.server
        try:
            reply = DNSRecord.parse(DNSRecord.question(name, "TXT").send(host, port,
                                                                         timeout=1.0))
        except Exception:       # socket errors, timeouts, and dnslib's own parse errors
            return set()
        return {b"".join(rr.rdata.data).decode(errors="replace") for rr in reply.rr
                if rr.rtype == QTYPE.TXT and str(rr.rname).rstrip(".").lower() == name}
