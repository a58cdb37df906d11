"""The audit page (#/audit, docs/console.md "Marketplace and audit") in headless Chromium
against a real `appliance up`: the trail as a table filtered by kind (an element's install
shows), by actor and method, by a time range, paged by the X-Pagination-Marker header; a
project's owner reads its project's entries only, a reader is offered no audit page."""

import uuid

from tests.console.test_market_browser import (
    WAIT_MS, Catalog, bound_user, heading, new_project, no_page_errors, open_hash)
from tests.waiting import eventually

E = "/v1/repo/elements"


def test_the_trail_filtered_by_kind_shows_an_install(console_appliance, page, login, shot):
    admin = console_appliance.admin
    catalog = Catalog(admin)
    element = catalog.upload("audited", "1.0.0")
    installed = admin.post(f"{E}/{element['uuid']}/actions/install/invoke", {})
    assert installed.status == 200, installed.json
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    page.get_by_role("navigation", name="Resources").get_by_role(
        "link", name="Audit trail", exact=True).click()
    heading(page, "Audit trail")
    page.locator("table.audit-entries").wait_for(timeout=WAIT_MS)
    shot(page, "audit-all")

    page.get_by_label("Kind").fill("repo_elements")
    page.get_by_role("button", name="Filter").click()
    install_path = f"{E}/{element['uuid']}/actions/install/invoke"
    row = page.locator("table.audit-entries tbody tr", has_text=install_path)
    row.wait_for(timeout=WAIT_MS)
    assert "kind=repo_elements" in page.url
    kinds = page.locator("table.audit-entries tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.kind)")
    assert kinds and set(kinds) == {"repo_elements"}
    cells = row.locator("td")
    assert cells.nth(1).inner_text() == "admin"
    assert cells.nth(2).inner_text() == "POST"
    assert cells.nth(4).inner_text() == "200"
    shot(page, "audit-kind-repo-elements")

    # Refresh reads the trail again: a newer entry of the kind appears
    again = admin.post(f"{E}/{element['uuid']}/actions/install/invoke", {})
    assert again.status in (200, 409), again.json
    page.get_by_role("button", name="Refresh").click()
    eventually(lambda: page.locator("table.audit-entries tbody tr", has_text=install_path).count()
               == 2, 30, "the second install's entry after Refresh")

    # and by actor + method, and a time range that holds nothing
    open_hash(page, console_appliance, "/audit?actor=admin&method=POST&kind=repo_elements")
    row.first.wait_for(timeout=WAIT_MS)
    open_hash(page, console_appliance, "/audit?kind=repo_elements&since=2100-01-01T00:00:00.000Z")
    page.get_by_text("No entry with these filters").wait_for(timeout=WAIT_MS)
    # the form shows the range back in local time, ready to change
    assert page.get_by_label("From").input_value().startswith("2100-01-01") or \
        page.get_by_label("From").input_value().startswith("2099-12-31")
    shot(page, "audit-empty-range")
    no_page_errors(page)


def test_the_trail_pages_by_its_marker(console_appliance, page, login, shot):
    admin = console_appliance.admin
    # 55 refused deletes: each is an entry (a refused attempt is part of who did what)
    for _ in range(55):
        assert admin.delete(f"/v1/iam/projects/{uuid.uuid4()}").status == 404
    login(page, via="api")
    open_hash(page, console_appliance, "/audit?method=DELETE&kind=iam_projects")
    rows = page.locator("table.audit-entries tbody tr")
    rows.first.wait_for(timeout=WAIT_MS)
    assert rows.count() == 50
    first_page = set(rows.evaluate_all("rows => rows.map(r => r.dataset.uuid)"))
    page.get_by_role("button", name="Next page").click()
    eventually(lambda: "page_marker=" in page.url and rows.count() >= 1
               and not set(rows.evaluate_all("rows => rows.map(r => r.dataset.uuid)")) & first_page,
               30, "the second page")
    assert "method=DELETE" in page.url
    shot(page, "audit-second-page")
    page.get_by_role("button", name="First page").click()
    eventually(lambda: "page_marker=" not in page.url and rows.count() == 50, 30, "the first page")
    no_page_errors(page)


def test_an_owner_reads_its_project_and_a_reader_gets_no_audit(console_appliance, page,
                                                                login, shot):
    admin = console_appliance.admin
    project = new_project(admin)
    made = admin.post("/v1/compute/placement_policies", {
        "name": "audited-" + uuid.uuid4().hex[:6], "project_id": project["uuid"]})
    assert made.status == 201, made.json
    admin.post("/v1/iam/projects", {"name": "elsewhere-" + uuid.uuid4().hex[:6]})

    owner, owner_password = bound_user(admin, "owner", project["uuid"])
    login(page, owner, owner_password, project=project["uuid"], via="api")
    open_hash(page, console_appliance, "/")
    page.get_by_role("navigation", name="Resources").get_by_role(
        "link", name="Audit trail", exact=True).click()
    heading(page, "Audit trail")
    rows = page.locator("table.audit-entries tbody tr")
    rows.first.wait_for(timeout=WAIT_MS)
    projects = page.locator("table.audit-entries tbody td:nth-child(7) a").evaluate_all(
        "links => links.map(a => a.title)")
    assert projects and set(projects) == {project["uuid"]}
    policies = "table.audit-entries tbody tr[data-kind='compute_placement_policies']"
    assert page.locator(policies).count() >= 1
    shot(page, "audit-owner")
    no_page_errors(page)

    reader, reader_password = bound_user(admin, "reader", project["uuid"])
    # a new document: the page keeps its session in memory across hash changes
    page.goto("about:blank")
    page.context.clear_cookies()
    login(page, reader, reader_password, project=project["uuid"], via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    assert page.get_by_role("navigation", name="Resources").get_by_role(
        "link", name="Audit trail", exact=True).count() == 0
    open_hash(page, console_appliance, "/audit")
    heading(page, "Audit trail")
    assert "may not read the audit trail" in page.get_by_role("alert").inner_text()
    assert page.locator("table.audit-entries").count() == 0
    shot(page, "audit-reader-refused")
    no_page_errors(page)
