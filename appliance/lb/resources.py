"""The LB API (reference-api.md section 3, docs/lb.md): `/v1/network/lb/` with its vhosts,
their routes, and its backend pools.

Every rule of the reference is checked here, before anything is written, plus ours:
vhost ports the appliance itself uses are refused on `core_agent` (the admin project's
only: appliance/tenancy/nodes.py), a project's LB binds no port below 1024 but 80 and 443,
two LBs on one node never share a port, a vhost's cert may name a record of
`/v1/secret/certificates/`, an https vhost may redirect plain HTTP, and pool endpoints
may name nodes or node sets (followed as their addresses change). A write of any child
moves its LB back to IN_PROGRESS: the data plane is rendered again and the status step
judges it anew.
"""

import ipaddress
import re

from appliance.api.errors import BadRequest, Conflict, NotFound
from appliance.api.fields import (UUID, Boolean, Enum, Field, Integer, List, Object,
                                  Reference, String, Tags, UUID_RE)
from appliance.api.links import Link
from appliance.api.resource import Action, Resource
from appliance.api.validation import Validator
from appliance.kinds import COMPUTE_NODES, COMPUTE_SETS, SECRET_CERTIFICATES
from appliance.tenancy import addresses, fetch, is_platform, quotas
from appliance.tenancy.nodes import check_appliance_node, check_nodes, platform_record

from . import conditions, placement, rendered

LB_PATH = "/v1/network/lb"
VHOSTS_PATH = LB_PATH + "/<lb>/vhosts"
ROUTES_PATH = VHOSTS_PATH + "/<vhost>/routes"
POOLS_PATH = LB_PATH + "/<lb>/backend_pools"
LBS, VHOSTS = "network_lb", "network_lb_vhosts"
ROUTES, POOLS = "network_lb_routes", "network_lb_backend_pools"
CERTIFICATES, NODES, SETS = SECRET_CERTIFICATES, COMPUTE_NODES, COMPUTE_SETS
CERT_PATH = "/v1/secret/certificates"
STATUSES = ("NEW", "IN_PROGRESS", "ACTIVE", "ERROR")
PROTOCOLS = ("http", "https", "tcp", "udp")
L7 = ("http", "https")
# the reference's port conflicts within one LB: which protocols may not share a port
CLASHES = {"http": {"https", "tcp"}, "https": {"http", "tcp"},
           "tcp": {"http", "https", "tcp"}, "udp": {"udp"}}
TRANSPORT = {"http": "tcp", "https": "tcp", "tcp": "tcp", "udp": "udp"}
REDIRECT_PORT = 80
PROJECT_MIN_PORT, PROJECT_LOW_PORTS = 1024, (80, 443)    # a project LB's ports
LOCK = "network-lb"         # port and placement rules span LBs and vhosts: one writer
PEM_LIMIT = 100000
DOMAIN = (r"^(?=.{1,253}$)(\*\.)?(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
          r"(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$")

_INT = {"type": "integer"}
TYPE_SCHEMAS = {
    "core": {"type": "object", "additionalProperties": False, "required": ["kind"],
             "properties": {"kind": {"const": "core"},
                            "cpu": {**_INT, "minimum": 1, "maximum": 128},
                            "ram": {**_INT, "minimum": 512, "maximum": 1024 ** 3},
                            "disk_size": {**_INT, "minimum": 10, "maximum": 1024 ** 3},
                            "nodes_number": {**_INT, "minimum": 1, "maximum": 16}}},
    "core_agent": {"type": "object", "additionalProperties": False, "required": ["kind"],
                   "properties": {"kind": {"const": "core_agent"}}},
    "external_node": {"type": "object", "additionalProperties": False,
                      "required": ["kind", "external_node"],
                      "properties": {"kind": {"const": "external_node"},
                                     "external_node": {"type": "string"}}},
}
CORE_DEFAULTS = {"cpu": 1, "ram": 512, "disk_size": 10, "nodes_number": 1}
TYPE_FIELD = {"type": "object", "required": ["kind"],
              "properties": {"kind": {"enum": list(TYPE_SCHEMAS)}}}
_TYPE_CHECK = {k: Validator(s) for k, s in TYPE_SCHEMAS.items()}


