"""The `/v1/ua/` API (reference shapes, docs/agent.md): agents, the actual resources the
agents report, the target resources computed from the producers, the payload long poll,
the report action and enrollment.
"""

import logging

import orjson

from appliance import metrics
from appliance.api.errors import ApiError, BadRequest, Conflict, Forbidden
from appliance.api.longlived import Parked, can_hand_over
from appliance.api.fields import DateTime, Enum, Field, Object, String, UUID
from appliance.api.resource import Action, Resource
from appliance.api.routing import PUBLIC, Reply
from appliance.api.validation import Validator
from appliance.kinds import ADMIN_PROJECT
from appliance.tenancy import is_platform

from . import capabilities, protocol
from .enroll import (AGENT_CLAIM, AGENTS, NODES, RESOURCES, AgentTokens, mint_enrollment,
                     redeem, require_own)
from .poll import PayloadHub, poll_limit
from .status import WATCHED
from .targets import View, items_for

# the payload's long poll, among the API's long-lived connections (docs/metrics.md)
LONG_POLL = "agent_long_poll"
log = logging.getLogger("appliance.agent")

AGENTS_PATH = "/v1/ua/agents"
MAX_WAIT = 30
STATUSES = ("ACTIVE", "IN_PROGRESS", "ERROR")
_UUID = {"type": "string", "format": "uuid"}
REPORT_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "resources": {"type": "array", "maxItems": 10000, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["uuid", "kind", "master", "hash", "status"],
            "properties": {
                "uuid": _UUID, "master": _UUID,
                "kind": {"type": "string", "minLength": 1, "maxLength": 64},
                "hash": {"type": "string", "maxLength": 64},
                "status": {"enum": list(STATUSES)},
                "reason": {"type": ["string", "null"], "maxLength": 4096},
                "value": {"type": ["object", "null"]}}}},
        "removed": {"type": "array", "maxItems": 10000, "items": _UUID},
        "full": {"type": "boolean"}}}
ENROLL_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["token"],
                 "properties": {"token": {"type": "string", "maxLength": 256},
                                "name": {"type": "string", "minLength": 1,
                                         "maxLength": 255}}}
MINT_SCHEMA = {"type": ["object", "null"], "additionalProperties": False,
               "properties": {"ttl": {"type": "integer", "minimum": 60,
                                      "maximum": 7 * 86400,
                                      "description": "seconds the token lives (3600)"}}}
# the reference CLI sends its action's kwargs as the body: none for issue_key
ISSUE_KEY_SCHEMA = {"type": ["object", "null"], "additionalProperties": False,
                    "properties": {}}
CREDENTIAL_SCHEMA = {"type": "object", "properties": {
    "agent": _UUID, "node": _UUID, "secret": {"type": "string"}}}


def common_fields():
    return [Field("kind", String(64), read_only=True),
            Field("hash", String(64), read_only=True),
            Field("full_hash", String(64), read_only=True),
            Field("status", String(32), read_only=True),
            Field("reason", String(4096), read_only=True,
                  description="why the status is not ACTIVE"),
            Field("node", UUID(), read_only=True),
            Field("agent", UUID(), read_only=True),
            Field("res_uuid", UUID(), read_only=True, description="the master resource"),
            Field("master_kind", String(64), read_only=True),
            Field("value", Object(), hidden=True)]


