"""The console's front end in headless Chromium against a real `appliance up`
(tests/console/conftest.py): log in, the overview, a generated list and form, a field's
error beside the field, markup in a name shown as text, a reader offered no create, the
session's end, and the two screen sizes. Each test saves screenshots of what it saw."""

import json
import uuid

import pytest

import appliance
from tests.console.pages import (WAIT_MS, heading, mark_document, no_page_errors, not_reloaded,
                                 open_hash, stream_live)
from tests.waiting import eventually

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
ADMIN_ORGANIZATION = "00000000-0000-0000-0000-000000000000"   # made at first start
MARKUP = "<script>alert(1)</script>"


def test_log_in_and_see_the_overview_with_the_version(console_appliance, page, login, shot):
    login(page)
    heading(page, "Overview")
    version = page.locator("#version")
    version.wait_for(timeout=WAIT_MS)
    assert version.inner_text() == appliance.__version__
    # the landmarks a screen reader offers, and the user in the header
    assert page.get_by_role("banner").inner_text().count("admin") >= 1
    assert page.get_by_role("navigation", name="Resources").is_visible()
    assert page.get_by_role("main").is_visible()
    # the event stream is open: the header says live
    stream_live(page)
    page.get_by_role("heading", name="Latest events").wait_for()
    shot(page, "overview")
    no_page_errors(page)


def test_the_overview_shows_a_new_resource_live(console_appliance, page, login, shot):
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    stream_live(page)
    name = "live-" + uuid.uuid4().hex[:8]
    created = console_appliance.admin.post("/v1/iam/projects", {"name": name})
    assert created.status == 201, created.json
    # no reload: the event stream brings it
    page.locator("ol.events", has_text=name).wait_for(timeout=WAIT_MS)
    shot(page, "overview-live-event")
    no_page_errors(page)


def test_create_a_project_through_the_generated_form(console_appliance, page, login, shot):
    login(page, via="api")
    open_hash(page, console_appliance, "/k/iam/projects")
    heading(page, "projects")
    page.locator("table.list").wait_for(timeout=WAIT_MS)
    shot(page, "projects-list")

    page.get_by_role("link", name="Create").click()
    heading(page, "Create in projects")
    # every input has a label a screen reader reads, and the name field is marked required
    inputs = page.locator("form.resource input, form.resource select, form.resource textarea")
    assert inputs.count() >= 2
    for i in range(inputs.count()):
        assert inputs.nth(i).evaluate("el => el.labels.length") == 1
    name_box = page.get_by_label("name", exact=False).first
    assert page.locator("#field-name").get_attribute("aria-required") == "true"
    # a reference field suggests the referenced collection's items (organization -> orgs)
    page.locator("#field-organization-choices option[value='%s']" % ADMIN_ORGANIZATION).wait_for(
        state="attached", timeout=WAIT_MS)
    assert page.locator("#field-organization").get_attribute("list") == "field-organization-choices"
    shot(page, "project-form")

    # a bad field: the API's message appears beside that field, nothing is created
    page.locator("#field-name").fill("bad name!")
    page.get_by_role("button", name="Create").click()
    error = page.locator("#error-name")
    error.wait_for(timeout=WAIT_MS)
    assert error.get_attribute("role") == "alert"
    assert error.inner_text().startswith("name: ")
    assert page.locator("#field-name").input_value() == "bad name!"   # what was typed stays
    shot(page, "project-form-bad-name")
    listed = console_appliance.admin.get("/v1/iam/projects?name=bad%20name!")
    assert listed.status in (200, 400) and (listed.status == 400 or listed.json == [])

    name = "console-" + uuid.uuid4().hex[:8]
    name_box.fill(name)
    page.locator("#field-description").fill("made in the browser")
    page.get_by_role("button", name="Create").click()
    heading(page, name)
    assert "#/k/iam/projects/" in page.url
    shot(page, "project-detail")
    made = console_appliance.admin.get(f"/v1/iam/projects?name={name}").json
    assert len(made) == 1 and made[0]["description"] == "made in the browser"
    no_page_errors(page)


