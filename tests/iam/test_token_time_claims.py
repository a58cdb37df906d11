"""A validly signed token whose `exp`, `iat` or `nbf` is not a JSON number is 401
(issue 25): PyJWT alone took `"exp": "1795665723"`, a numeric string, as a time.
The tokens here are signed with the server's real key, so only the claim's type is wrong."""

import time

import jwt

from appliance.iam import tokens


def signed(server, claims):
    return jwt.encode(claims, server.store.read_private(tokens.KEY_FILE),
                      algorithm=tokens.ALGORITHM)


def test_time_claims_must_be_numbers(server, admin):
    claims = jwt.decode(admin.token, options={"verify_signature": False})
    now = int(time.time())
    # the same claims, numbers: accepted (the check refuses the type, not the token)
    assert server.client(signed(server, claims)).get("/v1/iam/users").status == 200
    for name, value in (("exp", str(now + 3600)), ("iat", str(now)), ("nbf", str(now - 5)),
                        ("exp", f"{now + 3600}.0"), ("exp", True), ("iat", None),
                        ("exp", [now + 3600]), ("nbf", {"at": now})):
        token = signed(server, {**claims, name: value})
        resp = server.client(token).get("/v1/iam/users")
        assert resp.status == 401, (name, value, resp)
        assert resp.json["type"] == "Unauthorized"
    # nor as a refresh token
    refresh = signed(server, {**claims, "typ": "refresh", "exp": str(now + 3600)})
    resp = server.client().post("/v1/iam/clients/default/actions/get_token/invoke",
                                {"grant_type": "refresh_token", "refresh_token": refresh})
    assert resp.status == 400 and resp.json["error"] == "invalid_grant", resp
    # a numeric nbf is fine
    assert server.client(signed(server, {**claims, "nbf": now - 5})).get(
        "/v1/iam/users").status == 200
