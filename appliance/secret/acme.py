"""The ACME side of a certificate: account, order, DNS-01 challenges, finalization.

All protocol work is the `acme` library's (certbot's client); this module only wires it to
our store and to the DNS side given by the caller (appliance/secret/challenges.py puts
the TXT records into our zones and waits until our server answers them). Each order runs
in a process of its own (the end of this file): `acme`, josepy, requests and pyOpenSSL
are ~20 MB, and the certificate daemon is idle nearly always.

The account: one per ACME directory and contact e-mail, registered on first use; its key is
sealed in the store (kind `secret_acme_accounts`) like every other secret, and its URL kept
beside it. An account the directory no longer knows (a Pebble restarted, an account
deactivated) is registered again.
"""

import datetime
import logging
import uuid

import josepy
import requests
from acme import challenges, client, crypto_util, errors, messages
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .challenges import AcmeFailure, Challenges
from .crypto import SecretBox

ACCOUNTS = "secret_acme_accounts"
USER_AGENT = "appliance-certificates"
KEY_BITS = 2048                 # RSA, as the reference's driver issues

# the library logs every request and response whole (multi-line, the issued chain among
# them) at DEBUG: a daemon at DEBUG would flood its journal
logging.getLogger("acme").setLevel(logging.INFO)


def _new_key_pem():
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _problem(error, url=""):
    """A short reason from what the library raised."""
    if isinstance(error, messages.Error):
        return "the ACME directory refused: " + (error.detail or error.description
                                                 or str(error.typ))
    if isinstance(error, errors.ValidationError):
        details = [f"{a.body.identifier.value}: {c.error.detail or c.error.typ}"
                   for a in error.failed_authzrs for c in a.body.challenges
                   if c.error is not None]
        return "challenge failed: " + ("; ".join(details) or "no detail")
    if isinstance(error, errors.TimeoutError):
        return "the order was not ready in time"
    if isinstance(error, requests.exceptions.SSLError):
        why = "certificate verify failed" if "CERTIFICATE_VERIFY_FAILED" in str(error) \
            else type(error).__name__
        return f"TLS to the ACME directory {url} failed: {why} (setting acme_ca_bundle)"
    if isinstance(error, requests.exceptions.RequestException):
        return f"ACME directory {url} unreachable: {type(error).__name__}"
    return f"{type(error).__name__}: {error}"


