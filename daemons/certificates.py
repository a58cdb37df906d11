"""Certificate daemon: issues and renews the certificates of method dns_core through ACME
DNS-01 on our own DNS (appliance/secret/certificates.py; docs/certificates.md).

It watches the certificates, and the DNS domains (a zone created later lets an ERROR
"in none of our zones" go on at once). A pass returns when the next renewal or retry is
due and the shell wakes it then: nothing is polled. The `acme` library is imported only
when an order runs, so the idle process stays small.
"""

import sys

from appliance.secret.certificates import DOMAINS, KIND, CertificateWork
from daemons.base import Daemon, run


class Certificates(Daemon):
    name = "certificates"
    kinds = (KIND, DOMAINS)
    # the work is scheduled by reconcile's own answer; the tick only catches a lost event
    tick_seconds = 600.0
    # both kinds lead to one pass, skipped when neither moved and its timer is not due
    whole_pass = True

    def __init__(self, settings=None, store=None):
        super().__init__(settings, store)
        self.work = CertificateWork(self.store, self.settings, self.log)

    def reconcile_pass(self):
        return self.work.reconcile()


def main():
    return run(Certificates)


if __name__ == "__main__":
    sys.exit(main())