class Agents(Resource):
    def __init__(self):
        super().__init__(
            name="Agent", path=AGENTS_PATH, kind=AGENTS, service="ua", policy="agent",
            operations=("list", "create", "get"), unique=[("node",)],
            description="a node's agent (one per node); credentials come from enrollment",
            fields=[
                Field("name", String(255), required=True),
                Field("description", String(255), default=""),
                Field("node", UUID(), required=True, create_only=True),
                Field("capabilities", Object(), default=lambda: {"capabilities": []}),
                Field("facts", Object(), default=lambda: {"facts": []}),
                Field("status", Enum("NEW", "ACTIVE", "ERROR", "DISABLED"), read_only=True),
                Field("enrolled_at", DateTime(), read_only=True,
                      description="when its current secret was issued"),
                Field("secret_hash", String(), hidden=True),
                Field("credential", String(), hidden=True),
                Field("secret_sealed", String(), hidden=True),
            ],
            actions=[Action("report", self.report, summary="Report the agent's actual "
                            "resources (docs/agent.md)", request_schema=REPORT_SCHEMA,
                            response_schema={"type": "object"})])
        self.report_validator = Validator(REPORT_SCHEMA)
        self.issue_key_validator = Validator(ISSUE_KEY_SCHEMA)
        self.hub = None

    def prepare_create(self, call, record):
        if self.api.store.collection(NODES).get(record["node"]) is None:
            raise BadRequest(f"node: no node {record['node']}")
        record["status"] = "NEW"
        return record

    # ---- issue_key ------------------------------------------------------------------

    def issue_key(self, call):
        # the key is the node's, as get_private_key gives it to the node's project owner;
        # through /v1/ua/ it is the platform's (the reference's policy is admin-only).
        # Checked before the agent is looked up: a refused caller learns nothing of which
        # agents exist
        if not is_platform(call.principal):
            raise Forbidden("issue_key is the platform's: use an unscoped token or one "
                            "scoped to the admin project")
        agent = self.load_visible(call, call.params["uuid"])
        self.issue_key_validator.check(call.body)
        nodes = self.api.resources["/v1/compute/nodes"]
        node = nodes.collection().get(agent["node"])
        if node is None:
            raise Conflict(f"the agent's node {agent['node']} no longer exists")
        return {"key": nodes.get_private_key(call, node)}

    # ---- payload ---------------------------------------------------------------------

    def payload(self, call):
        agent = self.load_visible(call, call.params["uuid"])
        require_own(call, agent_uuid=agent["uuid"])
        known = call.query.get("hash") or None
        wait = _wait_seconds(call.query.get("wait"))
        store = self.api.store

        def compute():
            node = store.collection(NODES).get(agent["node"])
            if node is None:
                # no payload at all, not an empty one: the agent keeps what it has
                raise Conflict(f"the agent's node {agent['node']} no longer exists")
            try:
                items, digest = items_for(View(store, self.box, self.api.settings), node)
            except ApiError:
                raise
            except Exception:
                log.exception("payload of agent %s", agent["uuid"])
                raise ApiError("the payload cannot be computed now; see the API log", 503,
                               "ServiceUnavailable", {"Retry-After": "1"}) from None
            return digest, {"hash": digest, "resources": items}

        if wait and can_hand_over():
            # the wait goes to the API's event loop and frees this thread (docs/long-lived.md)
            answer, wait_on_loop = self.hub.park(compute, known, wait,
                                                 key=agent["node"])
            if wait_on_loop is not None:
                return Parked(lambda exchange: _answer_on_loop(wait_on_loop, exchange))
            body, waited = answer
        elif wait:
            with metrics.long_lived(LONG_POLL):
                body, waited = self.hub.wait_for(compute, known, wait)
        else:
            body, waited = self.hub.wait_for(compute, known, wait)
        # over the long-poll limit: the agent polls again after a pause (docs/agent.md)
        return Reply(body, 200, {} if waited else {"Retry-After": "1"})

    # ---- report ----------------------------------------------------------------------

    def report(self, call, agent):
        require_own(call, agent_uuid=agent["uuid"])
        body = call.body if call.body is not None else {}
        self.report_validator.check(body)
        node = agent["node"]
        rows = {}
        for i, item in enumerate(body.get("resources", ())):
            if item["uuid"] != protocol.target_uuid(node, item["kind"], item["master"]):
                raise BadRequest(f"resources[{i}].uuid: not the target of {item['kind']} "
                                 f"{item['master']} on this agent's node")
            value = item.get("value")
            rows[item["uuid"]] = {
                "uuid": item["uuid"], "kind": item["kind"], "hash": item["hash"],
                "full_hash": protocol.item_hash({"kind": item["kind"], "value": value}),
                "status": item["status"], "reason": item.get("reason"), "value": value,
                "node": node, "agent": agent["uuid"], "res_uuid": item["master"],
                "master_kind": capabilities.MASTERS.get(item["kind"])}
        removed = set(body.get("removed", ())) - set(rows)
        coll = self.api.store.collection(RESOURCES)
        fresh, changed = [], {}
        for uuid, row in rows.items():
            current = coll.get(uuid)
            if current is None:
                fresh.append(row)
            elif any(current.get(k) != v for k, v in row.items()):
                changed[uuid] = (current["revision"], row)
        if fresh:
            coll.insert_many(fresh)
        if changed:
            coll.update_many(changed)
        if body.get("full"):
            gone = coll.delete_where(lambda r: r.get("node") == node and r["uuid"] not in rows)
        elif removed:
            gone = coll.delete_where(lambda r: r.get("node") == node and r["uuid"] in removed)
        else:
            gone = []
        return {"stored": len(fresh) + len(changed), "removed": len(gone)}

    def register(self, api):
        super().register(api)
        metrics.declare_long_lived(LONG_POLL)
        from appliance.secret.crypto import SecretBox
        self.box = SecretBox(api.store)
        self.hub = PayloadHub(api.store, lambda: watched_kinds(api),
                              poll_limit(api.settings),
                              loop_limit=api.settings["agent_max_polls"],
                              eventloop=getattr(api, "eventloop", None))
        api.closers.append(self.hub.stop)
        api.route("GET", f"{self.path}/<uuid>/payload", self._admitted(self.payload),
                  permission="ua.agent.payload", tag="ua", resource=self,
                  summary="The agent's target resources; with hash and wait (seconds, "
                          f"0..{MAX_WAIT}) a long poll that answers when they differ from "
                          "hash (docs/agent.md)",
                  response_schema={"type": "object", "properties": {
                      "hash": {"type": "string"}, "resources": {"type": "array"}}})
        api.route("POST", f"{self.path}/<uuid>/actions/issue_key/invoke",
                  self._admitted(self.issue_key), permission="ua.agent.issue_key",
                  tag="ua", resource=self, request_schema=ISSUE_KEY_SCHEMA,
                  summary="The key of the agent's node (the reference's node encryption "
                          "key, made if missing; the node's get_private_key): platform "
                          "callers only (docs/agent.md)",
                  response_schema={"type": "object", "required": ["key"],
                                   "properties": {"key": {"type": "string"}}})


