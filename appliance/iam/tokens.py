"""JWTs: HS256 signed with a key made on first start and kept in a private file of the
state directory (mode 0600), outside the files of ordinary kinds.

Access and refresh tokens share a session id (`sid`); logout revokes the session, so both
die at once. `pwv` is the user's password version at issuance: a password change ends
the tokens issued before it (but those of the session that made it). HS256 only: `alg: none` and every other algorithm are refused.
`exp`, `iat` and `nbf` must be JSON numbers (finite): PyJWT alone accepts numeric strings.
"""

import datetime
import math
import secrets
import threading
import time
import uuid as uuidlib

import jwt

from state import format_time

KEY_FILE = "jwt-signing.key"
ISSUER = "appliance"
AUDIENCE = "appliance-api"
ALGORITHM = "HS256"


TIME_CLAIMS = ("exp", "iat", "nbf")


class InvalidToken(Exception):
    pass


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


CACHE_SIZE = 10000


class TokenSigner:
    def __init__(self, store):
        self.key = store.write_private(KEY_FILE, secrets.token_bytes(64), exclusive=True)
        # token -> claims of tokens that verified; checking a signature costs more than
        # the rest of a request. Expiry is still checked on every use; revocation is
        # checked by the caller on every request.
        self._verified = {}
        self._lock = threading.Lock()

    def issue(self, user_uuid, project_id, session, kind, ttl, now=None, password_version=0,
              extra=None):
        now = now or datetime.datetime.now(datetime.timezone.utc)
        expires = now + datetime.timedelta(seconds=ttl)
        claims = {"sub": user_uuid, "jti": str(uuidlib.uuid4()), "sid": session,
                  "iat": int(now.timestamp()), "exp": int(expires.timestamp()),
                  "iss": ISSUER, "aud": AUDIENCE, "project_id": project_id, "typ": kind,
                  "pwv": password_version, **(extra or {})}
        return jwt.encode(claims, self.key, algorithm=ALGORITHM), format_time(expires)

    def verify(self, token, kind):
        claims = self._verified.get(token)
        if claims is not None:
            if claims["exp"] <= time.time():
                raise InvalidToken("token expired")
            if claims.get("typ") != kind:
                raise InvalidToken(f"not an {kind} token")
            return claims
        claims = self._verify(token, kind)
        with self._lock:
            if len(self._verified) >= CACHE_SIZE:
                self._verified.clear()
            self._verified[token] = claims
        return claims

    def _verify(self, token, kind):
        try:
            claims = jwt.decode(token, self.key, algorithms=[ALGORITHM], audience=AUDIENCE,
                                issuer=ISSUER,
                                options={"require": ["sub", "jti", "sid", "exp", "iat"]})
        except jwt.ExpiredSignatureError:
            raise InvalidToken("token expired") from None
        except jwt.PyJWTError:
            raise InvalidToken("token does not verify") from None
        # PyJWT takes a numeric string ("1795665723") for a time; RFC 7519 says NumericDate
        # is a JSON number, and the code after this compares numbers
        for name in TIME_CLAIMS:
            if name in claims and not _is_number(claims[name]):
                raise InvalidToken(f"token claim {name} is not a number")
        if claims.get("typ") != kind:
            raise InvalidToken(f"not an {kind} token")
        return claims
