"""The console's special views (docs/console.md, "Special views") in headless Chromium
against a real `appliance up` (tests/console/conftest.py): a DNS domain's records and the
built-in server's answer for a name, an LB's rendered routes and nginx text, a node's
serial console log following as it grows, and the overview's daemons from
GET /v1/system/daemons. Each test saves screenshots of what it saw."""

import os
import uuid

from tests.console.pages import WAIT_MS, heading, no_page_errors, open_hash
from tests.waiting import eventually

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"


def created(resp):
    assert resp.status == 201, resp.json
    return resp.json


def test_a_domain_shows_its_records_and_the_servers_answer(console_appliance, page, login,
                                                           shot):
    admin = console_appliance.admin
    zone = f"z{uuid.uuid4().hex[:8]}.test"
    domain = created(admin.post("/v1/dns/domains", {"name": zone,
                                                    "project_id": ADMIN_PROJECT}))
    path = f"/v1/dns/domains/{domain['uuid']}"
    created(admin.post(path + "/records", {
        "type": "A", "ttl": 300, "record": {"kind": "A", "name": "www",
                                            "address": "10.20.0.5"}}))
    created(admin.post(path + "/records", {
        "type": "TXT", "record": {"kind": "TXT", "name": "note",
                                  "content": "<b>not markup</b>"}}))
    # the dns daemon serves the new zone within moments (no timing asserted: waited for)
    eventually(lambda: admin.get(f"{path}/actions/resolve?name=www.{zone}").json
               .get("answer"), 30, "the dns daemon to serve the new zone")

    login(page, via="api")
    open_hash(page, console_appliance, "/k/dns/domains/" + domain["uuid"])
    heading(page, zone)
    table = page.locator("table.records")
    table.wait_for(timeout=WAIT_MS)
    www = table.locator("tbody tr", has_text="www")
    assert [c.strip() for c in www.locator("th, td").all_inner_texts()] == [
        "www", "A", "300", "10.20.0.5"]
    # the SOA the API made with the domain, and a value with markup shown as text
    assert table.locator("tbody tr", has_text="SOA").count() == 1
    assert table.locator("td", has_text="<b>not markup</b>").count() == 1
    assert table.locator("b").count() == 0
    # a record made while the page is open appears without a reload
    created(admin.post(path + "/records", {
        "type": "A", "record": {"kind": "A", "name": "api", "address": "10.20.0.6"}}))
    table.locator("tbody tr", has_text="10.20.0.6").wait_for(timeout=WAIT_MS)
    shot(page, "domain-records")

    # a record's name: the server's answer, its address among the rows
    page.get_by_label("name", exact=True).fill(f"www.{zone}")
    page.locator("#resolve-type").select_option("A")
    page.get_by_role("button", name="Resolve", exact=True).click()
    page.locator("#resolve-rcode").wait_for(timeout=WAIT_MS)
    assert page.locator("#resolve-rcode").inner_text() == "NOERROR"
    answer = page.locator("table.rrs-answer tbody tr")
    assert answer.count() == 1
    assert [c.strip() for c in answer.first.locator("td").all_inner_texts()] == [
        f"www.{zone}", "A", "300", "10.20.0.5"]
    assert page.locator(".answer", has_text="udp").count() == 1
    shot(page, "domain-resolve-answer")

    # a name outside the zone: the API's 400 message beside the name field, no answer
    page.get_by_label("name", exact=True).fill("www.elsewhere.test")
    page.get_by_role("button", name="Resolve", exact=True).click()
    error = page.locator("#resolve-error-name")
    error.wait_for(timeout=WAIT_MS)
    assert error.get_attribute("role") == "alert"
    assert error.inner_text().startswith("name: www.elsewhere.test is not inside the domain")
    assert page.locator("#resolve-name").get_attribute("aria-describedby") == "resolve-error-name"
    assert page.locator("#resolve-name").input_value() == "www.elsewhere.test"
    assert page.locator("#resolve-rcode").count() == 0
    shot(page, "domain-resolve-outside")
    no_page_errors(page)