def hidden_set(lb):
    """An LB of type core: (nodes, cores, ram MB, disk GB per node) of its hidden set,
    charged to its project's quotas; None for the other types (they run on nodes that are
    counted already)."""
    spec = lb.get("type") or {}
    if spec.get("kind") != "core":
        return None
    return (spec.get("nodes_number") or 0, spec.get("cpu") or 0, spec.get("ram") or 0,
            spec.get("disk_size") or 0)


quotas.declare_hidden_set(LBS, hidden_set)

CERT_SCHEMAS = {
    "raw": {"type": "object", "additionalProperties": False,
            "required": ["kind", "crt", "key"],
            "properties": {"kind": {"const": "raw"},
                           "crt": {"type": "string", "minLength": 1, "maxLength": PEM_LIMIT},
                           "key": {"type": "string", "minLength": 1,
                                   "maxLength": PEM_LIMIT}}},
    "certificate": {"type": "object", "additionalProperties": False,
                    "required": ["kind", "certificate"],
                    "properties": {"kind": {"const": "certificate"},
                                   "certificate": {"type": "string", "maxLength": 128}}},
}
CERT_FIELD = {"type": "object", "required": ["kind"],
              "properties": {"kind": {"enum": list(CERT_SCHEMAS)}}}
_CERT_CHECK = {k: Validator(s) for k, s in CERT_SCHEMAS.items()}

_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_WEIGHT = {"type": "integer", "minimum": 0, "maximum": 1000}
ENDPOINT_SCHEMAS = {
    "host": {"type": "object", "additionalProperties": False, "required": ["kind", "host"],
             "properties": {"kind": {"const": "host"},
                            "host": {"type": "string", "minLength": 1, "maxLength": 260,
                                     "pattern": r"^[A-Za-z0-9._:\[\]-]+$"},
                            "port": _PORT, "weight": _WEIGHT}},
    "node": {"type": "object", "additionalProperties": False, "required": ["kind", "node"],
             "properties": {"kind": {"const": "node"}, "node": {"type": "string"},
                            "port": _PORT, "weight": _WEIGHT}},
    "node_set": {"type": "object", "additionalProperties": False,
                 "required": ["kind", "node_set"],
                 "properties": {"kind": {"const": "node_set"}, "node_set": {"type": "string"},
                                "port": _PORT, "weight": _WEIGHT}},
}
_ENDPOINT_CHECK = {k: Validator(s) for k, s in ENDPOINT_SCHEMAS.items()}


def kind_checked(where, value, checks):
    """A kind-object checked by its kind's schema (so that a message names the field at
    fault rather than "matches none of oneOf"). Returns a copy."""
    if not isinstance(value, dict) or value.get("kind") not in checks:
        raise BadRequest(f"{where}.kind: must be one of {', '.join(checks)}")
    checks[value["kind"]].check_at(value, where)
    return dict(value)


def uuid_of(where, value, path=None):
    """A bare uuid from a uuid or (where `path` is given) a path to it, lower-cased."""
    if isinstance(value, str) and path and value.startswith(path + "/"):
        value = value[len(path) + 1:]
    if not isinstance(value, str) or not UUID_RE.match(value):
        raise BadRequest(f"{where}: must be a UUID" + (f" or {path}/<uuid>" if path else ""))
    return value.lower()


def base_fields():
    return [Field("name", String(255), default="", nullable=False),
            Field("description", String(255), default="", nullable=False)]


def child_status():
    return Field("status", Enum(*STATUSES), read_only=True,
                 description="ACTIVE from creation, as the reference's; the LB carries the "
                             "data plane's status")


class LbChild(Resource):
    """What vhosts, routes and pools share: the LB's project, and the LB moved back to
    IN_PROGRESS by every write (its data plane must be rendered again)."""

    def lbs(self):
        return self.api.resources[LB_PATH]

    def lb_of(self, record):
        return self.api.store.collection(LBS).require(record["lb"])

    def own_project(self, record, parent):
        if record.get("project_id") not in (None, parent["project_id"]):
            raise BadRequest("project_id: must be the load balancer's")
        record["project_id"] = parent["project_id"]

    def touch(self, lb_uuid):
        self.lbs().touch(lb_uuid)

    def create_record(self, call, body):
        with self.api.store.named_lock(LOCK):
            return super().create_record(call, body)

    def update_record(self, call, uuid, body):
        with self.api.store.named_lock(LOCK):
            return super().update_record(call, uuid, body)

    def after_create(self, call, record):
        self.touch(record["lb"])

    def after_update(self, call, before, after):
        self.touch(after["lb"])

    def after_delete(self, call, record):
        self.touch(record["lb"])