class Issuer:
    """Issues certificates from one ACME directory (settings acme_directory_url and
    acme_ca_bundle)."""

    def __init__(self, store, settings, log):
        self.store = store
        self.url = settings["acme_directory_url"]
        self.verify = settings.get("acme_ca_bundle") or True
        self.timeout = float(settings["acme_order_timeout_seconds"])
        self.log = log
        self.box = SecretBox(store)

    def issue(self, domains, email, dns):
        """A new key and a certificate for `domains` (a new order). `dns` publishes the
        challenges: `dns.publish([(name, validation)])` before they are answered (it
        returns once our server answers them) and `dns.withdraw()` after, in every case.
        Returns (key PEM, full chain PEM, notAfter as an aware datetime); raises
        AcmeFailure with the reason."""
        try:
            acme = self._client(email)
            key_pem = _new_key_pem()
            order = acme.new_order(crypto_util.make_csr(key_pem.encode(), list(domains)))
            try:
                answers = []
                for authz in order.authorizations:
                    if authz.body.status == messages.STATUS_VALID:
                        continue        # still valid from an earlier order of the account
                    challb = next((c for c in authz.body.challenges
                                   if isinstance(c.chall, challenges.DNS01)), None)
                    if challb is None:
                        raise AcmeFailure(f"{authz.body.identifier.value}: the directory "
                                          "offers no dns-01 challenge")
                    answers.append((authz.body.identifier.value, challb))
                dns.publish([(name, c.chall.validation(acme.net.key)) for name, c in answers])
                for _, challb in answers:
                    acme.answer_challenge(challb, challb.response(acme.net.key))
                deadline = datetime.datetime.now() + datetime.timedelta(seconds=self.timeout)
                order = acme.poll_and_finalize(order, deadline)
            finally:
                dns.withdraw()
        except AcmeFailure:
            raise
        except (messages.Error, errors.Error, requests.exceptions.RequestException,
                josepy.errors.Error, ValueError) as e:
            raise AcmeFailure(_problem(e, self.url)) from None
        leaf = x509.load_pem_x509_certificates(order.fullchain_pem.encode())[0]
        return key_pem, order.fullchain_pem, leaf.not_valid_after_utc

    # -- the account -----------------------------------------------------------------------

    def _client(self, email):
        accounts = self.store.collection(ACCOUNTS)
        found = accounts.find_one(directory=self.url, email=email)
        if found is None:
            new = str(uuid.uuid4())
            found = accounts.insert({"uuid": new, "directory": self.url, "email": email,
                                     "uri": None, "key": self.box.seal(
                                         ACCOUNTS, new, "key", _new_key_pem())})
        key = serialization.load_pem_private_key(
            self.box.open(ACCOUNTS, found["uuid"], "key", found["key"]).encode(), None)
        net = client.ClientNetwork(josepy.JWKRSA(key=key), user_agent=USER_AGENT,
                                   verify_ssl=self.verify)
        acme = client.ClientV2(client.ClientV2.get_directory(self.url, net), net)
        if found["uri"]:
            net.account = messages.RegistrationResource(uri=found["uri"],
                                                        body=messages.Registration())
            try:
                acme.query_registration(net.account)
                return acme
            except messages.Error as e:
                if e.code not in ("accountDoesNotExist", "unauthorized"):
                    raise
                self.log.warning("ACME account %s is unknown to %s: registering again",
                                 found["uri"], self.url)
                net.account = None
        registration = messages.NewRegistration.from_data(
            email=email, terms_of_service_agreed=True)
        try:
            regr = acme.new_account(registration)
        except errors.ConflictError as e:       # the key's account exists: take it
            regr = messages.RegistrationResource(uri=str(e), body=messages.Registration())
            net.account = regr
        accounts.update(found["uuid"], {"uri": regr.uri})
        self.log.info("ACME account %s registered with %s", regr.uri, self.url)
        return acme


# -- one order in a process of its own ---------------------------------------------------
#
# The certificate daemon runs each order as `python -m appliance.secret.acme`, so that the
# `acme` library (and josepy, requests, pyOpenSSL: ~20 MB) never stays in the long-lived
# daemon: its idle size is the same before and after orders. The request comes on stdin
# as JSON, the outcome goes to stdout as JSON (the key over a pipe between two processes
# of the same user), the log lines to stderr (the daemon's journal).

def run_order(request):
    """Run one order in this process: {"ok": true, "key", "chain", "not_after"} or
    {"ok": false, "reason"}."""
    from state import Store

    log = logging.getLogger("daemons.certificates")
    settings = request["settings"]
    store = Store(settings["state_dir"])
    try:
        dns = Challenges(store, request["certificate"], request["zones"],
                         tuple(request["server"]), float(settings["acme_dns_wait_seconds"]))
        try:
            key, chain, not_after = Issuer(store, settings, log).issue(
                request["certificate"]["domains"], request["certificate"].get("email"), dns)
        except AcmeFailure as e:
            return {"ok": False, "reason": str(e)}
        return {"ok": True, "key": key, "chain": chain, "not_after": not_after.isoformat()}
    finally:
        store.close()


def main():
    import json
    import sys

    from appliance import logs
    request = json.load(sys.stdin)
    logs.setup("certificates", str(request["settings"].get("log_level", "INFO")).upper())
    json.dump(run_order(request), sys.stdout)
    return 0


if __name__ == "__main__":
    # run as the module proper, not as __main__: one copy of the module's names (a second
    # one, __main__, would hold classes of its own)
    from appliance.secret.acme import main as module_main
    raise SystemExit(module_main())