def test_an_lb_shows_its_rendered_routes(console_appliance, page, login, shot):
    admin = console_appliance.admin
    node = created(admin.post("/v1/compute/nodes", {
        "name": f"hw-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, "cores": 1,
        "ram": 1024, "node_type": "HW"}))
    lb = created(admin.post("/v1/network/lb", {
        "name": f"lb-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
        "type": {"kind": "external_node", "external_node": node["uuid"]}}))
    lb_path = f"/v1/network/lb/{lb['uuid']}"
    pool = created(admin.post(lb_path + "/backend_pools", {
        "endpoints": [{"kind": "host", "host": "10.0.0.5", "port": 8080}]}))
    domain = f"{uuid.uuid4().hex[:8]}.example.test"
    vhost = created(admin.post(lb_path + "/vhosts", {
        "protocol": "http", "port": 20080, "domains": [domain]}))
    route = created(admin.post(f"{lb_path}/vhosts/{vhost['uuid']}/routes", {
        "condition": {"kind": "prefix", "value": "/shop/",
                      "actions": [{"kind": "backend", "pool": pool["uuid"]}]}}))

    login(page, via="api")
    open_hash(page, console_appliance, "/k/network/lb/" + lb["uuid"])
    heading(page, lb["name"])
    page.get_by_role("heading", name="Rendered routes").wait_for(timeout=WAIT_MS)
    row = page.locator("table.routes tbody tr", has_text="/shop/")
    row.wait_for(timeout=WAIT_MS)
    cells = row.locator("td").all_inner_texts()
    assert "http:20080" in cells[0] and domain in cells[0]
    assert cells[1].startswith(route["uuid"][:8])
    assert cells[2].startswith("prefix /shop/")
    assert "10.0.0.5:8080" in cells[3]
    # the nginx text, escaped: a <pre> holding the server block for the vhost's domain
    http = page.locator('pre[data-nginx="http"]')
    http.wait_for(timeout=WAIT_MS)
    text = http.inner_text()
    assert domain in text and "location" in text and "/shop/" in text
    assert http.locator("*").count() == 0
    # a route added while the page is open: its event reads the routes again
    created(admin.post(f"{lb_path}/vhosts/{vhost['uuid']}/routes", {
        "condition": {"kind": "exact", "value": "/health",
                      "actions": [{"kind": "backend", "pool": pool["uuid"]}]}}))
    page.locator("table.routes tbody tr", has_text="exact /health").wait_for(timeout=WAIT_MS)
    assert "/health" in http.inner_text()
    shot(page, "lb-rendered-routes")
    no_page_errors(page)


def test_a_nodes_console_log_appears_and_grows(console_appliance, page, login, shot):
    admin = console_appliance.admin
    node = created(admin.post("/v1/compute/nodes", {
        "name": f"hw-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT, "cores": 1,
        "ram": 1024, "node_type": "HW"}))
    # where the compute daemon's libvirt <serial type='file'> writes it
    # (appliance/compute/console.py console_path)
    folder = os.path.join(str(console_appliance.up.state_dir), "compute", "console")
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, f"{node['uuid']}.log")
    with open(log, "w") as f:
        f.write("Booting the kernel\n<script>alert(1)</script>\n")

    login(page, via="api")
    open_hash(page, console_appliance, "/k/compute/nodes/" + node["uuid"])
    heading(page, node["name"])
    pre = page.locator("pre.console-log")
    pre.wait_for(timeout=WAIT_MS)
    eventually(lambda: "Booting the kernel" in pre.inner_text(), 30, "the log's tail")
    assert "<script>alert(1)</script>" in pre.inner_text()
    assert pre.locator("*").count() == 0
    assert page.locator("#console-follow").inner_text() == "following"
    shot(page, "node-console-first")

    # the node writes more: it is appended, once, and the view keeps to the bottom
    with open(log, "a") as f:
        for i in range(200):
            f.write(f"line {i} of the boot\n")
        f.write("login: \n")
    eventually(lambda: pre.inner_text().rstrip().endswith("login:"), 30,
               "the new lines to be appended")
    text = pre.inner_text()
    assert text.count("Booting the kernel") == 1 and text.count("line 199 of the boot") == 1
    assert text.index("Booting the kernel") < text.index("line 0 of") < text.index("login:")
    eventually(lambda: pre.evaluate(
        "el => el.scrollTop + el.clientHeight >= el.scrollHeight - 8"), 30,
        "the view to follow the end")
    shot(page, "node-console-grown")

    # more at once than one answer carries (64 KiB): read on until caught up, no gap
    block = "".join(f"bulk {i:05d}\n" for i in range(12_000))   # 132 kB
    with open(log, "a") as f:
        f.write(block + "bulk done\n")
    eventually(lambda: pre.inner_text().rstrip().endswith("bulk done"), 30,
               "the bulk write to be read to its end")
    assert block in pre.inner_text()

    # scrolled up by the user: new text does not pull the view down
    pre.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
    with open(log, "a") as f:
        f.write("after scrolling up\n")
    eventually(lambda: "after scrolling up" in pre.inner_text(), 30, "more lines")
    assert pre.evaluate("el => el.scrollTop") == 0

    # the log started anew (the node made again): the text is replaced, not appended
    with open(log, "w") as f:
        f.write("fresh start\n")
    eventually(lambda: pre.inner_text().strip() == "fresh start", 30, "the reset log")

    # a closed panel asks nothing more
    page.locator("details.console > summary").click()
    eventually(lambda: page.locator("#console-follow").inner_text() == "paused", 30,
               "following to stop")
    shot(page, "node-console-closed")
    no_page_errors(page)