# ---- load balancers ---------------------------------------------------------------------

class LoadBalancers(Resource):
    def __init__(self):
        super().__init__(
            name="LoadBalancer", path=LB_PATH, kind=LBS, service="network", policy="lb",
            project_scoped=True,
            description="a load balancer: nginx on the node(s) its type places it on",
            fields=base_fields() + [
                Field("project_id", UUID(), required=True, create_only=True),
                Field("tags", Tags()),
                Field("type", Object(TYPE_FIELD),
                      description="core {cpu (1), ram MB (512), disk_size GB (10), "
                                  "nodes_number (1)}: a node set of its own (the default) | "
                                  "external_node {external_node: node uuid of the project} "
                                  "| core_agent {}: on the appliance itself, admin project "
                                  "only (its default when the appliance has its own node)"),
                Field("ipsv4", List(String(64)), read_only=True, filterable=False,
                      description="the addresses of the nodes the LB runs on"),
                Field("status", Enum(*STATUSES), read_only=True,
                      description="NEW, IN_PROGRESS after any write (its children's too), "
                                  "then ACTIVE when every node applied it, or ERROR"),
                Field("status_reason", String(4096), read_only=True),
                Field("node_status", Object(), read_only=True,
                      description="{node uuid: {status, reason, nginx_check, applied_at}}"),
            ],
            actions=[Action("routes", self.rendered_routes, method="GET",
                            permission="network.lb.read",
                            response_schema=rendered.RESPONSE_SCHEMA,
                            summary="What nginx gets for this LB: its routes as data "
                                    "(vhost, path, backends) and the rendered text")])

    def rendered_routes(self, call, record):
        return rendered.routes(call.store, self.api.settings, record)

    def declared_links(self):
        return [Link(LBS, NODES, label="type.external_node", values=lambda r: [
            r["type"]["external_node"]] if (r.get("type") or {}).get("kind") ==
            "external_node" else [])]

    # ---- type ------------------------------------------------------------------------

    def checked_type(self, call, spec, project_id, current=None):
        platform_lb = platform_record(call.principal, project_id)
        if spec is None:
            # a project's LB runs on its own nodes: a set of its own (docs/lb.md)
            spec = {"kind": "core_agent"} if platform_lb and \
                placement.appliance_node(call.store) else {"kind": "core"}
        spec = kind_checked("type", spec, _TYPE_CHECK)
        if spec["kind"] == "core":
            spec = {**CORE_DEFAULTS, **spec}
            if not self.api.settings.get("lb_image"):
                raise Conflict("type core: the setting lb_image (the node image that LB "
                               "nodes boot) is not set; ask the administrator to set it, "
                               "or use type external_node with a node of the project" +
                               (" or core_agent" if platform_lb else ""))
            old = (current or {}).get("type") or {}
            if old.get("kind") == "core" and spec["disk_size"] < old["disk_size"]:
                raise BadRequest(f"type.disk_size: cannot shrink (from {old['disk_size']} GB)")
        if spec["kind"] == "external_node":
            node_uuid = uuid_of("type.external_node", spec["external_node"])
            spec["external_node"] = check_nodes(
                call.store, call.principal, project_id, "node", [node_uuid],
                lambda i: "type.external_node",
                not_found=lambda u: f"Node {u} is not found in the LB project.")[0]
        if spec["kind"] == "core_agent":
            check_appliance_node(call.principal, project_id, "type core_agent",
                                 "use type core (the default) or external_node with a "
                                 "node of the project")
            if placement.appliance_node(call.store) is None:
                raise Conflict("type core_agent: the appliance has no node of its own "
                               "enrolled (first boot registers it); use external_node or "
                               "core")
        return spec

    def prepare_create(self, call, record):
        record["type"] = self.checked_type(call, record.get("type"), record["project_id"])
        record.update(status="NEW", status_reason=None, node_status={}, ipsv4=None)
        return record

    def prepare_update(self, call, current, changes):
        if "type" in changes:
            changes["type"] = self.checked_type(call, changes["type"], current["project_id"],
                                                current)
            lb = {**current, **changes}
            vhosts = self.api.resources[VHOSTS_PATH]
            for vhost in vhosts.collection().by("lb", current["uuid"]):
                vhosts.check_node_ports(call, lb, vhost)
            for route in call.store.collection(ROUTES).by("lb", current["uuid"]):
                check_writable_placement(lb, route["condition"])
        changes.update(status="IN_PROGRESS", status_reason=None)
        return changes

    def update_record(self, call, uuid, body):
        with self.api.store.named_lock(LOCK):
            return super().update_record(call, uuid, body)

    def touch(self, lb_uuid):
        """A child changed: the LB is IN_PROGRESS until its nodes applied the change."""
        self.collection().mutate(lb_uuid, lambda r: {**r, "status": "IN_PROGRESS",
                                                     "status_reason": None})

    def render(self, record, only=None):
        if only is None or "ipsv4" in only:
            nodes, _ = placement.placed(self.api.store, record)
            record = {**record, "ipsv4": placement.addresses(nodes)}
        return super().render(record, only)

    def after_delete(self, call, record):
        # the children go with their LB (as a domain's records go with it); its node set
        # goes too (also swept by reconcile.py, should this process stop right here)
        store = call.store
        for kind in (ROUTES, VHOSTS, POOLS):
            store.collection(kind).delete_where(lambda r: r.get("lb") == record["uuid"])
        from .reconcile import delete_set  # noqa: PLC0415 (compute's release of volumes)
        delete_set(store, record["uuid"])


