"""A route's `condition` (reference-api.md section 3): its schema per kind, the defaults
filled in on write, and the rules that need no store. Pure: the API checks bodies with it
and stores what `normalize` returns, so the producer hands conditions on as stored.

Stricter than the reference where nginx could not render a value (the issue: "a route
that nginx cannot render is never shipped"): paths, header names and values carry no
whitespace, quotes, braces or semicolons, and a route has exactly one action.
"""

import ipaddress
import re

from appliance.api.errors import BadRequest
from appliance.api.validation import Validator
from appliance.kinds import UUID_PATTERN

from .condition_pools import pools  # noqa: F401 (the API's name for it)

KINDS = ("prefix", "exact", "regex", "raw")
L7_KINDS = ("prefix", "exact", "regex")
HEADERS = ["Host", "X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto",
           "X-Forwarded-Prefix"]
DAV_METHODS = ["PUT", "DELETE"]
UUID = {"type": "string", "pattern": UUID_PATTERN}
# the reference's ^/(.*)$, less what would break out of an nginx location line
PATH = r'^/[^\s"\'{};\\]*$'
SAFE = r'^[^\x00-\x1f\x7f"{};\\]*$'
# a regular expression goes into nginx in double quotes: backslashes and braces are its
# own, a quote or a final lone backslash would end the string early
REGEX = r'^[^\x00-\x1f\x7f"]*(?<!\\)$'
URL = r'^https?://[^\s"\'{};\\]+$'
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"


def _obj(kind, required=(), **props):
    return {"type": "object", "additionalProperties": False,
            "required": ["kind", *required],
            "properties": {"kind": {"const": kind}, **props}}


PROTOCOL = {"type": "object", "required": ["kind"], "oneOf": [
    _obj("http"), _obj("https", verify={"type": "boolean"})]}
ACTIONS = {
    "backend": _obj("backend", ["pool"], pool=UUID, protocol=PROTOCOL),
    "redirect": _obj("redirect", ["url"], url={"type": "string", "maxLength": 2048,
                                               "pattern": URL},
                     code={"type": "integer", "minimum": 300, "maximum": 399}),
    "local_dir": _obj("local_dir", ["path"],
                      path={"type": "string", "maxLength": 1024,
                            "pattern": r'^/var/www(/[^\s"\'{};\\/]+)*/?$'},
                      is_spa={"type": "boolean"},
                      dav_methods={"type": "array", "items": {"enum": DAV_METHODS},
                                   "uniqueItems": True}),
    "local_dir_download": _obj("local_dir_download", ["url"],
                               url={"type": "string", "maxLength": 2048,
                                    "pattern": URL[:-1] + r"\.tar\.(gz|zst)$"},
                               is_spa={"type": "boolean"}),
}
_HEADER = {"name": {"type": "string", "pattern": HEADER_NAME},
           "value": {"type": "string", "maxLength": 4096, "pattern": SAFE}}
MODIFIERS = {
    "auto_header": _obj("auto_header", ["headers"],
                        headers={"type": "array", "items": {"enum": HEADERS},
                                 "uniqueItems": True}),
    "set_header": _obj("set_header", ["name", "value"], **_HEADER),
    "set_resp_header": _obj("set_resp_header", ["name", "value"], **_HEADER),
    "rewrite_url": _obj("rewrite_url", ["regex", "replacement"],
                        regex={"type": "string", "minLength": 1, "maxLength": 1024,
                               "pattern": REGEX},
                        replacement={"type": "string", "maxLength": 1024,
                                     "pattern": r'^[^\s"\'{};\\]*$'}),
    "auth_request": _obj("auth_request", ["pool", "path"], pool=UUID,
                         path={"type": "string", "maxLength": 1024,
                               "pattern": r"^/[A-Za-z0-9._~/-]*$"}),
}
_KIND_ONLY = {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}}}
ALLOWED_IPS = {"type": "array", "minItems": 1, "maxItems": 256,
               "items": {"type": "string", "maxLength": 64}}
_L7 = {"actions": {"type": "array", "minItems": 1, "maxItems": 1, "items": _KIND_ONLY},
       "modifiers": {"type": "array", "maxItems": 32, "items": _KIND_ONLY},
       "allowed_ips": ALLOWED_IPS}
SCHEMAS = {
    "prefix": _obj("prefix", ["actions"], value={"type": "string", "maxLength": 1024,
                                                 "pattern": PATH}, **_L7),
    "exact": _obj("exact", ["actions"], value={"type": "string", "maxLength": 1024,
                                               "pattern": PATH}, **_L7),
    "regex": _obj("regex", ["value", "actions"],
                  value={"type": "string", "minLength": 1, "maxLength": 1024,
                         "pattern": REGEX}, **_L7),
    "raw": _obj("raw", ["actions"], allowed_ips=ALLOWED_IPS, actions={
        "type": "array", "minItems": 1, "maxItems": 1,
        "items": _obj("backend", ["pool"], pool=UUID)}),
}
FIELD_SCHEMA = {"type": "object", "required": ["kind"],
                "properties": {"kind": {"enum": list(KINDS)}},
                "description": "kind prefix|exact {value (/), actions, modifiers, "
                               "allowed_ips} | regex {value, ...} | raw {actions: [{kind: "
                               "backend, pool}], allowed_ips}"}
