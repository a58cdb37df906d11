"""Issue 30's must-show, LB and certificate part, in headless Chromium against a real
`appliance up`: an LB, a vhost and a route created through the generated forms, each
listed and linked from its parent's page; a certificate that a vhost uses cannot be
deleted, the page shows the API's 409 naming the vhost, and the certificate stays."""

import json
import re

from playwright.sync_api import expect

from tests.console.e2e_helpers import (ADMIN_PROJECT, CERTS, LB, created, fill_field,
                                       heading, hw_node, manual_certificate, no_page_errors,
                                       open_hash, select_field, submit_create, unique)


def test_create_an_lb_a_vhost_and_a_route(console_appliance, page, login, shot):
    admin = console_appliance.admin
    # where the LB runs is not this test's subject: a HW node of the admin project
    node = hw_node(admin)
    login(page, via="api")
    open_hash(page, console_appliance, "/k/network/lb")
    page.get_by_role("link", name="Create").click()
    heading(page, "Create in lb")
    name = unique("e2e-lb")
    fill_field(page, "name", name)
    fill_field(page, "project_id", ADMIN_PROJECT)
    fill_field(page, "type", json.dumps({"kind": "external_node",
                                         "external_node": node["uuid"]}))
    shot(page, "lb-form")
    submit_create(page)
    heading(page, name)
    lb_uuid = page.url.rsplit("/", 1)[-1]
    shot(page, "lb-detail")

    # the vhost: from the LB's page, its nested collection
    contains = page.get_by_role("region", name="Contains")
    contains.get_by_role("link", name="vhosts").click()
    expect(page).to_have_url(f"{console_appliance.console_url}#/k/network/lb/{lb_uuid}/vhosts")
    page.get_by_role("link", name="Create").click()
    heading(page, re.compile(r"^Create in .*vhosts$"))
    domain = unique("shop") + ".example.test"
    select_field(page, "protocol", "http")
    fill_field(page, "port", "28080")
    fill_field(page, "domains", domain)
    shot(page, "vhost-form")
    submit_create(page)
    expect(page.locator('[data-field="domains"]')).to_have_text(domain)
    vhost_uuid = page.url.rsplit("/", 1)[-1]
    # the vhost links back to its LB
    expect(page.locator('[data-field="lb"] a')).to_have_attribute(
        "href", f"#/k/network/lb/{lb_uuid}")
    shot(page, "vhost-detail")

    # the route: from the vhost's page
    page.get_by_role("region", name="Contains").get_by_role("link", name="routes").click()
    page.get_by_role("link", name="Create").click()
    heading(page, re.compile(r"^Create in .*routes$"))
    condition = {"kind": "prefix", "value": "/shop/",
                 "actions": [{"kind": "redirect", "url": "https://example.test/"}]}
    fill_field(page, "condition", json.dumps(condition))
    shot(page, "route-form")
    submit_create(page)
    condition_shown = page.locator('[data-field="condition"]')
    expect(condition_shown).to_contain_text('"/shop/"')
    route_uuid = page.url.rsplit("/", 1)[-1]
    expect(page.locator('[data-field="vhost"] a')).to_have_attribute(
        "href", f"#/k/network/lb/{lb_uuid}/vhosts/{vhost_uuid}")
    shot(page, "route-detail")

    # each is listed under its parent
    open_hash(page, console_appliance, f"/k/network/lb/{lb_uuid}/vhosts/{vhost_uuid}/routes")
    expect(page.locator(f'table.list a[href$="/routes/{route_uuid}"]')).to_be_visible()
    shot(page, "routes-list")
    open_hash(page, console_appliance, f"/k/network/lb/{lb_uuid}/vhosts")
    expect(page.locator(f'table.list a[href$="/vhosts/{vhost_uuid}"]')).to_be_visible()
    open_hash(page, console_appliance, "/k/network/lb")
    expect(page.locator("table.list")).to_contain_text(name)
    shot(page, "lb-list")
    vhosts = admin.get(f"{LB}/{lb_uuid}/vhosts").json
    assert [v["uuid"] for v in vhosts] == [vhost_uuid] and vhosts[0]["domains"] == [domain]
    routes = admin.get(f"{LB}/{lb_uuid}/vhosts/{vhost_uuid}/routes").json
    assert [r["uuid"] for r in routes] == [route_uuid]
    assert routes[0]["condition"]["value"] == "/shop/"
    # the forms left `enabled` untouched: the API's default (true), not a checkbox's false
    assert vhosts[0]["enabled"] is True and routes[0]["enabled"] is True
    no_page_errors(page)


def test_deleting_a_certificate_in_use_is_refused(console_appliance, page, login, shot):
    admin = console_appliance.admin
    cert = manual_certificate(admin)
    lb = created(admin.post(LB, {"name": unique("e2e-lb-tls"), "project_id": ADMIN_PROJECT,
                                 "type": {"kind": "external_node",
                                          "external_node": hw_node(admin)["uuid"]}}))
    vhost = created(admin.post(f"{LB}/{lb['uuid']}/vhosts", {
        "protocol": "https", "port": 28443, "domains": ["e2e.example.test"],
        "cert": {"kind": "certificate", "certificate": cert["uuid"]}}))

    login(page, via="api")
    open_hash(page, console_appliance, f"/k/secret/certificates/{cert['uuid']}")
    heading(page, cert["name"])
    shot(page, "certificate-detail")
    page.get_by_role("button", name="Delete").click()
    page.get_by_role("button", name="Confirm delete").click()
    refusal = page.locator("#delete-error")
    expect(refusal).to_have_attribute("role", "alert")
    expect(refusal).to_contain_text("in use")
    expect(refusal).to_contain_text(vhost["uuid"])
    assert (409, f"{console_appliance.url}{CERTS}/{cert['uuid']}") in page.failed_responses
    shot(page, "certificate-delete-refused")
    # still there: its page, the list, and the API
    heading(page, cert["name"])
    open_hash(page, console_appliance, "/k/secret/certificates")
    expect(page.locator("table.list")).to_contain_text(cert["name"])
    shot(page, "certificates-list-after")
    assert admin.get(f"{CERTS}/{cert['uuid']}").status == 200
    no_page_errors(page)