def check_writable_placement(lb, condition):
    """The reference's rule: a writable local_dir keeps its files on one node, so neither
    the appliance itself nor a core LB of several nodes may serve it."""
    if not conditions.writable(condition):
        return
    spec = lb["type"]
    if spec["kind"] == "core_agent" or (spec["kind"] == "core" and spec["nodes_number"] > 1):
        raise Conflict("a writable local_dir route (dav_methods) needs an LB of type "
                       "external_node or core with one node, not "
                       f"{spec['kind']}" + (f" with {spec['nodes_number']} nodes"
                                            if spec["kind"] == "core" else ""))


# ---- vhosts ---------------------------------------------------------------------------

def listens(vhost):
    """(port, protocol) pairs a vhost listens on: an https vhost that redirects plain
    HTTP also takes port 80 as http."""
    out = [(vhost["port"], vhost["protocol"])]
    if vhost["protocol"] == "https" and vhost.get("redirect_http"):
        out.append((REDIRECT_PORT, "http"))
    return out


def clash(vhost, other):
    """Why `vhost` cannot listen beside `other` in one nginx, or None: the reference's
    protocol conflicts, and ours: vhosts that share a port by name (http+http,
    https+https) share no domain, and either all take the PROXY protocol there or none
    does (nginx sets it per address and port, not per server)."""
    domains = set(vhost.get("domains") or ())
    for port, protocol in listens(vhost):
        for other_port, other_protocol in listens(other):
            if port != other_port:
                continue
            if other_protocol in CLASHES[protocol]:
                return f"port {port}: a {protocol} vhost cannot share it with a " \
                       f"{other_protocol} vhost"
            if protocol != other_protocol:
                continue
            shared = domains & set(other.get("domains") or ())
            if shared:
                return f"port {port}: domain {sorted(shared)[0]} is already served there"
            if _proxied(vhost, port) != _proxied(other, port):
                return f"port {port}: the vhosts that share it all take the PROXY " \
                       "protocol (proxy_protocol_from) or none does"
    return None


def _proxied(vhost, port):
    # the redirect listener of an https vhost takes plain HTTP
    return port == vhost["port"] and vhost.get("proxy_protocol_from") is not None


def reserved_ports(settings):
    """{(port, transport): who uses it} on the appliance's own node (core_agent)."""
    out = {(443, "tcp"): "the appliance's HTTPS API (nginx)", (22, "tcp"): "SSH",
           (int(settings["api_port"]), "tcp"): "the appliance's API"}
    for transport in ("udp", "tcp"):
        out[(int(settings["dns_port"]), transport)] = "the appliance's DNS server"
    return out