_CHECK = {k: Validator(s) for k, s in SCHEMAS.items()}
_ACTION_CHECK = {k: Validator(s) for k, s in ACTIONS.items()}
_MODIFIER_CHECK = {k: Validator(s) for k, s in MODIFIERS.items()}


def default_modifiers(kind):
    # a regex location has no prefix to forward (the reference drops it too)
    headers = HEADERS if kind != "regex" else HEADERS[:-1]
    return [{"kind": "auto_header", "headers": list(headers)}]


def _regex(where, text):
    try:
        re.compile(text)
    except re.error as e:
        raise BadRequest(f"{where}: not a valid regular expression ({e.msg})") from None


def _networks(where, items):
    out = []
    for i, text in enumerate(items):
        try:
            out.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError:
            raise BadRequest(f"{where}.{i}: must be an IP address or network like "
                             "10.0.0.0/8") from None
    return out


def _one_of(table, checks, item, where):
    kind = item.get("kind")
    if kind not in table:
        raise BadRequest(f"{where}.kind: must be one of {', '.join(table)}")
    checks[kind].check_at(item, where)


def normalize(condition):
    """The condition with every default filled in, or BadRequest. Checks only what
    needs no other record (pools and the vhost are the resource's)."""
    if not isinstance(condition, dict) or condition.get("kind") not in KINDS:
        raise BadRequest(f"condition.kind: must be one of {', '.join(KINDS)}")
    kind = condition["kind"]
    _CHECK[kind].check_at(condition, "condition")
    out = dict(condition)
    out["allowed_ips"] = _networks("condition.allowed_ips",
                                   condition.get("allowed_ips") or ["0.0.0.0/0"])
    if kind == "raw":
        out["actions"] = [{"kind": "backend", "pool": a["pool"].lower()}
                          for a in condition["actions"]]
        return out
    out.setdefault("value", "/")
    if kind == "regex":
        _regex("condition.value", out["value"])
    actions = []
    for i, action in enumerate(condition["actions"]):
        _one_of(ACTIONS, _ACTION_CHECK, action, f"condition.actions.{i}")
        actions.append(_action_defaults(action))
    out["actions"] = actions
    modifiers = condition.get("modifiers")
    if modifiers is None:
        modifiers = default_modifiers(kind)
    out["modifiers"] = []
    for i, modifier in enumerate(modifiers):
        _one_of(MODIFIERS, _MODIFIER_CHECK, modifier, f"condition.modifiers.{i}")
        modifier = dict(modifier)
        if modifier["kind"] == "rewrite_url":
            _regex(f"condition.modifiers.{i}.regex", modifier["regex"])
        if modifier["kind"] == "auth_request":
            modifier["pool"] = modifier["pool"].lower()
        out["modifiers"].append(modifier)
    auth = [m for m in out["modifiers"] if m["kind"] == "auth_request"]
    if len(auth) > 1:
        raise BadRequest("condition.modifiers: at most one auth_request")
    if auth and kind == "regex":
        raise BadRequest("condition.modifiers: auth_request is not allowed on a regex route")
    if writable(out):
        _check_writable(out)
    return out


def _action_defaults(action):
    kind = action["kind"]
    if kind == "backend":
        protocol = dict(action.get("protocol") or {"kind": "http"})
        if protocol["kind"] == "https":
            protocol.setdefault("verify", True)
        return {"kind": kind, "pool": action["pool"].lower(), "protocol": protocol}
    if kind == "redirect":
        return {"code": 301, **action}
    if kind == "local_dir":
        if ".." in action["path"].split("/"):
            raise BadRequest("condition.actions.0.path: must not contain ..")
        return {"is_spa": True, "dav_methods": [], **action}
    return {"is_spa": True, **action}


def writable(condition):
    """True for a local_dir route that takes PUT or DELETE (an upload route, 4.3.1)."""
    return any(a["kind"] == "local_dir" and a.get("dav_methods")
               for a in condition.get("actions") or ())


def _check_writable(condition):
    kinds = {m["kind"] for m in condition["modifiers"]}
    if "auth_request" not in kinds:
        raise BadRequest("condition: a writable local_dir (dav_methods) needs an "
                         "auth_request modifier")
    if "rewrite_url" in kinds:
        raise BadRequest("condition: a writable local_dir (dav_methods) takes no "
                         "rewrite_url modifier")
    if condition["kind"] != "prefix" or not re.fullmatch(r"^/[^/]+/$", condition["value"]):
        raise BadRequest("condition: a writable local_dir (dav_methods) needs a prefix "
                         "route of one segment, like /repo/")
