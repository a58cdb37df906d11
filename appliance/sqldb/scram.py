"""SCRAM-SHA-256 verifiers (RFC 5802, RFC 7677) in PostgreSQL's format.

Only the verifier of a user's password is kept: PostgreSQL takes it as the role's password
(`CREATE ROLE x PASSWORD 'SCRAM-SHA-256$...'`) and authenticates the clear password
against it, so the clear password never needs to be stored nor sent to a node.

The password is prepared as PostgreSQL's own `pg_saslprep` (src/common/saslprep.c) does
before hashing, or a client that sends a non-ASCII password would not match: a pure-ASCII
password is taken as it is; otherwise SASLprep (RFC 4013) maps, normalizes (NFKC) and
checks it, and a password SASLprep refuses is used as its raw UTF-8 bytes, as PostgreSQL
does (libpq does the same on the client side).
"""

import base64
import hashlib
import hmac
import os
import re
import stringprep
import unicodedata

ITERATIONS = 4096
SALT_BYTES = 16
PREFIX = "SCRAM-SHA-256$"
_B64 = r"[A-Za-z0-9+/]+={0,2}"
VERIFIER_RE = re.compile(rf"^SCRAM-SHA-256\$(\d+):({_B64})\$({_B64}):({_B64})\Z")

_PROHIBITED = (stringprep.in_table_c12, stringprep.in_table_c21, stringprep.in_table_c22,
               stringprep.in_table_c3, stringprep.in_table_c4, stringprep.in_table_c5,
               stringprep.in_table_c6, stringprep.in_table_c7, stringprep.in_table_c8,
               stringprep.in_table_c9, stringprep.in_table_a1)


def saslprep(password):
    """The prepared password as bytes: PostgreSQL's pg_saslprep, falling back to the raw
    UTF-8 bytes where PostgreSQL does (an empty result, a prohibited character, broken
    bidirectional text)."""
    raw = password.encode("utf-8", "surrogatepass")
    if password.isascii():
        return raw
    mapped = "".join(" " if stringprep.in_table_c12(c) else c
                     for c in password if not stringprep.in_table_b1(c))
    prepared = unicodedata.normalize("NFKC", mapped)
    if not prepared:
        return raw
    if any(check(c) for c in prepared for check in _PROHIBITED):
        return raw
    if any(stringprep.in_table_d1(c) for c in prepared):
        if any(stringprep.in_table_d2(c) for c in prepared):
            return raw
        if not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1])):
            return raw
    return prepared.encode("utf-8")


def _hmac(key, message):
    return hmac.new(key, message, hashlib.sha256).digest()


def keys(password, salt, iterations=ITERATIONS):
    """(StoredKey, ServerKey) of a password, salt and iteration count."""
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    return stored, _hmac(salted, b"Server Key")


def verifier(password, salt=None, iterations=ITERATIONS):
    """`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64), a fresh random
    salt unless one is given."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored, server = keys(password, salt, iterations)
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return f"{PREFIX}{iterations}:{b64(salt)}${b64(stored)}:{b64(server)}"


def verifies(password, secret):
    """Whether `password` is the one `secret` (a verifier) was made from."""
    m = VERIFIER_RE.match(secret or "")
    if not m:
        return False
    iterations, salt, stored, server = m.groups()
    want = keys(password, base64.b64decode(salt), int(iterations))
    return hmac.compare_digest(want[0], base64.b64decode(stored)) and \
        hmac.compare_digest(want[1], base64.b64decode(server))