def check_project_ports(call, lb, vhost):
    """A project's LB listens on 80, 443 or a port from 1024 up, on whatever node it
    runs (docs/security.md): the ports below are the system's (SSH, SMTP, DNS...), and a
    tenant answering on one of them, on a node the platform or others reach, passes for
    that system service. Only the platform's own LBs (admin project) bind them."""
    if platform_record(call.principal, lb["project_id"]):
        return
    for port, _ in listens(vhost):
        if port < PROJECT_MIN_PORT and port not in PROJECT_LOW_PORTS:
            raise BadRequest(f"port {port}: a project's load balancer listens on 80, 443 or "
                             f"a port from {PROJECT_MIN_PORT} to 65535; the ports below "
                             f"{PROJECT_MIN_PORT} are the platform's")


class Vhosts(LbChild):
    def __init__(self):
        super().__init__(
            name="Vhost", path=VHOSTS_PATH, kind=VHOSTS, service="network",
            policy="lb_vhost", project_scoped=True, parent=("lb", LB_PATH),
            description="a protocol and port an LB listens on, with its domains and cert",
            fields=base_fields() + [
                Field("lb", Reference(LB_PATH), create_only=True,
                      description="taken from the path"),
                Field("project_id", UUID(), create_only=True, description="the LB's"),
                Field("enabled", Boolean(), default=True, nullable=False),
                child_status(),
                Field("protocol", Enum(*PROTOCOLS), default="http", nullable=False,
                      create_only=True, description="read-only after create"),
                Field("port", Integer(1, 65535), default=80, nullable=False),
                Field("domains", List(String(255, min_length=1), max_items=256),
                      description="at least one for http and https; none for tcp and udp"),
                Field("cert", Object(CERT_FIELD),
                      description="https only: {kind: raw, crt, key} (PEM) or {kind: "
                                  "certificate, certificate: uuid of /v1/secret/"
                                  "certificates/ in the project}"),
                Field("redirect_http", Boolean(), default=False, nullable=False,
                      description="https only: also answer plain HTTP on port 80 with a "
                                  "301 to https"),
                Field("external_sources", List(Object()), default=list,
                      nullable=False,
                      description="the reference's ssh_forward sources: not supported, "
                                  "always []"),
                Field("proxy_protocol_from", String(64), sortable=False,
                      description="IP/mask whose connections carry the PROXY protocol; "
                                  "not for udp"),
            ])

    def register(self, api):
        super().register(api)
        from appliance.secret.crypto import SecretBox
        self.box = SecretBox(api.store)

    def declared_links(self):
        return [Link(VHOSTS, CERTIFICATES, label="cert", values=lambda r: [
            r["cert"]["certificate"]] if (r.get("cert") or {}).get("kind") ==
            "certificate" else [])]

    # ---- the cert key is sealed in the store, opened for readers and the producer ----

    def open_cert(self, record):
        cert = record.get("cert")
        if not cert or cert.get("kind") != "raw":
            return cert
        return {**cert, "key": self.box.open(self.kind, record["uuid"], "cert.key",
                                              cert["key"])}

    def render(self, record, only=None):
        return super().render({**record, "cert": self.open_cert(record)}, only)

    # ---- checks ----------------------------------------------------------------------

    def checked(self, call, lb, vhost):
        """The vhost as it will be stored (normalized), or 400/409."""
        protocol = vhost["protocol"]
        domains = vhost.get("domains") or None
        if domains is not None:
            for i, d in enumerate(domains):
                if not re.fullmatch(DOMAIN, d):
                    raise BadRequest(f"domains.{i}: must be a host name, optionally "
                                     "starting with *.")
            domains = list(dict.fromkeys(d.rstrip(".").lower() for d in domains))
        vhost["domains"] = domains
        if protocol in L7 and not domains:
            raise BadRequest(f"domains: a {protocol} vhost needs at least one domain")
        if protocol not in L7 and domains:
            raise BadRequest(f"domains: a {protocol} vhost takes no domains")
        if protocol != "https" and vhost.get("cert") is not None:
            raise BadRequest(f"cert: only an https vhost takes a cert, not {protocol}")
        if protocol == "https" and vhost.get("cert") is None:
            raise BadRequest("cert: an https vhost needs a cert")
        if protocol != "https" and vhost.get("redirect_http"):
            raise BadRequest("redirect_http: only for https vhosts")
        if vhost.get("external_sources"):
            raise BadRequest("external_sources: ssh_forward sources are not supported")
        source = vhost.get("proxy_protocol_from")
        if source is not None:
            if protocol == "udp":
                raise BadRequest("proxy_protocol_from: not allowed for udp")
            try:
                vhost["proxy_protocol_from"] = str(ipaddress.ip_network(source, strict=False))
            except ValueError:
                raise BadRequest("proxy_protocol_from: must be an IP address or network "
                                 "like 10.0.0.0/8") from None
        if vhost.get("cert") is not None:
            vhost["cert"] = self.checked_cert(call, lb, vhost)
        check_project_ports(call, lb, vhost)
        self.check_lb_ports(lb, vhost)
        self.check_node_ports(call, lb, vhost)
        return vhost

    def checked_cert(self, call, lb, vhost):
        cert = kind_checked("cert", vhost["cert"], _CERT_CHECK)
        if cert["kind"] == "certificate":
            uuid = uuid_of("cert.certificate", cert["certificate"], CERT_PATH)
            record = call.store.collection(CERTIFICATES).get(uuid)
            if record is None or record.get("project_id") != lb["project_id"]:
                raise BadRequest(f"cert.certificate: no certificate {uuid} in project "
                                 f"{lb['project_id']}")
            return {"kind": "certificate", "certificate": uuid}
        check_pem(cert["crt"], cert["key"])
        return {"kind": "raw", "crt": cert["crt"],
                "key": self.box.seal(self.kind, vhost["uuid"], "cert.key", cert["key"])}

    def check_lb_ports(self, lb, vhost):
        """The reference's port conflicts within one LB, and ours (`clash`)."""
        for other in self.collection().by("lb", lb["uuid"]):
            why = clash(vhost, other) if other["uuid"] != vhost["uuid"] else None
            if why:
                raise Conflict(f"{why} (vhost {other['uuid']} of this LB)")

    def check_node_ports(self, call, lb, vhost):
        """Ours: on the appliance itself its own ports are taken, and LBs that share a
        node (one nginx serves them all there) follow the same port rules as one LB."""
        if lb["type"]["kind"] == "core":
            return      # a set of its own: nothing else runs there
        reserved = reserved_ports(self.api.settings) if lb["type"]["kind"] == "core_agent" \
            else {}
        for port, protocol in listens(vhost):
            user = reserved.get((port, TRANSPORT[protocol]))
            if user:
                raise Conflict(f"port {port}/{TRANSPORT[protocol]} is used by {user} on the "
                               "appliance (type core_agent)")
        mine = {n["uuid"] for n in placement.placed(call.store, lb)[0]}
        if not mine:
            return
        for other in call.store.collection(LBS).records():
            if other["uuid"] == lb["uuid"] or other["type"]["kind"] == "core":
                continue
            shared = [n for n in placement.placed(call.store, other)[0] if n["uuid"] in mine]
            if not shared:
                continue
            for used in self.collection().by("lb", other["uuid"]):
                why = clash(vhost, used)
                if why:
                    # another project's LB may share the node: it is not named
                    raise Conflict(f"{why} (another load balancer on node "
                                   f"{shared[0].get('name') or shared[0]['uuid']})")

    def prepare_create(self, call, record):
        lb = self.lb_of(record)
        self.own_project(record, lb)
        record["status"] = "ACTIVE"
        return self.checked(call, lb, record)

    def prepare_update(self, call, current, changes):
        lb = self.lb_of(current)
        if "cert" in changes and changes["cert"] is None:
            merged = {**current, **changes}
        else:
            merged = {**current, "cert": self.open_cert(current), **changes}
        checked = self.checked(call, lb, merged)
        return {k: v for k, v in checked.items() if k in changes or k in (
            "domains", "cert", "proxy_protocol_from")}

    def after_delete(self, call, record):
        call.store.collection(ROUTES).delete_where(lambda r: r.get("vhost") == record["uuid"])
        super().after_delete(call, record)


