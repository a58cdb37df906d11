"""The services API: `/v1/em/services/`, its actions and the monopoly lease.

Fields follow the reference (docs/services.md). The API records what the user wants; the
node agents make it so and the status step writes `status`, `status_reason` and
`node_status` back. Actions change the desired state in the record (which changes the
agents' payload) and answer at once.
"""

import datetime

from appliance import targeting
from appliance.api.errors import BadRequest, Conflict, Forbidden
from appliance.api.fields import UUID, Enum, Field, Integer, List, Object, String, Tags
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.api.validation import Validator
from appliance.kinds import COMPUTE_NODES, UUID_PATTERN
from appliance.targeting import TARGET_SCHEMA
from appliance.tenancy import is_platform
from state import DuplicateKey, RevisionConflict, format_time

from .records import KIND, MONOPOLY_KINDS, TARGET_STATUSES
from .unit import COMMAND_PATTERN

PATH = "/v1/em/services"
LEASES = "em_service_leases"
STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
SERVICE_KINDS = ("simple", "oneshot", "monopoly", "monopoly_oneshot")
NAME = r"^[A-Za-z0-9_-]{0,100}$"
# a name systemd takes in User=/Group= (a user name or a number), never a quote or a space
ACCOUNT = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,254}$"
COMMAND = {"type": "string", "minLength": 1, "maxLength": 262144,
           "pattern": COMMAND_PATTERN}
_UUID = {"type": "string", "pattern": UUID_PATTERN}

SERVICE_TYPE = {
    "type": "object",
    "oneOf": [
        {"properties": {"kind": {"const": "simple"},
                        "count": {"type": "integer", "minimum": 1, "maximum": 1000}},
         "required": ["kind"], "additionalProperties": False},
        {"properties": {"kind": {"const": "oneshot"}},
         "required": ["kind"], "additionalProperties": False},
        {"properties": {"kind": {"const": "monopoly"}, "count": {"const": 1}},
         "required": ["kind"], "additionalProperties": False},
        {"properties": {"kind": {"const": "monopoly_oneshot"}},
         "required": ["kind"], "additionalProperties": False},
    ],
    "description": "kind simple (count 1-1000, default 1, as the reference: not used), "
                   "oneshot, monopoly (one node of the target at a time, count 1) or "
                   "monopoly_oneshot",
}
ORDER_ENTRY = {
    "type": "object",
    "oneOf": [
        {"properties": {"kind": {"const": "shell"}, "command": COMMAND},
         "required": ["kind", "command"], "additionalProperties": False},
        {"properties": {"kind": {"const": "service"}, "service": _UUID},
         "required": ["kind", "service"], "additionalProperties": False},
    ],
}
ORDER_LIST = {"type": "array", "items": ORDER_ENTRY, "maxItems": 64,
              "description": "{kind: shell, command} runs before (ExecStartPre) or after "
                             "(ExecStartPost) the command; {kind: service, service: uuid} "
                             "orders the unit before or after that service's unit on every "
                             "node both target"}
LEASE_BODY = {"type": "object", "required": ["node"], "additionalProperties": False,
              "properties": {"node": _UUID}}
LEASE_REPLY = {"type": "object", "required": ["holder", "expires_at", "granted"],
               "properties": {"holder": {"type": ["string", "null"]},
                              "expires_at": {"type": ["string", "null"]},
                              "granted": {"type": "boolean"},
                              "seconds": {"type": "number"}}}
_LEASE_BODY = Validator(LEASE_BODY)


class OrderList(List):
    def __init__(self):
        super().__init__(Object(ORDER_ENTRY), max_items=64)

    def schema(self):
        return dict(ORDER_LIST)


def may_lease_any(principal):
    """An admin acting for the platform (appliance.tenancy.is_platform: never a node
    agent) with the lease permission (the admin role's *.*.*)."""
    return is_platform(principal) and (principal is None or
                                       principal.allows("em.service.lease"))


def agent_node(principal):
    """The node whose agent `principal` is (a node agent's principal carries `node`,
    appliance/agent/enroll.py), else None."""
    return getattr(principal, "node", None)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


