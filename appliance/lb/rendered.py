"""What nginx gets for one LB, as the API shows it (GET .../lb/<uuid>/actions/routes, the
web console's "rendered routes", `appliance lb rendered LB`): the same producer value the
node agents get (targets.value) and the same renderer their driver runs
(nginx.render_lb), so what is shown is what is shipped, not a second reading of the rules.

No secret is opened for it: the view's box hands back a placeholder for a certificate's
key, and the rendered files (where keys would be) are never part of the answer; a vhost
shows only whether it has TLS.
"""

from appliance.agent.targets import View

from . import condition_pools, nginx, targets

HIDDEN = "(secret: not shown)"


class _NoSecrets:
    """A secret box that opens nothing."""

    def open(self, *args, **kwargs):
        return HIDDEN

    def open_fields(self, kind, record, fields):
        return {**record, **{f: HIDDEN for f in fields}}


class _View(View):
    def box(self):
        return _NoSecrets()


def _path(condition):
    kind = condition.get("kind")
    if kind in ("prefix", "exact", "regex"):
        return {"match": kind, "value": condition.get("value") or "/"}
    return {"match": kind, "value": None}


def routes(store, settings, lb):
    view = _View(store, settings=settings)
    out = {"lb": lb["uuid"], "status": lb.get("status"), "unavailable": None,
           "refused": [], "routes": [], "vhosts": [], "pools": {}, "nginx": None,
           "render_error": None}
    try:
        value = targets.value(view, lb)
    except targets.Unavailable as e:
        out["unavailable"] = str(e)
        return out
    pools = value.get("pools") or {}
    out["pools"] = pools
    out["refused"] = value.get("refused") or []
    for vhost in value.get("vhosts") or []:
        out["vhosts"].append({k: vhost.get(k) for k in (
            "uuid", "protocol", "port", "domains", "redirect_http", "proxy_protocol_from")}
            | {"tls": vhost.get("tls") is not None})
        for route in vhost.get("routes") or []:
            condition = route.get("condition") or {}
            backends = []
            for pool in condition_pools.pools(condition):
                backends.append({"pool": pool,
                                 "endpoints": (pools.get(pool) or {}).get("endpoints", [])})
            actions = [a.get("kind") for a in condition.get("actions") or ()]
            out["routes"].append({
                "vhost": vhost["uuid"], "route": route["uuid"],
                "protocol": vhost["protocol"], "port": vhost["port"],
                "domains": vhost.get("domains"), **_path(condition),
                "actions": actions, "backends": backends})
    try:
        rendered = nginx.render_lb(value)
    except nginx.RenderError as e:
        out["render_error"] = str(e)
        return out
    out["nginx"] = {"http": rendered.http, "stream": rendered.stream}
    return out


_ENDPOINTS = {"type": "array", "items": {"type": "object", "properties": {
    "host": {"type": "string"}, "port": {"type": "integer"}, "weight": {"type": "integer"}}}}
RESPONSE_SCHEMA = {"type": "object", "properties": {
    "lb": {"type": "string"}, "status": {"type": ["string", "null"]},
    "unavailable": {"type": ["string", "null"],
                    "description": "why nothing is rendered yet (a certificate pending)"},
    "render_error": {"type": ["string", "null"],
                     "description": "why nginx cannot be given this LB"},
    "refused": {"type": "array", "items": {"type": "string"},
                "description": "endpoints left out by the address rule, and why"},
    "routes": {"type": "array", "items": {"type": "object", "properties": {
        "vhost": {"type": "string"}, "route": {"type": "string"},
        "protocol": {"type": "string"}, "port": {"type": "integer"},
        "domains": {"type": ["array", "null"], "items": {"type": "string"}},
        "match": {"description": "prefix, exact, regex or raw"},
        "value": {"type": ["string", "null"], "description": "the path matched"},
        "actions": {"type": "array", "items": {"type": "string"}},
        "backends": {"type": "array", "items": {"type": "object", "properties": {
            "pool": {"type": "string"}, "endpoints": _ENDPOINTS}}}}}},
    "vhosts": {"type": "array", "items": {"type": "object"}},
    "pools": {"type": "object", "additionalProperties": {"type": "object", "properties": {
        "balance": {"type": "string"}, "endpoints": _ENDPOINTS}}},
    "nginx": {"type": ["object", "null"], "properties": {
        "http": {"type": "string", "description": "inside http {}"},
        "stream": {"type": "string", "description": "inside stream {}"}}}}}
