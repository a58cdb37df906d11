"""Reconcile step of the certificate daemon (daemons/certificates.py): certificates of
method dns_core are issued through ACME DNS-01 on our own DNS, and renewed.

Level-triggered: each pass looks at every certificate and
- issues one whose `cert` is missing, is not for its `domains`, or is due for renewal
  (docs/certificates.md, "Renewal"): its domains' zones are found among our DNS domains of
  its project (a domain in none: ERROR naming it, and no ACME call); every zone that
  covers a domain must be the certificate's project's (the platform's for a platform
  certificate), else ERROR and no ACME call: a zone of another owner around or inside
  the name would otherwise let one project prove control of another's names
  (appliance/tenancy/zones.py); the challenges'
  `_acme-challenge` TXT records go into those zones through the store (ttl 0, the zone's
  serial bumped, as the DNS API does), the order goes on once our DNS server answers them,
  and the records are removed in every case;
- makes ACTIVE one that needs nothing (a manual one, a PUT of its name, ...);
- returns when the next pass is due (the earliest renewal or retry), so that renewals are
  scheduled, not polled.

Failures (ACME refused, DNS not answering in time, directory unreachable) are ERROR with
the reason and are retried per certificate with a doubling back-off; a PUT (status NEW)
retries at once. Status writes are compare-and-set on the revision the pass saw: an API
write during an order is never overwritten, it brings another pass.
"""

import datetime
import json
import subprocess
import sys
import time

from state.collection import format_time

from appliance.backoff import Backoff
from appliance.kinds import DNS_DOMAINS
from appliance.tenancy import zones as zone_rule

from .challenges import remove_challenges
from .crypto import SecretBox

KIND = "secret_certificates"
DOMAINS = DNS_DOMAINS
# what the order's process needs of the daemon's settings
ORDER_SETTINGS = ("state_dir", "log_level", "acme_directory_url", "acme_ca_bundle",
                  "acme_dns_wait_seconds", "acme_order_timeout_seconds")


def is_wildcard(domain):
    return domain.startswith("*.")


def base_name(domain):
    return domain[2:] if is_wildcard(domain) else domain


def cert_names(cert_pem):
    """The DNS names of the leaf of a PEM chain, as a set."""
    from cryptography import x509
    leaf = x509.load_pem_x509_certificates(cert_pem.encode())[0]
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {n.lower() for n in san.value.get_values_for_type(x509.DNSName)}


def renew_at(cert_pem, threshold_days):
    """When a certificate is renewed: `threshold_days` before it expires; but when the
    threshold is as long as its whole lifetime (Let's Encrypt's six-day certificates,
    Pebble's short ones in tests), at half its lifetime, so that it is not renewed again
    right after every issuance."""
    from cryptography import x509
    leaf = x509.load_pem_x509_certificates(cert_pem.encode())[0]
    start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    at = end - datetime.timedelta(days=threshold_days)
    return at if at > start else start + (end - start) / 2


def zone_of(name, zones):
    """The zone (a dns_domains record) `name` lies in: the longest suffix; None if none."""
    best = None
    for zone in zones:
        if (name == zone["name"] or name.endswith("." + zone["name"])) and (
                best is None or len(zone["name"]) > len(best["name"])):
            best = zone
    return best


