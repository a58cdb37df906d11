"""Issue 30's must-show, compute part, in headless Chromium against a real `appliance up`:
a VM node created through the generated form on libvirt's test driver gets its address on
its detail page without a reload, and a node's console log opens from its page."""

import json
import os

from playwright.sync_api import expect

from tests.console.e2e_helpers import (ADMIN_PROJECT, NODES, fill_field, heading,  # noqa: F401
                                       hypervisor, image_url, images, mark_document,
                                       no_page_errors, not_reloaded, open_hash, stream_live,
                                       submit_create, unique, vm_node, wait_status)
from tests.waiting import eventually


def test_create_a_vm_node_and_see_its_address_appear(console_appliance, hypervisor, images,
                                                     page, login, shot):
    """The node's image is served gated: the page is seen with the node IN_PROGRESS (its
    disk being filled), then, the gate open, turning ACTIVE, all in the one document. The
    address comes with the node's port, before the disk (so it may already be on the page
    that first reads the node); what the test pins is that the page shows it, equal to the
    API's, in the document the form opened."""
    image, gate = images.gated(unique("gated") + ".raw")
    login(page, via="api")
    open_hash(page, console_appliance, "/k/compute/nodes/new")
    heading(page, "Create in nodes")
    stream_live(page)
    mark_document(page)
    name = unique("e2e-vm-form")
    fill_field(page, "name", name)
    fill_field(page, "project_id", ADMIN_PROJECT)
    fill_field(page, "cores", "1")
    fill_field(page, "ram", "1024")
    fill_field(page, "disk_spec", json.dumps({"kind": "root_disk", "image": image}))
    shot(page, "node-form-filled")
    submit_create(page)

    heading(page, name)
    assert "#/k/compute/nodes/" in page.url
    node_uuid = page.url.rsplit("/", 1)[-1]
    # the daemon is fetching the image: the page follows the node there
    eventually(lambda: image.rsplit("/", 1)[-1] in images.hits, 120,
               "the compute daemon to ask for the node's image")
    status = page.locator(".statusline .status")
    expect(status).to_have_text("IN_PROGRESS")
    shot(page, "node-in-progress")
    gate.set()
    expect(status).to_have_text("ACTIVE")
    address = page.locator('[data-field="default_network"]')
    expect(address).to_contain_text('"ipv4"')
    node = console_appliance.admin.get(f"{NODES}/{node_uuid}").json
    assert node["name"] == name and node["hypervisor"] == hypervisor["uuid"]
    assert node["default_network"]["ipv4"]
    expect(address).to_contain_text(f'"ipv4": "{node["default_network"]["ipv4"]}"')
    assert not_reloaded(page)
    # its history shows the way there, as it came
    history = page.locator("ol.history")
    expect(history).to_contain_text("IN_PROGRESS")
    expect(history).to_contain_text("ACTIVE")
    shot(page, "node-active-with-address")
    no_page_errors(page)


def test_open_a_node_console_log(console_appliance, hypervisor, image_url, page, login, shot):
    """The test driver's VMs write no serial output: the test writes the log where the
    daemon's libvirt `<serial type='file'>` points (appliance/compute/console.py), which is
    what the node's `console` read action shows."""
    admin = console_appliance.admin
    node = vm_node(admin, image_url)
    wait_status(admin, f"{NODES}/{node['uuid']}", ("ACTIVE",), "the node to turn ACTIVE")
    lines = ["Booting the e2e kernel", f"{node['name']} login: <b>not markup</b>"]
    folder = os.path.join(str(console_appliance.up.state_dir), "compute", "console")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{node['uuid']}.log"), "a") as log:
        log.write("\n".join(lines) + "\n")
    assert admin.get(f"{NODES}/{node['uuid']}/actions/console").json["log"].endswith(
        lines[-1] + "\n")

    login(page, via="api")
    open_hash(page, console_appliance, f"/k/compute/nodes/{node['uuid']}")
    heading(page, node["name"])
    shot(page, "node-detail")
    # the node's panel follows its serial console (no "Show console" button beside it)
    assert page.get_by_role("button", name="Show console").count() == 0
    expect(page.get_by_role("heading", name="Serial console")).to_be_visible()
    log = page.get_by_label("Serial console log")
    for line in lines:
        expect(log).to_contain_text(line)
    assert log.locator("b").count() == 0    # text, never markup
    shot(page, "node-console-log")
    no_page_errors(page)