def check_pem(crt, key):
    """400 unless crt is a PEM chain and key an unencrypted PEM private key of its first
    certificate (nginx would refuse the pair at reload)."""
    from cryptography import x509  # noqa: PLC0415 (only vhost writes need it)
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    try:
        chain = x509.load_pem_x509_certificates(crt.encode())
    except ValueError:
        raise BadRequest("cert.crt: not a PEM certificate chain") from None
    try:
        private = serialization.load_pem_private_key(key.encode(), password=None)
    except TypeError:
        raise BadRequest("cert.key: an encrypted key cannot be used (nginx would ask for "
                         "its passphrase)") from None
    except (ValueError, Exception):  # noqa: BLE001 (cryptography raises several kinds)
        raise BadRequest("cert.key: not a PEM private key") from None
    spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != private.public_key().public_bytes(*spki):
        raise BadRequest("cert: the key does not belong to the first certificate of crt")


# ---- routes ---------------------------------------------------------------------------

class Routes(LbChild):
    def __init__(self):
        super().__init__(
            name="Route", path=ROUTES_PATH, kind=ROUTES, service="network",
            policy="lb_vhost_route", project_scoped=True, parent=("vhost", VHOSTS_PATH),
            description="what a vhost does with a request: a prefix/exact/regex route "
                        "(http, https) or a raw one (tcp, udp)",
            fields=base_fields() + [
                Field("vhost", Reference(VHOSTS_PATH), create_only=True,
                      description="taken from the path"),
                Field("lb", UUID(), hidden=True),
                Field("project_id", UUID(), create_only=True, description="the LB's"),
                Field("enabled", Boolean(), default=True, nullable=False),
                child_status(),
                Field("condition", Object(conditions.FIELD_SCHEMA), required=True,
                      description=conditions.FIELD_SCHEMA["description"]),
            ])

    def item_path(self, record):
        return super().item_path(record).replace("<lb>", record["lb"])

    def declared_links(self):
        # 409 (api-conventions: a delete with dependents) with the reference's message
        return [Link(ROUTES, POOLS, label="condition",
                     values=lambda r: conditions.pools(r["condition"]),
                     message=lambda pool, routes: "Backend pool in use, remove route first "
                                                  f"(route {routes[0]['uuid']})")]

    def load_visible(self, call, uuid):
        record = super().load_visible(call, uuid)
        if call.params.get("lb") not in (None, record["lb"]):
            raise NotFound(f"{self.name} {uuid} not found")
        return record

    def render(self, record, only=None):
        out = super().render(record, only)
        if out.get("vhost"):
            out["vhost"] = out["vhost"].replace("<lb>", record["lb"])
        return out

    def checked(self, call, lb, vhost, condition):
        condition = conditions.normalize(condition)
        l4 = vhost["protocol"] not in L7
        if l4 and condition["kind"] != "raw":
            raise BadRequest(f"condition.kind: a {vhost['protocol']} vhost takes only raw "
                             "routes")
        if not l4 and condition["kind"] == "raw":
            raise BadRequest(f"condition.kind: a {vhost['protocol']} vhost takes no raw "
                             "routes")
        pools = call.store.collection(POOLS)
        for uuid in conditions.pools(condition):
            pool = pools.get(uuid)
            if pool is None or pool.get("lb") != lb["uuid"]:
                raise BadRequest(f"condition: backend pool {uuid} is not a pool of this LB")
        check_writable_placement(lb, condition)
        check_download_urls(call, self.api.settings, lb, condition)
        return condition

    def prepare_create(self, call, record):
        vhost = call.store.collection(VHOSTS).require(record["vhost"])
        record["lb"] = vhost["lb"]
        lb = self.lb_of(record)
        self.own_project(record, lb)
        record["status"] = "ACTIVE"
        record["condition"] = self.checked(call, lb, vhost, record["condition"])
        return record

    def prepare_update(self, call, current, changes):
        if "condition" in changes:
            vhost = call.store.collection(VHOSTS).require(current["vhost"])
            changes["condition"] = self.checked(call, self.lb_of(current), vhost,
                                                changes["condition"])
        return changes