async def _answer_on_loop(wait_on_loop, exchange):
    with metrics.long_lived(LONG_POLL):
        body = await wait_on_loop(exchange.gone)
    if not exchange.gone.is_set():
        await exchange.answer(200, {}, "application/json", orjson.dumps(body))


def _wait_seconds(text):
    if text in (None, ""):
        return 0.0
    try:
        wait = float(text)
    except ValueError:
        raise BadRequest(f"wait: must be a number of seconds from 0 to {MAX_WAIT}") from None
    if not 0 <= wait <= MAX_WAIT:        # NaN fails both comparisons
        raise BadRequest(f"wait: must be a number of seconds from 0 to {MAX_WAIT}")
    return wait


def watched_kinds(api):
    """What a payload may read: every kind the API serves, every master kind, and what
    the status step watches (a kind a producer reads that this API may not serve, such as
    secret_certificates for LB vhosts)."""
    return {r.kind for r in api.resources.values()} | set(capabilities.MASTERS.values()) \
        | set(WATCHED)


class ActualResources(Resource):
    def __init__(self):
        super().__init__(
            name="AgentResource", path="/v1/ua/resources", kind=RESOURCES, service="ua",
            policy="resource", operations=("list", "get"), fields=common_fields(),
            description="what an agent reports it has applied (uuid = the target's)")


class _Computed:
    """The read side of a collection, over records computed for one request."""

    def __init__(self, records):
        self._records = {r["uuid"]: r for r in records}

    def records(self):
        return list(self._records.values())

    def get(self, uuid):
        return self._records.get(uuid)

    def by(self, field, value):
        return [r for r in self._records.values() if r.get(field) == value]


