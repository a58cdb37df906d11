"""Issue 30's must-show, permissions part, in headless Chromium against a real `appliance
up`: a project's reader sees the project's nodes, LBs, DNS domains and configs with no
Create, Edit, Delete nor any action that writes; and what the page does not offer, the API
refuses (a request sent from the page itself, with the session's cookie and CSRF header,
gets the 403 and changes nothing)."""

import pytest
from playwright.sync_api import expect

from tests.console.e2e_helpers import (CONFIGS, DOMAINS, LB, NODES, created, heading,
                                       hw_node, no_page_errors, open_hash, page_fetch,
                                       project_with_member, unique)


@pytest.fixture(scope="module")
def reader_world(console_appliance):
    """A project with one of each kind, and a user bound in it as reader (made by the
    admin through the API: who made them is not the subject)."""
    admin = console_appliance.admin
    project, username, password = project_with_member(admin, "reader")
    pid = project["uuid"]
    node = hw_node(admin, pid)
    lb = created(admin.post(LB, {"name": unique("e2e-lb-r"), "project_id": pid, "type": {
        "kind": "external_node", "external_node": node["uuid"]}}))
    domain = created(admin.post(DOMAINS, {"name": unique("e2e-zone") + ".test",
                                          "project_id": pid}))
    config = created(admin.post(CONFIGS, {
        "name": unique("e2e-conf"), "project_id": pid, "path": "/etc/e2e/app.conf",
        "target": {"kind": "nodes", "nodes": [node["uuid"]]},
        "body": {"kind": "text", "content": "answer = 42\n"}}))
    return {"project": project, "username": username, "password": password,
            "kinds": [("compute/nodes", "nodes", node), ("network/lb", "lb", lb),
                      ("dns/domains", "domains", domain), ("config/configs", "configs", config)]}


def offers_nothing_that_writes(page):
    """The detail page's toolbar: no Edit, no Delete, no action button but the read ones
    ("Show ...", a GET)."""
    toolbar = page.locator("main .toolbar")
    expect(toolbar).to_have_count(1)
    assert toolbar.get_by_role("link", name="Edit").count() == 0
    assert toolbar.get_by_role("button", name="Delete").count() == 0
    buttons = toolbar.get_by_role("button").all_inner_texts()
    assert all(b.startswith("Show ") for b in buttons), buttons


@pytest.mark.parametrize("kind", range(4), ids=["nodes", "lb", "dns-domains", "configs"])
def test_a_reader_is_offered_nothing_that_writes(console_appliance, reader_world, page,
                                                 login, shot, kind):
    route, title, record = reader_world["kinds"][kind]
    login(page, reader_world["username"], reader_world["password"],
          project=reader_world["project"]["uuid"], via="api")
    open_hash(page, console_appliance, f"/k/{route}")
    heading(page, title)
    listed = page.locator(f'table.list a[href="#/k/{route}/{record["uuid"]}"]')
    expect(listed.first).to_be_visible()
    assert page.get_by_role("link", name="Create").count() == 0
    shot(page, f"reader-{title}-list")
    listed.first.click()
    heading(page, record["name"])
    expect(page.locator("dl.fields")).to_be_visible()
    offers_nothing_that_writes(page)
    shot(page, f"reader-{title}-detail")
    # the create form's address typed by hand: the page says no, and shows no form
    open_hash(page, console_appliance, f"/k/{route}/new")
    expect(page.get_by_role("alert")).to_contain_text("may not create")
    assert page.locator("form.resource").count() == 0
    shot(page, f"reader-{title}-no-create-form")
    no_page_errors(page)


def test_the_api_refuses_what_the_reader_page_does_not_offer(console_appliance, reader_world,
                                                             page, login, shot):
    admin = console_appliance.admin
    _, _, node = reader_world["kinds"][0]
    login(page, reader_world["username"], reader_world["password"],
          project=reader_world["project"]["uuid"], via="api")
    open_hash(page, console_appliance, f"/k/compute/nodes/{node['uuid']}")
    heading(page, node["name"])
    offers_nothing_that_writes(page)
    assert page.get_by_role("button", name="power off").count() == 0
    before = admin.get(f"{NODES}/{node['uuid']}").json

    # from the page, as its own code would send them: the writes it did not offer
    for method, path, body in (
            ("DELETE", f"{NODES}/{node['uuid']}", None),
            ("PUT", f"{NODES}/{node['uuid']}", {"description": "changed by a reader"}),
            ("POST", f"{NODES}/{node['uuid']}/actions/power_off/invoke", {}),
            ("POST", NODES, {"name": unique("e2e-sneak"), "cores": 1, "ram": 1024,
                             "node_type": "HW",
                             "project_id": reader_world["project"]["uuid"]})):
        status, answer = page_fetch(page, method, path, body)
        assert status == 403, (method, path, status, answer)
        assert answer["code"] == 403 and "permission" in answer["message"], answer
    shot(page, "reader-node-after-refusals")

    after = admin.get(f"{NODES}/{node['uuid']}").json
    assert after == before
    assert admin.get(f"{NODES}?project_id={reader_world['project']['uuid']}").json == [before]
    no_page_errors(page)
