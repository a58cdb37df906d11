"""The marketplace pages (#/market, docs/console.md "Marketplace and audit") in headless
Chromium against a real `appliance up` (tests/console/conftest.py): browse a catalog and
search it, see an element's versions and what it requires, install with one click and
watch the element reach ACTIVE from the event stream without a reload, upgrade and
uninstall from the installed element's page, a refusal shown as the API's message, markup
in a description shown as text, and no Install for a caller the API would refuse. The
catalog is a database repository of the admin project (the shared catalog) into which the
test uploads its manifests, as `appliance repo upload` does (tests/cli/test_repo.py)."""

import uuid

import pytest

from tests.apiserver import TOKEN_PATH
from tests.console.pages import WAIT_MS, heading, no_page_errors, open_hash, stream_live
from tests.repo.conftest import manifest
from tests.waiting import eventually

ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000"
MARKUP = "<script>alert(1)</script>"
INSTALL_S = 180       # a builder pass, the Element Manager's, on a machine shared by others
R = "/v1/repo/repositories"
E = "/v1/repo/elements"


class Catalog:
    """A database repository of the admin project with uploaded elements."""

    def __init__(self, admin):
        self.admin = admin
        self.prefix = "m" + uuid.uuid4().hex[:6]
        made = admin.post(R, {"name": f"catalog-{self.prefix}", "project_id": ADMIN_PROJECT,
                              "driver_spec": {"kind": "database"}})
        assert made.status == 201, made.json
        self.repo = made.json
        eventually(lambda: admin.get(f"{R}/{self.repo['uuid']}").json["status"] == "ACTIVE",
                   60, "the catalog's repository to be ACTIVE")

    def upload(self, name, version, requires=None, description=None):
        body = manifest(f"{self.prefix}-{name}", version, requires)
        answer = self.admin.post(f"{R}/{self.repo['uuid']}/actions/upload/invoke", {
            "element_name": body["name"], "element_version": version, "manifest": body,
            "description": description or body["description"]})
        assert answer.status in (200, 201), answer.json
        return answer.json

    def element(self, uuid_):
        return self.admin.get(f"{E}/{uuid_}").json


@pytest.fixture(scope="module")
def catalog(console_appliance):
    """base 1.0.0 (its description is markup) and 1.1.0, and app 1.0.0 requiring
    base >= 1.0.0."""
    cat = Catalog(console_appliance.admin)
    cat.base = cat.upload("base", "1.0.0", description=MARKUP)
    cat.base11 = cat.upload("base", "1.1.0")
    cat.app = cat.upload("app", "1.0.0", {f"{cat.prefix}-base": {"from_version": "1.0.0"}})
    return cat


def bound_user(admin, role_name, project_uuid):
    """A user bound with the built-in role in the project: (username, password)."""
    username = f"{role_name}-{uuid.uuid4().hex[:8]}"
    password = f"{role_name}-password-1"
    user = admin.post("/v1/iam/users", {"username": username, "password": password})
    assert user.status == 201, user.json
    role = admin.get(f"/v1/iam/roles?name={role_name}").json[0]
    bound = admin.post("/v1/iam/role_bindings", {
        "user": user.json["uuid"], "role": role["uuid"], "project": project_uuid})
    assert bound.status == 201, bound.json
    return username, password


def new_project(admin):
    made = admin.post("/v1/iam/projects", {"name": "p-" + uuid.uuid4().hex[:8]})
    assert made.status == 201, made.json
    return made.json


def status_text(page, selector):
    return page.locator(selector + " .status").first.inner_text()