def test_markup_in_a_name_is_shown_as_text(console_appliance, page, login, shot):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    made = console_appliance.admin.post("/v1/compute/placement_policies", {
        "name": MARKUP, "project_id": ADMIN_PROJECT})
    assert made.status == 201, made.json
    login(page, via="api")
    open_hash(page, console_appliance, "/k/compute/placement_policies")
    heading(page, "placement policies")
    cell = page.locator("table.list td", has_text=MARKUP)
    cell.first.wait_for(timeout=WAIT_MS)
    assert cell.first.inner_text() == MARKUP
    shot(page, "markup-in-list")
    open_hash(page, console_appliance, f"/k/compute/placement_policies/{made.json['uuid']}")
    heading(page, MARKUP)
    shot(page, "markup-in-detail")
    # text, never an element: no script in the page but the console's own module
    assert page.locator("main script").count() == 0
    assert page.evaluate("document.scripts.length") == 1
    assert dialogs == []
    no_page_errors(page)


def test_a_reader_is_offered_no_create_nor_delete(console_appliance, page, login, shot):
    admin = console_appliance.admin
    project = admin.post("/v1/iam/projects", {"name": "read-" + uuid.uuid4().hex[:8]}).json
    username = "reader-" + uuid.uuid4().hex[:8]
    user = admin.post("/v1/iam/users", {"username": username, "password": "reader-password-1"})
    assert user.status == 201, user.json
    reader = admin.get("/v1/iam/roles?name=reader").json[0]
    bound = admin.post("/v1/iam/role_bindings", {
        "user": user.json["uuid"], "role": reader["uuid"], "project": project["uuid"]})
    assert bound.status == 201, bound.json
    policy = admin.post("/v1/compute/placement_policies", {
        "name": "spread", "project_id": project["uuid"]})
    assert policy.status == 201, policy.json
    login(page, username, "reader-password-1", project=project["uuid"], via="api")
    open_hash(page, console_appliance, "/k/compute/placement_policies")
    heading(page, "placement policies")
    page.locator("table.list", has_text="spread").wait_for(timeout=WAIT_MS)
    assert page.get_by_role("link", name="Create").count() == 0
    # the navigation offers only what the reader may list (no IAM projects, users...)
    nav = page.get_by_role("navigation", name="Resources")
    assert nav.get_by_role("link", name="placement policies").count() == 1
    assert nav.get_by_role("link", name="users").count() == 0
    shot(page, "reader-placement-policies")
    open_hash(page, console_appliance, f"/k/compute/placement_policies/{policy.json['uuid']}")
    page.locator("dl.fields").wait_for(timeout=WAIT_MS)
    heading(page, "spread")
    assert page.get_by_role("button", name="Delete").count() == 0
    assert page.get_by_role("link", name="Edit").count() == 0
    # the reader's overview counts by listing what it may read (no metrics permission)
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    counts = page.locator("table.counts")
    counts.wait_for(timeout=WAIT_MS)
    assert "/v1/compute/placement_policies" in counts.inner_text()
    assert page.get_by_role("heading", name="Daemons").count() == 0
    shot(page, "reader-project-detail")
    no_page_errors(page)


def test_an_ended_session_returns_to_the_login_page(console_appliance, page, login, shot):
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    # the session ends (as when its token expires): the next call's 401 shows the login
    page.context.clear_cookies()
    page.locator("nav").get_by_role("link", name="users").click()
    heading(page, "Log in")
    assert "session has ended" in page.get_by_role("alert").inner_text()
    shot(page, "session-ended")
    no_page_errors(page)