class TargetResources(Resource):
    def __init__(self):
        super().__init__(
            name="TargetResource", path="/v1/ua/target_resources",
            kind="ua_target_resources", service="ua", policy="target_resource",
            operations=("list", "get"),
            fields=common_fields() + [Field("master", UUID(), read_only=True)],
            description="what each agent's node should have, computed from the producers "
                        "when read (never stored)")

    def collection(self):
        store = self.api.store
        view = View(store, settings=self.api.settings)
        actual = store.collection(RESOURCES)
        nodes = store.collection(NODES)
        out = []
        for agent in store.collection(AGENTS).records():
            node = nodes.get(agent.get("node") or "")
            if node is None:
                continue
            items, _ = items_for(view, node)
            for item in items:
                out.append(target_row(item, agent, actual.get(item["uuid"])))
        return _Computed(out)


def target_row(item, agent, actual):
    if item.get("unavailable"):
        # `refused`: the platform will not deliver it as it stands (configs/paths.py)
        status = "ERROR" if item.get("refused") else "IN_PROGRESS"
        reason = item["unavailable"]
    elif actual is None:
        status, reason = "NEW", None
    elif actual.get("hash") == item["hash"]:
        status, reason = actual.get("status"), actual.get("reason")
    else:
        status, reason = "IN_PROGRESS", "the agent has not applied it yet"
    return {"uuid": item["uuid"], "kind": item["kind"], "hash": item["hash"],
            "full_hash": item["hash"], "status": status, "reason": reason,
            "node": agent["node"], "agent": agent["uuid"], "res_uuid": item["master"],
            "master": item["master"], "master_kind": item.get("master_kind"),
            "value": item.get("value")}


# ---- enrollment -------------------------------------------------------------------------

def register_enrollment(api, nodes):
    validator, mint_validator = Validator(ENROLL_SCHEMA), Validator(MINT_SCHEMA)

    def enroll(call):
        body = call.body if isinstance(call.body, dict) else {}
        validator.check(body)
        return redeem(api.store, body["token"], body.get("name"))

    def mint(call):
        # enrollment hands out a node credential: the platform's call, not a project's
        if call.principal is not None and call.principal.project_id not in (None,
                                                                           ADMIN_PROJECT):
            raise Forbidden("only the platform (an unscoped or admin-project token) may "
                            "enroll a node")
        node = nodes.load_visible(call, call.params["uuid"])
        mint_validator.check(call.body)
        ttl = (call.body or {}).get("ttl") or api.settings["agent_enroll_ttl"]
        return mint_enrollment(api.store, node["uuid"], ttl)

    api.route("POST", "/v1/ua/enroll", enroll, permission=PUBLIC, tag="ua",
              summary="Trade a single-use enrollment token for the node's agent credential "
                      "(the token is the authentication)",
              request_schema=ENROLL_SCHEMA, response_schema=CREDENTIAL_SCHEMA,
              error_schemas={"401": {"description": "Unauthorized: the enrollment token is "
                                                    "missing, unknown, used or expired",
                                     "$ref": "#/components/schemas/Error"}})
    api.route("POST", f"{nodes.path}/<uuid>/actions/enroll/invoke", mint,
              permission="compute.node.enroll", tag="compute", resource=nodes,
              summary="A single-use token that enrolls the node's agent "
                      "(`appliance agent enroll`)", request_schema=MINT_SCHEMA,
              response_schema={"type": "object", "properties": {
                  "token": {"type": "string"}, "expires_at": {"type": "string"}}})


def register(api):
    agents = Agents()
    for resource in (agents, ActualResources(), TargetResources()):
        resource.register(api)
    register_enrollment(api, api.resources["/v1/compute/nodes"])
    tokens = AgentTokens(api.authenticate)
    api.authenticate.grants["client_credentials"] = tokens.grant
    api.authenticate.principals[AGENT_CLAIM] = tokens.principal
