"""Node agent credentials, without the API: the compute daemon (VM seeds) and first boot
(the appliance's own node) use them, and must not pull the web framework in. The node
side reads the file they end up in through credential_file.py.

Agent secrets are 256-bit random strings, so a plain SHA-256 of them is stored (a slow KDF
protects guessable passwords, not these).
"""

import hashlib
import hmac
import secrets
import uuid as uuidlib

from appliance.kinds import COMPUTE_NODES
from state import format_time, utcnow

AGENTS, ENROLLMENTS, RESOURCES = "ua_agents", "ua_enrollments", "ua_resources"
NODES = COMPUTE_NODES


def digest(text):
    return hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()


def same(text, hashed):
    return hashed is not None and hmac.compare_digest(digest(text), hashed)


def issue_credential(store, node_uuid, name=None):
    """Create the node's agent (uuid = the node's) or give it a new secret; returns
    {"agent", "node", "secret"}. Used by enrollment, the compute daemon (VM nodes) and
    first boot (the appliance's own node)."""
    agents = store.collection(AGENTS)
    secret = secrets.token_urlsafe(32)
    current = agents.find_one(node=node_uuid)
    if current is None:
        agent = agents.insert(new_agent(node_uuid, name, secret))
    else:
        fresh = _secret_fields(secret)
        if name:
            fresh["name"] = name
        agent = agents.update(current["uuid"], fresh)
    return {"agent": agent["uuid"], "node": node_uuid, "secret": secret}


def new_agent(node_uuid, name, secret, **extra):
    """The record of a node's agent (its uuid is the node's: one agent per node)."""
    return {"uuid": node_uuid, "name": name or f"agent-{node_uuid[:8]}", "description": "",
            "node": node_uuid, "capabilities": {"capabilities": []}, "facts": {"facts": []},
            **_secret_fields(secret), **extra}


def _secret_fields(secret):
    # a new credential id ends the tokens of the old secret; a sealed copy is only kept
    # for VM seeds (vm_credential), never for a secret handed out by enrollment
    return {"secret_hash": digest(secret), "credential": str(uuidlib.uuid4()),
            "enrolled_at": format_time(utcnow()), "status": "ACTIVE", "secret_sealed": None}


# the API's TLS certificate (public), copied by first boot where the platform's daemons can
# read it (the TLS directory is root's): VM seeds pin it
API_CA_FILE = "api-ca.pem"


def vm_credential(store, settings, node):
    """What a VM node's seed carries as /etc/appliance/agent.json: {"endpoint", "agent",
    "node", "secret"[, "ca"]}, or None (no address yet, or an agent enrolled by token,
    whose secret only that node has). The agent is made on first call with a secret kept
    sealed in its record, so that every seed built for the node carries the same one."""
    endpoint, ca = agent_endpoint(store, settings, node)
    if endpoint is None:
        return None
    from appliance.secret.crypto import SecretBox
    box = SecretBox(store)
    agents = store.collection(AGENTS)
    agent = agents.find_one(node=node["uuid"])
    if agent is None:
        secret = secrets.token_urlsafe(32)
        agent = agents.insert(new_agent(node["uuid"], None, secret, secret_sealed=box.seal(
            AGENTS, node["uuid"], "secret_sealed", secret)))
    secret = box.open(AGENTS, agent["uuid"], "secret_sealed", agent.get("secret_sealed"))
    if secret is None or not same(secret, agent.get("secret_hash")):
        return None
    cred = {"endpoint": endpoint, "agent": agent["uuid"], "node": node["uuid"],
            "secret": secret}
    return {**cred, "ca": ca} if ca else cred


def agent_endpoint(store, settings, node):
    """(URL, pinned certificate or None) of the API as `node` reaches it: the setting
    agent_endpoint, else nginx on the node's gateway (HTTPS, the appliance's certificate
    pinned) where first boot left that certificate, else the API's own port there."""
    ca = store.read_private(API_CA_FILE)
    ca = ca.decode() if ca else None
    if settings.get("agent_endpoint"):
        return settings["agent_endpoint"], ca if settings["agent_endpoint"].startswith(
            "https:") else None
    gateway = (node.get("default_network") or {}).get("gateway")
    if not gateway:
        return None, None
    if ca:
        return f"https://{gateway}", ca
    return f"http://{gateway}:{settings['api_port']}", None
