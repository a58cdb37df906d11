"""JWTs: HS256 signed with a key made on first start and kept in a private file of the
state directory (mode 0600), outside the files of ordinary kinds.

Access and refresh tokens share a session id (`sid`); logout revokes the session, so both
die at once. HS256 only: `alg: none` and every other algorithm are refused.
"""

import datetime
import secrets
import uuid as uuidlib

import jwt

from state import format_time

KEY_FILE = "jwt-signing.key"
ISSUER = "appliance"
AUDIENCE = "appliance-api"
ALGORITHM = "HS256"


class InvalidToken(Exception):
    pass


class TokenSigner:
    def __init__(self, store):
        self.key = store.write_private(KEY_FILE, secrets.token_bytes(64), exclusive=True)

    def issue(self, user_uuid, project_id, session, kind, ttl, now=None):
        now = now or datetime.datetime.now(datetime.timezone.utc)
        expires = now + datetime.timedelta(seconds=ttl)
        claims = {"sub": user_uuid, "jti": str(uuidlib.uuid4()), "sid": session,
                  "iat": int(now.timestamp()), "exp": int(expires.timestamp()),
                  "iss": ISSUER, "aud": AUDIENCE, "project_id": project_id, "typ": kind}
        return jwt.encode(claims, self.key, algorithm=ALGORITHM), format_time(expires)

    def verify(self, token, kind):
        try:
            claims = jwt.decode(token, self.key, algorithms=[ALGORITHM], audience=AUDIENCE,
                                issuer=ISSUER,
                                options={"require": ["sub", "jti", "sid", "exp", "iat"]})
        except jwt.ExpiredSignatureError:
            raise InvalidToken("token expired") from None
        except jwt.PyJWTError:
            raise InvalidToken("token does not verify") from None
        if claims.get("typ") != kind:
            raise InvalidToken(f"not an {kind} token")
        return claims