def test_browse_a_catalog_search_it_and_see_versions_and_requirements(
        console_appliance, catalog, page, login, shot):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, via="api")
    open_hash(page, console_appliance, "/")
    heading(page, "Overview")
    # the page's module is loaded when the page is first opened, not with the overview
    loaded = "performance.getEntriesByType('resource').map(e => e.name)"
    assert not [u for u in page.evaluate(loaded) if "/js/market.js" in u]
    page.get_by_role("navigation", name="Resources").get_by_role(
        "link", name="Marketplace").click()
    heading(page, "Marketplace")
    assert [u for u in page.evaluate(loaded) if "/js/market.js" in u]
    page.locator("table.market-elements").wait_for(timeout=WAIT_MS)
    # search by part of a name: only this catalog's two elements remain
    page.get_by_label("Name", exact=True).fill(catalog.prefix)
    page.get_by_role("button", name="Search").click()
    eventually(lambda: page.locator("table.market-elements tbody tr").count() == 2, 30,
               "the search to leave the catalog's two elements")
    assert f"q={catalog.prefix}" in page.url
    rows = page.locator("table.market-elements tbody tr")
    base_row = rows.filter(has_text=f"{catalog.prefix}-base")
    assert base_row.locator("td").nth(1).inner_text() == "1.1.0"     # the newest version
    assert base_row.locator("td").nth(3).inner_text() == "2"         # of two
    # the catalog's own select narrows to this repository
    page.get_by_label("Catalog", exact=True).select_option(catalog.repo["uuid"])
    page.get_by_role("button", name="Search").click()
    eventually(lambda: f"repository={catalog.repo['uuid']}" in page.url, 30, "the filter")
    page.locator("table.market-elements tbody tr").first.wait_for(timeout=WAIT_MS)
    shot(page, "market-catalog-search")

    # an element's page: what it requires and its versions
    page.get_by_role("link", name=f"{catalog.prefix}-app").click()
    heading(page, f"{catalog.prefix}-app 1.0.0")
    requirement = page.locator("#requirements li")
    requirement.wait_for(timeout=WAIT_MS)
    assert requirement.inner_text() == f"{catalog.prefix}-base ≥ 1.0.0"
    # the versions come in their own answer, after the requirements' (a busy machine showed
    # the table still empty here)
    eventually(lambda: page.locator("#versions tbody tr").count() == 1, 30, "its one version")
    assert "secret" in page.locator("ul.creates").inner_text()
    shot(page, "market-element-requirements")

    # the requirement links to the catalog searched for it; the base's versions, newest first
    requirement.get_by_role("link").click()
    heading(page, "Marketplace")
    page.get_by_role("link", name=f"{catalog.prefix}-base").click()
    heading(page, f"{catalog.prefix}-base 1.1.0")
    eventually(lambda: page.locator("#versions tbody tr").count() == 2, 30, "both versions")
    assert [page.locator("#versions tbody tr").nth(i).get_attribute("data-version")
            for i in range(2)] == ["1.1.0", "1.0.0"]
    assert page.locator("#no-requirements").is_visible()

    # the 1.0.0 description is markup: shown as its characters, never run
    page.locator("#versions").get_by_role("link", name="1.0.0").click()
    heading(page, f"{catalog.prefix}-base 1.0.0")
    description = page.locator("#element-description")
    description.wait_for(timeout=WAIT_MS)
    assert description.inner_text() == MARKUP
    assert page.locator("main script").count() == 0
    assert dialogs == []
    shot(page, "market-markup-description")
    no_page_errors(page)


