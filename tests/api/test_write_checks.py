"""Write checks (`Api.write_checks`): a rule above the framework that holds every kind's
creates and updates (a project's quotas) is installed on the Api, and the framework runs it
under its guard before each write. A refusal is the check's own 4xx and changes nothing.
Over the real API of tests/api/conftest.py, with a check installed by the test."""

import contextlib
import threading
import uuid

import pytest

from appliance.api.errors import Conflict
from appliance.iam.builtin import ADMIN_PROJECT
from appliance.tenancy import quotas

W = "/v1/test/widgets"
LIMIT = 50


class BigWidgets:
    """Refuses a widget larger than LIMIT; records what it saw and whether its guard was
    held then."""

    def __init__(self):
        self.held = threading.local()
        self.seen = []

    @contextlib.contextmanager
    def guard(self, store, kind, project_id):
        self.held.project = project_id
        try:
            yield
        finally:
            self.held.project = None

    def check(self, store, settings, kind, before, after):
        self.seen.append((kind, getattr(self.held, "project", None),
                          (before or {}).get("size"), after.get("size")))
        if kind == "test_widgets" and after.get("size", 0) > LIMIT:
            raise Conflict(f"size {after['size']} is over {LIMIT}", type="TooBig")


@pytest.fixture
def big_widgets(server):
    check = BigWidgets()
    server.api.write_checks.append(check)
    yield check
    server.api.write_checks.remove(check)


def widget(size):
    return {"name": f"w-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, "size": size}


def test_the_app_installs_the_quotas_of_projects(server):
    assert quotas in server.api.write_checks


def test_a_create_is_checked_under_the_guard_and_a_refusal_stores_nothing(admin, server,
                                                                           big_widgets):
    body = widget(LIMIT + 1)
    resp = admin.post(W, body)
    assert resp.status == 409, resp
    assert resp.json == {"type": "TooBig", "code": 409,
                         "message": f"size {LIMIT + 1} is over {LIMIT}"}
    assert server.store.collection("test_widgets").by("name", body["name"]) == []
    assert big_widgets.seen == [("test_widgets", ADMIN_PROJECT, None, LIMIT + 1)]

    resp = admin.post(W, widget(LIMIT))
    assert resp.status == 201, resp
    assert big_widgets.seen[-1] == ("test_widgets", ADMIN_PROJECT, None, LIMIT)


def test_an_update_is_checked_on_what_the_record_becomes(admin, server, big_widgets):
    made = admin.post(W, widget(10)).json
    widgets = server.store.collection("test_widgets")
    before = widgets.get(made["uuid"])
    resp = admin.put(f"{W}/{made['uuid']}", {"size": LIMIT + 1})
    assert resp.status == 409 and resp.json["type"] == "TooBig", resp
    assert widgets.get(made["uuid"]) == before
    assert big_widgets.seen[-1] == ("test_widgets", ADMIN_PROJECT, 10, LIMIT + 1)

    resp = admin.put(f"{W}/{made['uuid']}", {"color": "red"})
    assert resp.status == 200 and resp.json["color"] == "red", resp
    assert big_widgets.seen[-1] == ("test_widgets", ADMIN_PROJECT, 10, 10)
