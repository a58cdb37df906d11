"""Node credentials: enrollment tokens, agent secrets, the agents' token grant and the
principal their tokens stand for (docs/agent.md, "Credential").

Enrollment tokens and agent secrets are 256-bit random strings, so a plain SHA-256 of them
is stored (a slow KDF protects guessable passwords, not these). A secret is the client
secret of the grant `client_credentials` (client_id = the agent's uuid); the token it gives
carries the agent's credential id as its session: a re-enrollment draws a new id, which
ends every token of the old secret at once.
"""

import datetime
import secrets

from appliance.api.errors import Conflict, Forbidden, Unauthorized
from appliance.api.routing import Reply
from state import format_time, utcnow

from .credentials import (AGENTS, ENROLLMENTS, NODES, RESOURCES, digest,  # noqa: F401
                          issue_credential, same)

ENROLL_TTL = 3600
# what an agent's token may do; each route's handler then checks that it acts for the
# token's own agent or node
AGENT_PERMISSIONS = frozenset({"ua.agent.payload", "ua.agent.report", "em.service.lease"})
# the claim that makes an access token an agent's
AGENT_CLAIM = "agt"


class AgentPrincipal:
    """The caller behind an agent's token: its agent and node, a fixed set of
    permissions, and no user or project (so it passes no AUTHENTICATED route)."""

    user = None
    user_uuid = None
    project_id = None
    permissions = AGENT_PERMISSIONS

    def __init__(self, agent, claims):
        self.agent = agent["uuid"]
        self.node = agent["node"]
        self.claims = claims

    def allows(self, required):
        return required in AGENT_PERMISSIONS


def agent_of(call):
    """The AgentPrincipal of the call, or None for a user (or the platform)."""
    principal = call.principal
    return principal if isinstance(principal, AgentPrincipal) else None


def require_own(call, agent_uuid=None, node_uuid=None):
    """An agent acts only for itself and its node: 403 otherwise. Users pass (their
    route permission already decided)."""
    principal = agent_of(call)
    if principal is None:
        return
    if (agent_uuid is not None and agent_uuid != principal.agent) or (
            node_uuid is not None and node_uuid != principal.node):
        raise Forbidden("an agent may act only for its own node")


def mint_enrollment(store, node_uuid, ttl=ENROLL_TTL):
    """A single-use enrollment token for the node: {"token", "expires_at"}."""
    # hex, not urlsafe base64: a token typed after `--token` must never begin with "-",
    # which the CLI would read as an option (1 in 64 urlsafe tokens did)
    token = secrets.token_hex(32)
    expires = format_time(utcnow() + datetime.timedelta(seconds=ttl))
    enrollments = store.collection(ENROLLMENTS)
    now = format_time(utcnow())
    enrollments.delete_where(lambda r: r["expires_at"] < now or r.get("used_at"))
    enrollments.insert({"node": node_uuid, "token_hash": digest(token), "expires_at": expires,
                        "used_at": None})
    return {"token": token, "expires_at": expires}


def redeem(store, token, name=None):
    """Trade an enrollment token for the node's credential. Unknown, expired and used
    tokens are all 401: the token is the caller's only authentication."""
    if not isinstance(token, str) or not token:
        raise Unauthorized("an enrollment token is required")
    enrollments = store.collection(ENROLLMENTS)
    found = enrollments.find_one(token_hash=digest(token))
    if found is None:
        raise Unauthorized("unknown enrollment token")
    if found.get("used_at"):
        raise Unauthorized("enrollment token already used")
    if found["expires_at"] <= format_time(utcnow()):
        raise Unauthorized("enrollment token expired")
    # compare-and-set: of two redemptions at once, one finds the token used
    enrollments.update(found["uuid"], {"used_at": format_time(utcnow())},
                       expect_revision=found["revision"])
    if store.collection(NODES).get(found["node"]) is None:
        raise Conflict(f"node {found['node']} no longer exists")
    return issue_credential(store, found["node"], name)


# ---- the token endpoint and the authenticator's side ----------------------------------

class AgentTokens:
    """Plugged into appliance.iam.auth.Authenticator: the grant `client_credentials` and
    the principal of the tokens it issues."""

    def __init__(self, authenticator):
        self.auth = authenticator
        self.store = authenticator.store

    def grant(self, body):
        from appliance.iam.auth import OAuthError
        client_id, secret = body.get("client_id"), body.get("client_secret")
        if not isinstance(client_id, str) or not isinstance(secret, str) or not secret:
            raise OAuthError("invalid_request", "client_id and client_secret are required")
        agent = self.store.collection(AGENTS).get(client_id.lower()) \
            if len(client_id) == 36 else None
        if agent is None or not same(secret, agent.get("secret_hash")) \
                or agent.get("status") == "DISABLED":
            raise OAuthError("invalid_client", "client authentication failed", 401)
        ttl = self.auth.api.settings["token_ttl"]
        token, expires_at = self.auth.signer.issue(
            agent["uuid"], None, agent["credential"], "access", ttl,
            extra={AGENT_CLAIM: agent["uuid"]})
        return Reply({"access_token": token, "token_type": "Bearer", "expires_in": ttl,
                      "expires_at": expires_at, "scope": ""}, 200,
                     {"Cache-Control": "no-store"})

    def principal(self, claims):
        agent = self.store.collection(AGENTS).get(claims[AGENT_CLAIM])
        if agent is None or agent.get("status") == "DISABLED":
            raise Unauthorized("token of an unknown or disabled agent")
        if claims.get("sid") != agent.get("credential"):
            raise Unauthorized("token of a replaced agent credential")
        return AgentPrincipal(agent, claims)