@pytest.mark.parametrize("width,height", [(1280, 800), (768, 1024)])
def test_usable_on_a_laptop_and_a_tablet(console_appliance, page, login, shot, width, height):
    page.set_viewport_size({"width": width, "height": height})
    login(page, via="api")
    open_hash(page, console_appliance, "/k/iam/projects")
    heading(page, "projects")
    page.locator("table.list").wait_for(timeout=WAIT_MS)
    # nothing of the page is wider than the screen, and the header's controls are in view
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.get_by_role("button", name="Log out").is_visible()
    assert page.get_by_role("link", name="Create").is_visible()
    # keyboard: Tab reaches the navigation's links
    reached = set()
    for _ in range(8):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement.tagName"))
    assert "A" in reached
    shot(page, f"projects-{width}x{height}")
    no_page_errors(page)


def test_a_delete_refused_shows_what_uses_it(console_appliance, page, login, shot):
    admin = console_appliance.admin
    org = admin.post("/v1/iam/organizations", {"name": "org-" + uuid.uuid4().hex[:8]}).json
    used_by = admin.post("/v1/iam/projects", {"name": "in-" + uuid.uuid4().hex[:8],
                                              "organization": org["uuid"]})
    assert used_by.status == 201, used_by.json
    login(page, via="api")
    open_hash(page, console_appliance, f"/k/iam/organizations/{org['uuid']}")
    heading(page, org["name"])
    # keyboard: the confirmation takes the focus, Escape cancels, Enter confirms
    def confirmation_focused():
        return page.evaluate("document.activeElement.textContent") == "Confirm delete"

    page.get_by_role("button", name="Delete").click()
    eventually(confirmation_focused, 30, "the confirmation to take the focus")
    page.keyboard.press("Escape")
    eventually(lambda: page.get_by_role("button", name="Confirm delete").count() == 0, 30,
               "Escape to close the confirmation")
    page.get_by_role("button", name="Delete").click()
    eventually(confirmation_focused, 30, "the confirmation to take the focus")
    page.keyboard.press("Enter")
    refusal = page.locator("#delete-error")
    refusal.wait_for(timeout=WAIT_MS)
    assert refusal.get_attribute("role") == "alert"
    assert "in use" in refusal.inner_text() and used_by.json["name"] in refusal.inner_text()
    shot(page, "delete-refused")
    # nothing changed
    assert admin.get(f"/v1/iam/organizations/{org['uuid']}").status == 200
    no_page_errors(page)