def check_download_urls(call, settings, lb, condition):
    """A local_dir_download URL whose host is an address the LB's project may not reach
    is a 400 now; a name is judged by the node's agent when it fetches (docs/security.md)."""
    urls = [a["url"] for a in condition.get("actions") or ()
            if a.get("kind") == "local_dir_download"]
    if not urls:
        return
    reach = addresses.for_caller(call.store, settings, call.principal, lb["project_id"])
    for url in urls:
        why = fetch.literal_refusal(url, reach)
        if why:
            raise BadRequest(f"condition.actions.0.url: {why}")


# ---- backend pools --------------------------------------------------------------------

class BackendPools(LbChild):
    def __init__(self):
        super().__init__(
            name="BackendPool", path=POOLS_PATH, kind=POOLS, service="network",
            policy="lb_backendpool", project_scoped=True, parent=("lb", LB_PATH),
            description="endpoints an LB balances over, round robin",
            fields=base_fields() + [
                Field("lb", Reference(LB_PATH), create_only=True,
                      description="taken from the path"),
                Field("project_id", UUID(), create_only=True, description="the LB's"),
                child_status(),
                Field("endpoints", List(Object({"type": "object", "required": ["kind"]})),
                      required=True,
                      description="[{kind: host, host, port (80), weight (1)} | {kind: "
                                  "node, node, port, weight} | {kind: node_set, node_set, "
                                  "port, weight}] (nodes and sets of the project)"),
                Field("balance", Enum("roundrobin"), default="roundrobin", nullable=False),
                # a platform caller's endpoints are not judged by the project's address
                # rule, here nor when the LB is rendered (targets.py)
                Field("platform_endpoints", Boolean(), hidden=True),
            ])

    def checked(self, call, lb, endpoints):
        """The endpoints as stored, or 400. A `host` of a project's LB must be an address
        the project may reach (tenancy/addresses); nodes and sets the LB project's own."""
        if not endpoints:
            raise BadRequest("No endpoints defined")
        if len(endpoints) > 256:
            raise BadRequest("endpoints: at most 256")
        out = []
        reach = None
        for i, endpoint in enumerate(endpoints):
            where = f"endpoints.{i}"
            endpoint = {"port": 80, "weight": 1,
                        **kind_checked(where, endpoint, _ENDPOINT_CHECK)}
            kind = endpoint["kind"]
            if kind == "host":
                if reach is None:
                    reach = addresses.for_caller(call.store, self.api.settings,
                                                 call.principal, lb["project_id"])
                check_host_endpoint(f"{where}.host", endpoint["host"], reach)
            if kind in ("node", "node_set"):
                uuid = uuid_of(f"{where}.{kind}", endpoint[kind])
                endpoint[kind] = check_nodes(call.store, call.principal, lb["project_id"],
                                             kind, [uuid],
                                             lambda _: f"{where}.{kind}")[0]
            out.append(endpoint)
        return out

    def prepare_create(self, call, record):
        lb = self.lb_of(record)
        self.own_project(record, lb)
        record["status"] = "ACTIVE"
        record["endpoints"] = self.checked(call, lb, record.get("endpoints"))
        record["platform_endpoints"] = is_platform(call.principal)
        return record

    def prepare_update(self, call, current, changes):
        if "endpoints" in changes:
            changes["endpoints"] = self.checked(call, self.lb_of(current), changes["endpoints"])
            changes["platform_endpoints"] = is_platform(call.principal)
        return changes

    def declared_links(self):
        def endpoints(kind):
            return lambda r: [e[kind] for e in r.get("endpoints") or ()
                              if e.get("kind") == kind]
        return [Link(POOLS, NODES, label="endpoints node", values=endpoints("node")),
                Link(POOLS, SETS, label="endpoints node_set", values=endpoints("node_set"))]


def check_host_endpoint(where, host, reach):
    """400 unless `host` may be reached by the LB: for a project, an IP address its
    rule allows (a name is refused: nginx would resolve it later, unchecked)."""
    if reach.platform:
        return
    if addresses.parse_address(host) is None:
        raise BadRequest(f"{where}: {host!r} is a name; a project's load balancer takes "
                         "an IP address of one of the project's networks (or a node or "
                         "node set endpoint), since a name could later resolve anywhere")
    why = reach.refusal(host)
    if why:
        raise BadRequest(f"{where}: {why}")


def all_resources():
    return [LoadBalancers(), Vhosts(), Routes(), BackendPools()]


def register(api):
    """The capability's entry (appliance/app.py): appliance/lb/__init__.py stays the
    one-line docstring both LB branches create."""
    for resource in all_resources():
        resource.register(api)