class Services(Resource):
    def __init__(self):
        super().__init__(
            name="Service", path=PATH, kind=KIND, service="em", policy="service",
            project_scoped=True,
            description="a command run as a systemd unit on the nodes of its target "
                        "(docs/services.md)",
            fields=[
                Field("name", String(100, pattern=NAME), default="", nullable=False),
                Field("description", String(255), default="", nullable=False),
                Field("project_id", UUID(), required=True, create_only=True),
                Field("tags", Tags(), default=list),
                Field("path", String(262144, min_length=1, pattern=COMMAND_PATTERN),
                      required=True,
                      description="the command, run as /bin/sh -c '<path>'; one line"),
                Field("target", Object(TARGET_SCHEMA), required=True,
                      description="{kind: node, node}, {kind: node_set, node_set} or "
                                  "{kind: nodes, nodes: [...]}"),
                Field("user", String(255, min_length=1, pattern=ACCOUNT), default="root",
                      nullable=False),
                Field("group", String(255, min_length=1, pattern=ACCOUNT)),
                Field("service_type", Object(SERVICE_TYPE), required=True),
                Field("before", OrderList(), default=list, nullable=False),
                Field("after", OrderList(), default=list, nullable=False),
                Field("target_status", Enum(*TARGET_STATUSES), default="enabled",
                      nullable=False,
                      description="enabled: running and started at boot; disabled: "
                                  "stopped, not at boot; started: running, not at boot; "
                                  "stopped: stopped now, started again at boot"),
                Field("restart_counter", Integer(), read_only=True,
                      description="counts the restart actions; the agents restart the "
                                  "unit when it changes"),
                Field("update_counter", Integer(), read_only=True,
                      description="counts the update actions; the agents restart a "
                                  "running unit when it changes"),
                Field("status", Enum(*STATUSES), read_only=True,
                      description="NEW after a write; ACTIVE when every target node runs "
                                  "it as asked"),
                Field("status_reason", String(4096), read_only=True),
                Field("node_status", Object(), read_only=True,
                      description="{node uuid: {status, reason, active_state, exit_code, "
                                  "holder}}"),
            ],
            actions=[
                Action("start", self.start, summary="Run the service (and keep its boot "
                                                    "setting)", response_schema=REF),
                Action("stop", self.stop, summary="Stop the service (and keep its boot "
                                                  "setting)", response_schema=REF),
                Action("restart", self.restart, summary="Restart the service on its "
                                                        "nodes", response_schema=REF),
                Action("update", self.update, summary="Rewrite the unit and restart the "
                                                      "service where it runs",
                       response_schema=REF),
                Action("lease", self.lease,
                       summary="Take or renew the monopoly lease for a node (the node's "
                               "agent, or an admin)",
                       request_schema=LEASE_BODY, response_schema=LEASE_REPLY),
            ])

    def register(self, api):
        super().register(api)
        api.store.collection(LEASES)

    # ---- checks ----------------------------------------------------------------------

    def check_target(self, call, target, project_id):
        targeting.checked(call.store, call.principal, project_id, target)

    def check_order(self, call, record, field, entries):
        services = self.collection()
        for i, entry in enumerate(entries):
            if entry["kind"] != "service":
                continue
            other = services.get(entry["service"].lower())
            if entry["service"].lower() == record["uuid"]:
                raise BadRequest(f"{field}.{i}.service: a service cannot order itself")
            if other is None or other.get("project_id") != record["project_id"]:
                raise BadRequest(f"{field}.{i}.service: no service {entry['service']} in "
                                 f"project {record['project_id']}")
            entry["service"] = entry["service"].lower()

    def normalized_type(self, service_type):
        kind = service_type["kind"]
        if kind in ("simple", "monopoly"):
            return {"kind": kind, "count": service_type.get("count", 1)}
        return {"kind": kind}

    # ---- hooks -----------------------------------------------------------------------

    def prepare_create(self, call, record):
        self.check_target(call, record["target"], record["project_id"])
        record["service_type"] = self.normalized_type(record["service_type"])
        for field in ("before", "after"):
            self.check_order(call, record, field, record[field])
        record.update(restart_counter=0, update_counter=0, status="NEW",
                      status_reason=None, node_status={})
        return record

    def prepare_update(self, call, current, changes):
        merged = {**current, **changes}
        # the whole target at every write, as configs and SSH keys (appliance/targeting.py):
        # a PUT may not keep a target its writer may not give; the kept one is checked on
        # a copy, the stored record is not the caller's to change
        self.check_target(call, changes["target"] if "target" in changes
                          else dict(current["target"]), current["project_id"])
        if "service_type" in changes:
            changes["service_type"] = self.normalized_type(changes["service_type"])
        for field in ("before", "after"):
            if field in changes:
                self.check_order(call, merged, field, changes[field])
        changes.update(status="NEW", status_reason=None)
        return changes

    def declared_links(self):
        def ordering(field):
            return Link(self.kind, self.kind, label=field, values=lambda r: [
                e["service"] for e in r.get(field) or () if e.get("kind") == "service"],
                message=lambda used, users: f"service {users[0]['uuid']} names this one "
                                            f"in its {field}: change that first")
        return [*targeting.links(self.kind), ordering("before"), ordering("after")]

    def after_delete(self, call, record):
        call.store.collection(LEASES).delete_where(lambda r: r["uuid"] == record["uuid"])

    # ---- actions ---------------------------------------------------------------------

    def desire(self, record, changes):
        changes = {**changes, "status": "NEW", "status_reason": None}
        return self.render(self.collection().update(record["uuid"], changes,
                                                    expect_revision=record["revision"]))

    def start(self, call, record):
        boot, _ = TARGET_STATUSES[record["target_status"]]
        return self.desire(record, {"target_status": "enabled" if boot else "started"})

    def stop(self, call, record):
        boot, _ = TARGET_STATUSES[record["target_status"]]
        return self.desire(record, {"target_status": "stopped" if boot else "disabled"})

    def restart(self, call, record):
        if not TARGET_STATUSES[record["target_status"]][1]:
            raise Conflict(f"service {record['uuid']} is {record['target_status']}: start "
                           "it instead")
        return self.desire(record, {"restart_counter": (record.get("restart_counter") or 0)
                                    + 1})

    def update(self, call, record):
        return self.desire(record, {"update_counter": (record.get("update_counter") or 0)
                                    + 1})

    # ---- the monopoly lease ----------------------------------------------------------

    def lease(self, call, record):
        body = call.body if call.body is not None else {}
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        _LEASE_BODY.check(body)
        node = body["node"].lower()
        own = agent_node(call.principal)
        if own is None and not may_lease_any(call.principal):
            raise Forbidden("only the agent of a node the service targets, or an admin, "
                            "may take its lease")
        if own is not None and own != node:
            raise Forbidden(f"this agent acts for node {own}, not {node}")
        if record["service_type"]["kind"] not in MONOPOLY_KINDS:
            raise BadRequest(f"service {record['uuid']} is "
                             f"{record['service_type']['kind']}: only monopoly kinds take "
                             "a lease")
        node_record = call.store.collection(COMPUTE_NODES).get(node)
        if node_record is None or not targeting.names(record["target"], node_record):
            if own is not None:
                raise Forbidden(f"service {record['uuid']} does not target node {node}")
            raise BadRequest(f"node: service {record['uuid']} does not target node {node}")
        return take_lease(call.store, record["uuid"], node,
                          float(call.api.settings["service_lease_seconds"]))


def take_lease(store, service_uuid, node, seconds, clock=now):
    """Grant or renew the lease of `service_uuid` to `node` when it is free, expired or
    already the node's: a compare-and-set on the lease record, so that two agents asking
    at once cannot both get it."""
    leases = store.collection(LEASES)
    at = clock()
    current = leases.get(service_uuid)
    grant = {"holder": node,
             "expires_at": format_time(at + datetime.timedelta(seconds=seconds))}
    # `seconds` lets the agent count the lease on its own clock (no clock skew)
    answer = {**grant, "granted": True, "seconds": seconds}
    if current is None:
        try:
            leases.insert({"uuid": service_uuid, **grant})
        except DuplicateKey:
            # another agent's first lease got in: the API's retry decides again on it
            raise RevisionConflict(LEASES, service_uuid, None, 1) from None
        return answer
    if current.get("holder") not in (None, node) and current["expires_at"] > format_time(at):
        return {"holder": current["holder"], "expires_at": current["expires_at"],
                "granted": False, "seconds": seconds}
    # RevisionConflict when another agent wrote first: the API's retry decides again
    leases.update(service_uuid, grant, expect_revision=current["revision"])
    return answer


REF = {"$ref": "#/components/schemas/Service"}


def all_resources():
    return [Services()]
