"""A resource declared only for the framework tests: one field of every type."""

import threading

from appliance.api.fields import Boolean, Enum, Field, Integer, Object, Reference, String, Tags
from appliance.api.resource import Action, Resource


def echo_action(call, record):
    return {"widget": record["uuid"], "got": call.body}


def peek_action(call, record):
    return {"name": record["name"]}


def activate_action(call, record):
    """Writes the widget from the request's own thread: an action with an effect (the
    change feed names the action behind the write, tests/api/test_events.py)."""
    return call.store.collection("test_widgets").update(record["uuid"], {"status": "ACTIVE"})


def contend_action(call, record):
    """Loses every compare-and-set to another writer: contention that never ends."""
    coll = call.store.collection("test_widgets")
    other = threading.Thread(target=coll.update, args=(record["uuid"], {"status": "ACTIVE"}))
    other.start()
    other.join()
    coll.update(record["uuid"], {"color": "red"}, expect_revision=record["revision"])


class Widgets(Resource):
    def __init__(self):
        super().__init__(
            name="Widget", path="/v1/test/widgets", kind="test_widgets", service="test",
            policy="widget", unique=[("name", "project_id")], project_scoped=True,
            fields=[
                Field("name", String(64, pattern=r"^[a-z][a-z0-9-]*$"), required=True),
                Field("project_id", Reference("/v1/iam/projects"), required=True),
                Field("size", Integer(0, 100), default=10, nullable=False),
                Field("enabled", Boolean(), default=True, nullable=False),
                Field("color", Enum("red", "green", "blue")),
                Field("owner", Reference("/v1/iam/users")),
                Field("spec", Object({"type": "object", "properties": {
                    "kind": {"enum": ["plain"]}}, "required": ["kind"]})),
                Field("tags", Tags()),
                Field("status", Enum("NEW", "ACTIVE"), read_only=True),
                Field("secret_note", String(64), omit_unset=True),
                Field("serial", Integer(), create_only=True),
            ],
            actions=[Action("echo", echo_action), Action("peek", peek_action, method="GET"),
                     Action("contend", contend_action), Action("activate", activate_action)])

    def prepare_create(self, call, record):
        record["status"] = "NEW"
        return record

    def prepare_update(self, call, current, changes):
        # tests/api: `tags: ["race"]` makes another writer (think: a daemon writing status)
        # land between this PUT's read and its write, `races_left` times. It writes from
        # its own thread, as a daemon would (a write of the handler's own would forbid the
        # retry). While this request holds the kind's lock (its last attempt), a daemon
        # would wait for it: then the writer stays away, or it would wait for ever here
        coll = self.collection()
        if changes.get("tags") == ["race"] and self.races_left > 0 and not coll.lock.held():
            self.races_left -= 1
            other = threading.Thread(target=coll.update,
                                     args=(current["uuid"], {"status": "ACTIVE"}))
            other.start()
            other.join()
        return changes

    races_left = 0


def register(api):
    Widgets().register(api)