def test_the_overview_shows_each_daemons_state(console_appliance, page, login, shot):
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    table = page.locator("table.daemons")
    table.wait_for(timeout=WAIT_MS)
    listed = console_appliance.admin.get("/v1/system/daemons").json
    names = page.locator("table.daemons tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.daemon)")
    assert names == [d["name"] for d in listed]
    dns = page.locator('table.daemons tr[data-daemon="dns"]')
    eventually(lambda: dns.locator("td.state").inner_text() == "running", 30,
               "the dns daemon to be running")
    assert dns.locator("td").nth(1).inner_text() != "—"   # since when
    # the special views' modules are not part of the overview's load
    loaded = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert any("/js/overview.js" in u for u in loaded)
    assert not [u for u in loaded if any(f"/js/{m}.js" in u for m in (
        "dns", "lb", "node_console", "sqldb"))]
    shot(page, "overview-daemons")
    no_page_errors(page)


def test_a_database_instance_shows_its_users_databases_and_members(console_appliance, page,
                                                              login, shot):
    from appliance.sqldb.versions import SEED_UUID  # noqa: PLC0415
    admin = console_appliance.admin
    instance = created(admin.post("/v1/sqldb/instances", {
        "name": f"db-{uuid.uuid4().hex[:8]}", "project_id": ADMIN_PROJECT,
        "version": SEED_UUID, "cpu": 1, "ram": 512, "disk_size": 8}))
    path = f"/v1/sqldb/instances/{instance['uuid']}"
    page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                   origin=console_appliance.url)
    login(page, via="api")
    open_hash(page, console_appliance, "/k/sqldb/instances/" + instance["uuid"])
    heading(page, instance["name"])
    page.get_by_role("heading", name="Connection and replication").wait_for(timeout=WAIT_MS)

    # a user and a database made while the page is open: their events read the
    # replication again, which names them
    user = created(admin.post(path + "/users", {"name": "shop", "password": "password-1"}))
    created(admin.post(path + "/databases", {"name": "orders", "owner": user["uuid"]}))
    page.locator("#sqldb-databases", has_text="orders").wait_for(timeout=WAIT_MS)
    assert page.locator("#sqldb-users").inner_text() == "shop"
    answer = admin.get(path + "/actions/replication").json
    assert answer["users"] == ["shop"] and answer["databases"] == ["orders"]
    if answer["uri"] is None:
        # no node has come up (this file's tests make no hypervisor): no URI, said why
        no_uri = page.locator("#sqldb-no-uri")
        assert no_uri.inner_text().startswith("no endpoint yet")
        assert page.locator("#sqldb-uri").count() == 0
    else:
        # with a hypervisor (another file's test made one): the URI, copied
        uri = page.locator("#sqldb-uri")
        eventually(lambda: uri.count() == 1 and uri.inner_text() == admin.get(
            path + "/actions/replication").json["uri"], 60, "the URI")
        page.get_by_role("button", name="Copy").click()
        page.locator("#copy-said", has_text="Copied.").wait_for(timeout=WAIT_MS)
        assert page.evaluate("navigator.clipboard.readText()") == uri.inner_text()

    def members_shown():
        # the members and the primary as the API answers them (the daemon makes them)
        now = admin.get(path + "/actions/replication").json
        rows = page.locator("table.members tbody tr").evaluate_all(
            "rows => rows.map(r => [r.querySelector('th a').textContent, "
            "r.cells[1].textContent])")
        empty = page.get_by_text("No members yet.").count() == 1
        return (sorted(rows) == sorted([m["name"] or m["node"], m["role"]]
                                       for m in now["members"])
                and empty == (not now["members"]))
    eventually(members_shown, 60, "the members' table to be the API's")
    shot(page, "sqldb-connection")
    no_page_errors(page)