class CertificateWork:
    def __init__(self, store, settings, log, clock=time.time):
        self.store, self.settings, self.log, self.clock = store, settings, log, clock
        self.box = SecretBox(store)
        # uuid -> when a failed order is tried again (wall clock: renewals are wall times)
        self._retry = Backoff(float(settings["acme_retry_first_seconds"]),
                              float(settings["acme_retry_max_seconds"]), clock=clock)
        host = settings["dns_host"]
        self.server = ("127.0.0.1" if host in ("0.0.0.0", "") else host,
                       int(settings["dns_port"]))

    def reconcile(self):
        """One pass. Returns the seconds until the next pass is due, or None."""
        # no order runs between passes: any TXT record of ours is left over
        if remove_challenges(self.store):
            self.log.info("removed challenge records left over")
        due = []
        for record in self.store.collection(KIND).records():
            when = self._one(record)
            if when is not None:
                due.append(when)
        live = {r["uuid"] for r in self.store.collection(KIND).records()}
        for uuid in [u for u in self._retry.keys() if u not in live]:
            self._retry.forget(uuid)
        return max(min(due) - self.clock(), 0.05) if due else None

    def _one(self, record):
        """Handle one certificate; the wall time it needs looking at again, or None."""
        now = self.clock()
        if record["method"]["kind"] == "manual":
            self._set(record, "ACTIVE", None)
            return None
        reason = self._needs_issuance(record, now)
        if reason is None:
            self._retry.forget(record["uuid"])
            self._set(record, "ACTIVE", None)
            return renew_at(record["cert"], record["expiration_threshold"]).timestamp()
        if record["status"] == "ERROR" and self._retry.failing(record["uuid"]):
            when = self._retry.until(record["uuid"])
            if when > now:
                return when
        elif record["status"] != "ERROR":
            self._retry.forget(record["uuid"])          # changed since it failed
        return self._issue(record, reason)

    def _needs_issuance(self, record, now):
        if not record.get("cert"):
            return "first issuance"
        if cert_names(record["cert"]) != set(record["domains"]):
            return "domains changed"
        if renew_at(record["cert"], record["expiration_threshold"]).timestamp() <= now:
            return "renewal"
        return None

    def _issue(self, record, why):
        every = self.store.collection(DOMAINS).records()
        zones = [z for z in every if z["project_id"] == record["project_id"]]
        found, missing, foreign = {}, [], []
        for domain in record["domains"]:
            if zone_rule.foreign_cover(base_name(domain), record["project_id"], every,
                                       wildcard=is_wildcard(domain)):
                foreign.append(domain)
                continue
            zone = zone_of(base_name(domain), zones)
            if zone is None:
                missing.append(domain)
            else:
                found[base_name(domain)] = zone
        if foreign:
            # the other zone is not named: the certificate's project may not see it
            reason = (f"{', '.join(foreign)}: {zone_rule.ANOTHER_OWNER}; a certificate "
                      f"is issued only for names whose zones all belong to project "
                      f"{record['project_id']}")
            if self._set(record, "ERROR", reason) is not record:
                self.log.warning("certificate %s: %s", record["uuid"], reason)
            return None
        if missing:
            # no ACME call and no retry timer: a change of the DNS domains brings a pass
            reason = (f"{', '.join(missing)}: in none of the DNS zones of project "
                      f"{record['project_id']}")
            if self._set(record, "ERROR", reason) is not record:
                self.log.warning("certificate %s: %s", record["uuid"], reason)
            return None
        started = self._set(record, "IN_PROGRESS", None)
        if started is None:
            return None             # changed under us: the change brings another pass
        self.log.info("certificate %s: ordering for %s (%s)", record["uuid"],
                      ", ".join(record["domains"]), why)
        begun = time.monotonic()
        outcome = self._order(record, found)
        if not outcome["ok"]:
            return self._failed(started, outcome["reason"])
        not_after = datetime.datetime.fromisoformat(outcome["not_after"])
        self.log.info("certificate %s: issued in %.1f s, expires %s", record["uuid"],
                      time.monotonic() - begun, outcome["not_after"])
        self._retry.forget(record["uuid"])
        return self._store_issued(started, outcome["key"], outcome["chain"], not_after)

    def _order(self, record, zones):
        """Run the order in a process of its own (appliance/secret/acme.py, "one order in a
        process of its own"); its outcome."""
        request = {"settings": {k: self.settings.get(k) for k in ORDER_SETTINGS},
                   "certificate": {k: record[k] for k in ("uuid", "domains", "email")},
                   "zones": {name: {k: z[k] for k in ("uuid", "name", "project_id")}
                             for name, z in zones.items()},
                   "server": list(self.server)}
        limit = float(self.settings["acme_dns_wait_seconds"]) + float(
            self.settings["acme_order_timeout_seconds"]) + 120
        try:
            done = subprocess.run([sys.executable, "-P", "-m", "appliance.secret.acme"],
                                  input=json.dumps(request), stdout=subprocess.PIPE,
                                  text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"ok": False, "reason": f"the order took over {limit:g} s"}
        try:
            return json.loads(done.stdout)
        except ValueError:
            return {"ok": False, "reason": f"the order's process failed (exit status "
                                           f"{done.returncode}; see the log)"}

    def _store_issued(self, ordered, key, chain, not_after):
        coll = self.store.collection(KIND)
        while True:
            current = coll.get(ordered["uuid"])
            if current is None:
                self.log.info("certificate %s was deleted during its order", ordered["uuid"])
                return None
            if current["domains"] != ordered["domains"] or current["method"] != \
                    ordered["method"]:
                return None         # asked for something else meanwhile: the next pass
            written = coll.update_many({current["uuid"]: (current["revision"], {
                "cert": chain, "key": self.box.seal(KIND, current["uuid"], "key", key),
                "expiration_at": format_time(not_after), "status": "ACTIVE",
                "status_reason": None})})
            if written:
                return renew_at(chain, current["expiration_threshold"]).timestamp()

    def _failed(self, record, reason):
        delay = self._retry.failed(record["uuid"])
        when = self._retry.until(record["uuid"])
        self.log.warning("certificate %s: %s; retrying in %.0f s", record["uuid"], reason,
                         delay)
        self._set(record, "ERROR", reason[:1024])
        return when

    def _set(self, record, status, reason):
        """Compare-and-set of the status; the new record, or None if it moved on."""
        if record["status"] == status and record.get("status_reason") == reason:
            return record
        return self.store.collection(KIND).update_many({record["uuid"]: (
            record["revision"], {"status": status, "status_reason": reason})}).get(
            record["uuid"])