def test_install_with_one_click_watch_it_then_upgrade_and_uninstall(
        console_appliance, catalog, page, login, shot):
    admin = console_appliance.admin
    login(page, via="api")
    open_hash(page, console_appliance, f"/market/e/{catalog.app['uuid']}")
    heading(page, f"{catalog.prefix}-app 1.0.0")
    stream_live(page)
    # a mark on the window: gone if the page were reloaded
    page.evaluate("window.__notReloaded = true")
    page.get_by_role("button", name="Install", exact=True).click()
    page.locator("#h-progress").wait_for(timeout=WAIT_MS)
    shot(page, "market-install-started")
    # the stream moves the page: the element, its Element Manager element, its resources
    eventually(lambda: status_text(page, "#progress-element") in ("ACTIVE", "ERROR"),
               INSTALL_S, "the install to finish on the page")
    assert status_text(page, "#progress-element") == "ACTIVE", \
        page.locator("#progress-element").inner_text()
    assert page.evaluate("window.__notReloaded") is True
    page.locator("#progress-em").wait_for(timeout=WAIT_MS)
    eventually(lambda: status_text(page, "#progress-em") == "ACTIVE", 60, "the EM element")
    resource_rows = page.locator("#progress-resources tbody tr")
    eventually(lambda: resource_rows.count() >= 1, 60, "the element's resources")
    eventually(lambda: all(status_text(page, f"#progress-resources tbody tr:nth-child({i + 1})")
                           == "ACTIVE" for i in range(resource_rows.count())), 60,
               "the resources to be ACTIVE")
    assert page.locator(".badge", has_text="installed").is_visible()
    shot(page, "market-install-active")
    app = catalog.element(catalog.app["uuid"])
    assert app["status"] == "ACTIVE" and app["installation_state"] == "INSTALLED"
    # the dependency came with it, and its page says so
    base = catalog.element(catalog.base["uuid"]) if catalog.element(
        catalog.base["uuid"])["installation_state"] == "INSTALLED" else catalog.element(
        catalog.base11["uuid"])
    assert base["installation_state"] == "INSTALLED"
    # the one click is the CLI's call, and the audit trail names it
    open_hash(page, console_appliance, "/audit?kind=repo_elements&actor=admin")
    page.locator("table.audit-entries tbody tr", has_text=(
        f"{E}/{catalog.app['uuid']}/actions/install/invoke")).wait_for(timeout=WAIT_MS)
    shot(page, "market-install-audited")

    # the dependency cannot go while app needs it: the API's 409 is shown
    open_hash(page, console_appliance, f"/market/e/{base['uuid']}")
    heading(page, f"{catalog.prefix}-base {base['version']}")
    page.get_by_role("button", name="Uninstall").click()
    page.get_by_role("button", name="Confirm uninstall").click()
    refusal = page.locator("#action-error")
    refusal.wait_for(timeout=WAIT_MS)
    assert refusal.get_attribute("role") == "alert"
    assert refusal.inner_text().startswith("Uninstall: ")
    assert catalog.element(base["uuid"])["installation_state"] == "INSTALLED"
    shot(page, "market-uninstall-refused")

    # upgrade the dependency to the other version from its installed page
    other = catalog.base11 if base["uuid"] == catalog.base["uuid"] else catalog.base
    page.locator("#versions").get_by_role("button", name=f"Upgrade to {other['version']}").click()
    heading(page, f"{catalog.prefix}-base {other['version']}")
    eventually(lambda: page.locator("#progress-element").count() == 1
               and status_text(page, "#progress-element") in ("ACTIVE", "ERROR"),
               INSTALL_S, "the upgrade to finish on the page")
    assert status_text(page, "#progress-element") == "ACTIVE", \
        page.locator("#progress-element").inner_text()
    eventually(lambda: catalog.element(other["uuid"])["installation_state"] == "INSTALLED",
               60, "the target to be the installed one")
    shot(page, "market-upgraded")

    # uninstall app from its installed page: back to AVAILABLE, no longer installed
    open_hash(page, console_appliance, f"/market/e/{catalog.app['uuid']}")
    heading(page, f"{catalog.prefix}-app 1.0.0")
    page.get_by_role("button", name="Uninstall").click()
    page.get_by_role("button", name="Confirm uninstall").click()
    eventually(lambda: page.locator(".badge", has_text="installed").count() == 0
               and status_text(page, "#element-status") == "AVAILABLE",
               INSTALL_S, "the uninstall to finish on the page")
    # the status and the button are drawn by separate updates: waited for, not read at once
    # (a quick run on 2026-11-28 read the button before it was drawn)
    eventually(lambda: page.get_by_role("button", name="Install", exact=True).is_visible(),
               INSTALL_S, "the Install button back on the page")
    gone = admin.get(f"{E}/{catalog.app['uuid']}").json
    assert gone["installation_state"] == "UNINSTALLED" and gone["status"] == "AVAILABLE"
    shot(page, "market-uninstalled")
    no_page_errors(page)


def test_a_project_reader_and_an_owner_get_no_install_on_the_shared_catalog(
        console_appliance, catalog, page, login, shot):
    admin = console_appliance.admin
    project = new_project(admin)
    username, password = bound_user(admin, "reader", project["uuid"])
    login(page, username, password, project=project["uuid"], via="api")
    open_hash(page, console_appliance, f"/market/e/{catalog.base11['uuid']}")
    heading(page, f"{catalog.prefix}-base 1.1.0")
    page.locator("#versions tbody tr").first.wait_for(timeout=WAIT_MS)
    assert page.get_by_role("button", name="Install", exact=True).count() == 0
    assert page.get_by_role("button", name="Uninstall").count() == 0
    assert page.get_by_role("button", name="Upgrade", exact=False).count() == 0
    shot(page, "market-reader-no-install")
    no_page_errors(page)

    # a project's owner may install in its own project, not from the admin project's
    # catalog (docs/repo.md): no button, and the API agrees
    owner_project = new_project(admin)
    owner, owner_password = bound_user(admin, "owner", owner_project["uuid"])
    # a new document: the page keeps its session in memory across hash changes
    page.goto("about:blank")
    page.context.clear_cookies()
    login(page, owner, owner_password, project=owner_project["uuid"], via="api")
    open_hash(page, console_appliance, f"/market/e/{catalog.base11['uuid']}")
    heading(page, f"{catalog.prefix}-base 1.1.0")
    page.locator("#versions tbody tr").first.wait_for(timeout=WAIT_MS)
    assert page.get_by_role("button", name="Install", exact=True).count() == 0
    token = console_appliance.client.post(TOKEN_PATH, {
        "grant_type": "password", "username": owner, "password": owner_password,
        "scope": f"project:{owner_project['uuid']}"}).json["access_token"]
    before = catalog.element(catalog.base11["uuid"])
    refused = console_appliance.client.with_token(token).post(
        f"{E}/{catalog.base11['uuid']}/actions/install/invoke", {})
    assert refused.status in (403, 404), refused.json
    after = catalog.element(catalog.base11["uuid"])
    assert (after["installation_state"], after["updated_at"]) == (
        before["installation_state"], before["updated_at"])
    shot(page, "market-owner-shared-catalog")
    no_page_errors(page)


