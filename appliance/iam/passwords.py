"""Password hashing with scrypt (stdlib): slow on purpose, salted, constant-time compare.

`verify` against a missing user still runs the KDF on a dummy hash, so an unknown user
costs the same time as a wrong password.
"""

import base64
import hashlib
import hmac
import os

N, R, P = 2 ** 14, 8, 1
_MAXMEM = 64 * 1024 * 1024


def _kdf(password, salt, n=N, r=R, p=P):
    # surrogatepass: a lone surrogate (JSON allows "\ud800") is hashed, not a crash
    return hashlib.scrypt(password.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r,
                          p=p, maxmem=_MAXMEM)


def hash_password(password):
    salt = os.urandom(16)
    digest = _kdf(password, salt)
    b64 = base64.b64encode
    return f"scrypt${N}${R}${P}${b64(salt).decode()}${b64(digest).decode()}"


# The same parameters and sizes as a real hash (the KDF's work is what matters), built
# without running the KDF: hashing at import cost every importing process a scrypt, seconds
# of the appliance's boot under TCG. Nothing can match it: verify() also wants `encoded`.
_DUMMY = (f"scrypt${N}${R}${P}${base64.b64encode(bytes(16)).decode()}$"
          f"{base64.b64encode(bytes(64)).decode()}")


def verify(password, encoded):
    """True when `password` matches `encoded`; `encoded=None` burns the same time."""
    target = encoded or _DUMMY
    try:
        scheme, n, r, p, salt, digest = target.split("$")
        candidate = _kdf(password, base64.b64decode(salt), int(n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(candidate, base64.b64decode(digest)) and encoded is not None
