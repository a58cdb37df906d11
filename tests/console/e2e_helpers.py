"""Set-up shared by the console's end-to-end browser tests (tests/console/test_e2e_*.py):
what a test is not about is made through the API (a hypervisor, a project with a reader,
a certificate), and the pages are waited for by what they show (Playwright's auto-waiting
`expect`), never by a clock. The appliance is the session's one `console_appliance`
(tests/console/conftest.py); every name made here is unique, so the tests share it with the
other console tests."""

import os
import threading
import uuid

import pytest
from playwright.sync_api import expect

from tests.compute.reconcile_helpers import image_app
from tests.console.pages import (mark_document, no_page_errors, not_reloaded,  # noqa: F401
                                 open_hash)  # (the e2e tests take them from here)
from tests.waiting import eventually
from tests.wsgiserver import LoopbackServer

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
WAIT_MS = 60_000
HYPERVISORS, NODES = "/v1/compute/hypervisors", "/v1/compute/nodes"
LB, CERTS = "/v1/network/lb", "/v1/secret/certificates"
DOMAINS, CONFIGS = "/v1/dns/domains", "/v1/config/configs"

expect.set_options(timeout=WAIT_MS)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def created(resp):
    assert resp.status == 201, (resp.status, resp.json)
    return resp.json


def heading(page, text):
    expect(page.get_by_role("heading", level=1, name=text, exact=True)).to_be_visible()


def stream_live(page):
    expect(page.locator("header .stream")).to_have_text("live")


def fill_field(page, name, value):
    page.locator(f"#field-{name}").fill(value)


def select_field(page, name, value):
    page.locator(f"#field-{name}").select_option(value)


def submit_create(page):
    page.locator("form.resource").get_by_role("button", name="Create").click()


def wait_status(client, path, statuses, what):
    return eventually(lambda: (lambda r: r if r.get("status") in statuses else None)(
        client.get(path).json), 120, what)


def page_fetch(page, method, path, body=None):
    """A request from the page itself, as its own code would send it (the session cookie,
    the X-CSRF-Token echoing the appliance_csrf cookie): (status, answer body)."""
    return page.evaluate("""async ([method, path, body]) => {
      const csrf = (document.cookie.split("; ").find((c) => c.startsWith("appliance_csrf=")) || "")
        .slice("appliance_csrf=".length);
      const r = await fetch(path, {method, credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: body === null ? undefined : JSON.stringify(body)});
      let data = null;
      try { data = await r.json(); } catch (e) { data = null; }
      return [r.status, data];
    }""", [method, path, body])


# ---- a hypervisor on libvirt's test driver, and an image server ---------------------------

class Images:
    """Root disk images served on loopback, as the compute tests serve theirs
    (tests/compute/test_reconcile_daemon.py): the compute daemon downloads them. A gated
    image's answer waits until the test opens its gate, so a node stays IN_PROGRESS (its
    disk being filled) for as long as the test wants to look at it."""

    RAW = b"\x00" * 510 + b"\x55\xaa" + b"\x00" * 4096

    def __init__(self, folder):
        self.folder = folder
        self.hits = []          # every name asked for, as the request arrives
        self.gates = {}
        self.serve = image_app(folder, [])
        self.server = LoopbackServer(self.app).start()
        self.base = f"http://127.0.0.1:{self.server.port}"

    def add(self, name):
        with open(os.path.join(self.folder, name), "wb") as f:
            f.write(self.RAW)
        return f"{self.base}/{name}"

    def gated(self, name):
        """(url, gate): the image's download waits for gate.set() (at most 120 s)."""
        self.gates[name] = threading.Event()
        return self.add(name), self.gates[name]

    def app(self, environ, start_response):
        name = environ["PATH_INFO"].lstrip("/")
        self.hits.append(name)
        if name in self.gates:
            self.gates[name].wait(120)
        return self.serve(environ, start_response)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    served = Images(str(tmp_path_factory.mktemp("images")))
    yield served
    for gate in served.gates.values():
        gate.set()
    served.server.stop()


@pytest.fixture(scope="module")
def image_url(images):
    return images.add("base.raw")


@pytest.fixture(scope="module")
def hypervisor(console_appliance):
    """libvirt's test:///default (in the compute daemon's process, no libvirtd) as the
    hypervisor VM nodes are placed on, ACTIVE before the test starts. The API takes one
    hypervisor per connection URI: one another test left is used as it is; one made here is
    deleted at the end, with the nodes the tests placed on it."""
    admin = console_appliance.admin
    found = [h for h in admin.get(HYPERVISORS).json
             if (h.get("driver_spec") or {}).get("connection_uri") == "test:///default"]
    made = None if found else created(admin.post(HYPERVISORS, {
        "name": unique("e2e-hv"), "driver_spec": {
            "kind": "libvirt", "connection_uri": "test:///default",
            "storage_pool": "default-pool"}}))
    used = found[0] if found else made
    path = f"{HYPERVISORS}/{used['uuid']}"
    wait_status(admin, path, ("ACTIVE",), "the hypervisor to turn ACTIVE")
    yield used
    for node in admin.get(f"{NODES}?hypervisor={used['uuid']}").json or []:
        if node["name"].startswith("e2e-"):
            admin.delete(f"{NODES}/{node['uuid']}")
    if made:
        eventually(lambda: not admin.get(f"{NODES}?hypervisor={made['uuid']}").json, 120,
                   "the test's nodes to be deleted")
        admin.delete(path)


def vm_node(admin, image_url, project=ADMIN_PROJECT):
    return created(admin.post(NODES, {
        "name": unique("e2e-vm"), "project_id": project, "cores": 1, "ram": 1024,
        "disk_spec": {"kind": "root_disk", "image": image_url}}))


def hw_node(admin, project=ADMIN_PROJECT):
    """A HW node: a record only (no hypervisor, no daemon work), what an LB of type
    external_node or a config can point at."""
    return created(admin.post(NODES, {"name": unique("e2e-hw"), "project_id": project,
                                      "cores": 1, "ram": 1024, "node_type": "HW"}))


# ---- people ---------------------------------------------------------------------------

def project_with_member(admin, role="reader", password="e2e-member-password-1"):
    """A new project and a new user bound in it with `role`: (project, username, password)."""
    project = created(admin.post("/v1/iam/projects", {"name": unique("e2e-proj")}))
    username = unique("e2e-user")
    user = created(admin.post("/v1/iam/users", {"username": username, "password": password}))
    found = admin.get(f"/v1/iam/roles?name={role}").json[0]
    created(admin.post("/v1/iam/role_bindings", {
        "user": user["uuid"], "role": found["uuid"], "project": project["uuid"]}))
    return project, username, password


# ---- certificates ---------------------------------------------------------------------

def manual_certificate(admin, project=ADMIN_PROJECT):
    """A certificate uploaded (method manual): key and chain given, no ACME."""
    from tests.lb.helpers import pem_pair  # noqa: PLC0415
    crt, key = pem_pair("e2e.example.test")
    return created(admin.post(CERTS, {
        "name": unique("e2e-cert"), "project_id": project, "method": {"kind": "manual"},
        "domains": ["e2e.example.test"], "cert": crt, "key": key}))