def test_the_pages_are_labelled_and_fit_a_tablet(console_appliance, catalog, page, login, shot):
    page.set_viewport_size({"width": 768, "height": 1024})
    login(page, via="api")
    for fragment, title, form in (
            (f"/market?q={catalog.prefix}", "Marketplace", "form[role=search]"),
            (f"/market/e/{catalog.base11['uuid']}", f"{catalog.prefix}-base 1.1.0", None),
            ("/audit", "Audit trail", "form.audit-filters")):
        open_hash(page, console_appliance, fragment)
        heading(page, title)
        page.locator("table").first.wait_for(timeout=WAIT_MS)
        # every input has a label a screen reader reads; nothing is wider than the screen
        if form:
            inputs = page.locator(f"{form} input, {form} select")
            assert inputs.count() >= 2
            for i in range(inputs.count()):
                assert inputs.nth(i).evaluate("el => el.labels.length") == 1
        assert page.evaluate("document.documentElement.scrollWidth") <= 768
        # the page's heading has the focus: a keyboard starts at the page, not the header
        assert page.evaluate("document.activeElement.tagName") == "H1"
        shot(page, "tablet-" + title.split()[0])
    no_page_errors(page)


def test_the_catalog_follows_an_install_made_elsewhere(console_appliance, catalog, page,
                                                       login, shot):
    element = catalog.upload("elsewhere", "2.0.0")
    login(page, via="api")
    open_hash(page, console_appliance, f"/market?q={catalog.prefix}-elsewhere")
    heading(page, "Marketplace")
    row = page.locator(f"table.market-elements tr[data-name='{catalog.prefix}-elsewhere']")
    row.wait_for(timeout=WAIT_MS)
    assert row.locator("td").nth(4).inner_text() == "—"
    stream_live(page)
    page.evaluate("window.__notReloaded = true")
    # installed by another client (the CLI's call): the row follows the stream
    installed = console_appliance.admin.post(f"{E}/{element['uuid']}/actions/install/invoke", {})
    assert installed.status == 200, installed.json
    eventually(lambda: row.locator("td").nth(4).inner_text() == "2.0.0 ACTIVE", INSTALL_S,
               "the catalog's row to show the installed version ACTIVE")
    assert page.evaluate("window.__notReloaded") is True
    shot(page, "market-catalog-live")
    no_page_errors(page)


def test_an_install_that_fails_shows_error_with_its_reason(console_appliance, catalog, page,
                                                           login, shot):
    admin = console_appliance.admin
    # the element's secret name is taken already: the Element Manager cannot write it
    taken = admin.post("/v1/secret/secrets", {
        "name": f"{catalog.prefix}-clash-secret", "project_id": ADMIN_PROJECT,
        "constructor": {"kind": "plain"}, "default_value": "in the way"})
    assert taken.status == 201, taken.json
    element = catalog.upload("clash", "1.0.0")
    login(page, via="api")
    open_hash(page, console_appliance, f"/market/e/{element['uuid']}")
    heading(page, f"{catalog.prefix}-clash 1.0.0")
    page.get_by_role("button", name="Install", exact=True).click()
    eventually(lambda: page.locator("#progress-element").count() == 1
               and status_text(page, "#progress-element") in ("ACTIVE", "ERROR"),
               INSTALL_S, "the install to finish on the page")
    assert status_text(page, "#progress-element") == "ERROR"
    reason = page.locator("#progress-element .status-reason").inner_text()
    assert reason == admin.get(f"{E}/{element['uuid']}").json["status_reason"]
    assert reason
    # an installed element in ERROR offers the retry the API takes
    assert page.get_by_role("button", name="Retry install").is_visible()
    shot(page, "market-install-error")
    no_page_errors(page)