def test_switch_project_from_the_header(console_appliance, page, login, shot):
    admin = console_appliance.admin
    owner = admin.get("/v1/iam/roles?name=owner").json[0]
    username = "two-" + uuid.uuid4().hex[:8]
    user = admin.post("/v1/iam/users", {"username": username, "password": "two-projects-1"}).json
    projects = []
    for n in range(2):
        project = admin.post("/v1/iam/projects", {"name": f"p{n}-" + uuid.uuid4().hex[:6]}).json
        bound = admin.post("/v1/iam/role_bindings", {
            "user": user["uuid"], "role": owner["uuid"], "project": project["uuid"]})
        assert bound.status == 201, bound.json
        projects.append(project)
    login(page, username, "two-projects-1", project=projects[0]["uuid"], via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    switcher = page.get_by_label("Project")
    switcher.wait_for(timeout=WAIT_MS)
    assert switcher.input_value() == projects[0]["uuid"]
    switcher.select_option(projects[1]["uuid"])
    eventually(lambda: page.evaluate("fetch('/console/session').then(r => r.json())")
               ["project_id"] == projects[1]["uuid"], 30, "the session to move project")
    assert page.get_by_label("Project").input_value() == projects[1]["uuid"]
    shot(page, "project-switched")
    no_page_errors(page)


def test_a_detail_page_follows_changes_live(console_appliance, page, login, shot):
    admin = console_appliance.admin
    project = admin.post("/v1/iam/projects", {"name": "follow-" + uuid.uuid4().hex[:8]}).json
    login(page, via="api")
    open_hash(page, console_appliance, f"/k/iam/projects/{project['uuid']}")
    heading(page, project["name"])
    stream_live(page)
    mark_document(page)
    changed = admin.put(f"/v1/iam/projects/{project['uuid']}", {"description": "changed elsewhere"})
    assert changed.status == 200, changed.json
    page.locator('[data-field="description"]', has_text="changed elsewhere").wait_for(timeout=WAIT_MS)
    assert not_reloaded(page)
    # its history: the create read from the feed, the update as it came
    history = page.locator("ol.history")
    history.locator("li", has_text="updated").first.wait_for(timeout=WAIT_MS)
    assert "created" in history.inner_text()
    shot(page, "detail-followed")
    no_page_errors(page)


def test_the_accessibility_tree_names_forms_and_landmarks(console_appliance, page, login, shot):
    """What a screen reader is given: the browser's accessibility tree (ARIA snapshot)."""
    login(page, via="api")
    open_hash(page, console_appliance, "/k/iam/users/new")
    heading(page, "Create in users")
    tree = page.locator("body").aria_snapshot()
    for expected in ('banner', 'navigation "Resources"', 'main', 'heading "Create in users" [level=1]',
                     'textbox "username', 'textbox "password', 'button "Create"',
                     'button "Log out"'):
        assert expected in tree, (expected, tree)
    shot(page, "users-form")
    no_page_errors(page)


def test_a_read_action_shows_its_answer(console_appliance, page, login, shot):
    admin = console_appliance.admin
    project = admin.post("/v1/iam/projects", {"name": "quota-" + uuid.uuid4().hex[:8]}).json
    login(page, via="api")
    open_hash(page, console_appliance, f"/k/iam/projects/{project['uuid']}")
    heading(page, project["name"])
    # GET .../actions/quotas, a button from the OpenAPI paths
    page.get_by_role("button", name="Show quotas").click()
    page.get_by_role("heading", name="quotas").wait_for(timeout=WAIT_MS)
    answer = admin.get(f"/v1/iam/projects/{project['uuid']}/actions/quotas").json
    shown = json.loads(page.locator("section.result pre").inner_text())
    assert shown == answer
    shot(page, "project-quotas")
    no_page_errors(page)


def test_a_list_filters_sorts_and_pages(console_appliance, page, login, shot):
    admin = console_appliance.admin
    tag = uuid.uuid4().hex[:6]
    names = [f"page-{tag}-{n}" for n in range(3)]
    for name in names:
        assert admin.post("/v1/iam/projects", {"name": name, "description": tag}).status == 201
    login(page, via="api")
    open_hash(page, console_appliance, "/k/iam/projects")
    heading(page, "projects")
    # filter: the conventions' ?field=value, from the form
    page.get_by_label("Filter on").select_option("description")
    page.get_by_label("equal to").fill(tag)
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.list tbody tr")
    eventually(lambda: rows.count() == 3, 30, "the three filtered rows")
    assert f"description={tag}" in page.url
    # sort by name, descending (the header twice)
    page.get_by_role("button", name="name").click()
    page.get_by_role("button", name="name ▲").click()
    eventually(lambda: names[2] in rows.first.inner_text(), 30, "the last name first")
    assert page.locator("th[aria-sort=descending]").count() == 1
    shot(page, "projects-filtered-sorted")
    # paging: two a page, then the marker of the X-Pagination-Marker header
    open_hash(page, console_appliance, f"/k/iam/projects?description={tag}&sort_key=name&page_limit=2")
    eventually(lambda: rows.count() == 2, 30, "a page of two")
    first_page = rows.all_inner_texts()
    page.get_by_role("button", name="Next page").click()
    eventually(lambda: rows.count() == 1, 30, "the last page of one")
    assert names[2] in rows.first.inner_text() and not any(names[2] in r for r in first_page)
    assert page.get_by_role("button", name="Next page").count() == 0
    page.get_by_role("button", name="First page").wait_for()
    shot(page, "projects-second-page")
    no_page_errors(page)


def test_create_a_user_with_a_password_then_log_in_as_it(console_appliance, browser, page,
                                                         login, shot):
    login(page, via="api")
    open_hash(page, console_appliance, "/k/iam/users/new")
    heading(page, "Create in users")
    username = "made-" + uuid.uuid4().hex[:8]
    page.locator("#field-username").fill(username)
    password = page.locator("#field-password")
    assert password.get_attribute("type") == "password"
    password.fill("made-in-the-console-1")
    page.get_by_role("button", name="Create").click()
    heading(page, username)
    # the password is write-only: the detail page never shows one
    assert "made-in-the-console-1" not in page.inner_text("main")
    shot(page, "user-created")
    no_page_errors(page)
    other = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        second = other.new_page()
        second.goto(console_appliance.console_url)
        second.locator('input[name="username"]').fill(username)
        second.locator('input[name="password"]').fill("made-in-the-console-1")
        second.get_by_role("button", name="Log in").click()
        second.get_by_role("heading", level=1, name="Overview").wait_for(timeout=WAIT_MS)
        assert username in second.get_by_role("banner").inner_text()
        shot(second, "logged-in-as-the-new-user")
    finally:
        other.close()


def test_an_action_with_a_body_opens_a_form_and_shows_its_errors(console_appliance, page,
                                                                login, shot):
    volume = console_appliance.admin.post("/v1/compute/volumes", {
        "size": 1, "project_id": ADMIN_PROJECT})
    assert volume.status == 201, volume.json
    login(page, via="api")
    open_hash(page, console_appliance, f"/k/compute/volumes/{volume.json['uuid']}")
    page.locator("dl.fields").wait_for(timeout=WAIT_MS)
    # attach's body schema requires node: a form, and the API's message beside the field
    page.get_by_role("button", name="attach").click()
    page.get_by_role("button", name="Invoke attach").click()
    error = page.locator("#error-node")
    error.wait_for(timeout=WAIT_MS)
    assert error.inner_text().startswith("node")
    shot(page, "attach-missing-node")
    # a node that does not exist: the API's refusal, and the volume is as it was
    page.locator("#field-node").fill(str(uuid.uuid4()))
    page.get_by_role("button", name="Invoke attach").click()
    page.locator("#action-error").wait_for(timeout=WAIT_MS)
    assert "not found" in page.locator("#action-error").inner_text()
    after = console_appliance.admin.get(f"/v1/compute/volumes/{volume.json['uuid']}").json
    assert after["node"] == volume.json["node"]
    shot(page, "attach-unknown-node")
    no_page_errors(page)


def test_the_overview_shows_a_hypervisor_capacity_live(console_appliance, page, login, shot):
    """libvirt's test:///default driver (in-process, no daemon) stands for a hypervisor:
    the compute daemon reads its capacity, and the overview shows it as it arrives."""
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    stream_live(page)
    name = "hv-" + uuid.uuid4().hex[:6]
    made = console_appliance.admin.post("/v1/compute/hypervisors", {"name": name, "driver_spec": {
        "kind": "libvirt", "connection_uri": "test:///default", "storage_pool": "default-pool"}})
    assert made.status == 201, made.json
    try:
        row = page.locator("tr", has_text=name)
        row.wait_for(timeout=WAIT_MS)
        eventually(lambda: "ACTIVE" in row.inner_text(), 60, "the hypervisor to turn ACTIVE")
        hv = console_appliance.admin.get(f"/v1/compute/hypervisors/{made.json['uuid']}").json
        cores = f"{hv['all_cores'] - hv['avail_cores']} / {hv['avail_cores']}"
        eventually(lambda: cores in row.inner_text(), 30, "the cores used / free")
        shot(page, "overview-hypervisor-capacity")
        no_page_errors(page)
    finally:
        console_appliance.admin.delete(f"/v1/compute/hypervisors/{made.json['uuid']}")