def test_a_reader_gets_the_panels_its_permissions_allow(console_appliance, page, login,
                                                        shot):
    """A project reader (`*.read` of the project's services): a domain's records and the
    resolve form (dns.*.read), but no node console (compute.node.console), which the API
    refuses it too."""
    admin = console_appliance.admin
    project = created(admin.post("/v1/iam/projects", {"name": "rd-" + uuid.uuid4().hex[:8]}))
    username = "reader-" + uuid.uuid4().hex[:8]
    user = created(admin.post("/v1/iam/users", {"username": username,
                                                "password": "reader-password-1"}))
    role = admin.get("/v1/iam/roles?name=reader").json[0]
    created(admin.post("/v1/iam/role_bindings", {
        "user": user["uuid"], "role": role["uuid"], "project": project["uuid"]}))
    zone = f"r{uuid.uuid4().hex[:8]}.test"
    domain = created(admin.post("/v1/dns/domains", {"name": zone,
                                                    "project_id": project["uuid"]}))
    node = created(admin.post("/v1/compute/nodes", {
        "name": f"hw-{uuid.uuid4().hex[:8]}", "project_id": project["uuid"], "cores": 1,
        "ram": 1024, "node_type": "HW"}))

    login(page, username, "reader-password-1", project=project["uuid"], via="api")
    open_hash(page, console_appliance, "/k/compute/nodes/" + node["uuid"])
    heading(page, node["name"])
    page.locator("dl.fields").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("heading", name="Serial console").count() == 0
    assert page.locator("pre.console-log").count() == 0
    asked = page.evaluate(f"fetch('/v1/compute/nodes/{node['uuid']}/actions/console')"
                          ".then(r => r.status)")
    assert asked == 403
    shot(page, "reader-node-no-console")

    open_hash(page, console_appliance, "/k/dns/domains/" + domain["uuid"])
    heading(page, zone)
    page.locator("table.records tbody tr", has_text="SOA").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("heading", name="Resolve").count() == 1
    shot(page, "reader-domain")
    no_page_errors(page)


def test_the_daemons_are_refused_to_a_projects_admin(console_appliance, page, login, shot):
    """`*.*.*` in one project is not the platform: the overview offers the daemons (the
    permission matches) and shows the API's 403 there, once (docs/console.md)."""
    admin = console_appliance.admin
    project = created(admin.post("/v1/iam/projects", {"name": "pa-" + uuid.uuid4().hex[:8]}))
    username = "padmin-" + uuid.uuid4().hex[:8]
    user = created(admin.post("/v1/iam/users", {"username": username,
                                                "password": "padmin-password-1"}))
    role = admin.get("/v1/iam/roles?name=admin").json[0]
    created(admin.post("/v1/iam/role_bindings", {
        "user": user["uuid"], "role": role["uuid"], "project": project["uuid"]}))
    login(page, username, "padmin-password-1", project=project["uuid"], via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    error = page.locator("#daemons-error")
    error.wait_for(timeout=WAIT_MS)
    assert "admin's token" in error.inner_text()
    assert page.locator("table.daemons").count() == 0
    refused = [u for status, u in page.failed_responses if u.endswith("/v1/system/daemons")]
    assert refused and all(status == 403 for status, u in page.failed_responses
                           if u.endswith("/v1/system/daemons"))
    shot(page, "overview-daemons-refused")
    no_page_errors(page)
