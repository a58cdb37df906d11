"""Who and which request caused what is being written: the request id and the actor of
the request the current thread serves.

One home for both, because three readers need the same answer: the access log, the
change feed (an event names the request and the actor that caused it) and the audit
trail. A context variable, not a parameter: the store's writers sit many calls below the
route, and daemons and first boot write with no request at all (actor "platform").
"""

import contextvars
import random
import re

from state import feed

# a client may name its request (X-Request-Id) so that its own logs and ours join up;
# anything else is replaced, never echoed (it would land in logs and events)
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}\Z")
HEADER = "X-Request-Id"
WSGI_KEY = "HTTP_X_REQUEST_ID"

_request_id = contextvars.ContextVar("request_id", default=None)
_actor = contextvars.ContextVar("actor", default=None)
_action = contextvars.ContextVar("action", default=None)
# .../<uuid>/actions/<name>/invoke: the change feed names the action behind its writes
_INVOKE = re.compile(r"/([0-9a-fA-F-]{36})/actions/([A-Za-z0-9_-]+)/invoke/?\Z")
# a fresh id has uuid4's form, from the process's PRNG (seeded from the system's, again
# after a fork): an id must be unique, not secret (a client may choose its own), and
# uuid.uuid4()'s getrandom call let go of the GIL on every request (issue 32)
_random_bits = random.getrandbits
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def fresh_id():
    """A new request id: 32 hex digits, a version 4 UUID's."""
    return "%032x" % (_random_bits(128) & _UUID4_CLEAR | _UUID4_SET)


def begin(environ):
    """Start a request: its id (the client's, when well-formed, else a fresh one) for the
    current context; returns the id. The actor is unknown until authentication."""
    asked = environ.get(WSGI_KEY, "")
    request_id = asked if asked and _CLIENT_ID.match(asked) else fresh_id()
    _request_id.set(request_id)
    _actor.set(None)
    invoked = (_INVOKE.search(environ.get("PATH_INFO", ""))
               if environ.get("REQUEST_METHOD") == "POST" else None)
    _action.set({"name": invoked.group(2), "uuid": invoked.group(1).lower()}
                if invoked else None)
    return request_id


def end():
    _request_id.set(None)
    _actor.set(None)
    _action.set(None)


def set_actor(actor):
    """`actor`: {"type": "user"|"agent"|"platform", "id": ..., "name": ..., "project_id": ...}"""
    _actor.set(actor)


def actor_of(principal):
    """The actor record of an authenticated principal (a user's or a node agent's)."""
    if principal is None:
        return platform()
    node = getattr(principal, "node", None)
    if node is not None:
        return {"type": "agent", "id": node, "name": None, "project_id": None}
    user = getattr(principal, "user", None) or {}
    return {"type": "user", "id": user.get("uuid"),
            "name": user.get("name") or user.get("username"),
            "project_id": getattr(principal, "project_id", None)}


def platform(name=None):
    """The actor of a write no request caused: a daemon's, first boot's (`name`)."""
    return {"type": "platform", "id": None, "name": name, "project_id": None}


def request_id():
    return _request_id.get()


def actor():
    """The current request's actor; None outside a request (the writer is the platform)."""
    return _actor.get()


def action():
    """The action the current request invokes ({"name", "uuid"}), or None."""
    return _action.get()


def _origin():
    request = _request_id.get()
    if request is None:
        return None, None, None
    actor_now = _actor.get()
    # a request not (yet) authenticated writes as the API itself (login throttling)
    return request, actor_now or platform("api"), _action.get()


# the store names the request and actor of each write in its change feed (state/feed.py)
feed.set_origin_source(_origin)
