"""Issue 30's must-show, IAM part, in headless Chromium against a real `appliance up`: a
project, a user, the user's password (the users' `change_password` action) and the user's
binding in the project, each made through the console's pages; then that user logs in in
a fresh browser context with the password the admin set."""

import re

from playwright.sync_api import expect

from tests.console.e2e_helpers import (fill_field, heading, no_page_errors, open_hash,
                                       submit_create, unique)

PASSWORD = "set-in-the-console-1"


def test_create_a_project_a_user_and_its_password_then_log_in(console_appliance, browser,
                                                             page, login, shot):
    admin = console_appliance.admin
    login(page, via="api")

    # the project
    open_hash(page, console_appliance, "/k/iam/projects/new")
    heading(page, "Create in projects")
    project_name = unique("e2e-team")
    fill_field(page, "name", project_name)
    shot(page, "project-form")
    submit_create(page)
    heading(page, project_name)
    project_uuid = page.url.rsplit("/", 1)[-1]
    shot(page, "project-created")

    # the user, without a password yet
    open_hash(page, console_appliance, "/k/iam/users/new")
    heading(page, "Create in users")
    username = unique("e2e-person")
    fill_field(page, "username", username)
    fill_field(page, "email", f"{username}@example.test")
    submit_create(page)
    heading(page, username)
    user_uuid = page.url.rsplit("/", 1)[-1]
    shot(page, "user-created")

    # its password: the change_password action's form (an admin may set anyone's)
    page.get_by_role("button", name="change password").click()
    action = page.get_by_role("form", name="change_password")
    new_password = action.locator("#field-new_password")
    expect(new_password).to_have_attribute("type", "password")
    new_password.fill(PASSWORD)
    shot(page, "change-password-form")
    action.get_by_role("button", name="Invoke change password").click()
    expect(page.get_by_role("heading", name="change_password")).to_be_visible()
    expect(page.locator("#action-error")).to_have_count(0)
    assert PASSWORD not in page.inner_text("main")      # write-only: never shown back
    shot(page, "password-set")

    # its place in the project: a role binding through its form
    member = admin.get("/v1/iam/roles?name=member").json or \
        admin.get("/v1/iam/roles?name=owner").json
    open_hash(page, console_appliance, "/k/iam/role_bindings/new")
    heading(page, "Create in role bindings")
    fill_field(page, "user", user_uuid)
    fill_field(page, "role", member[0]["uuid"])
    fill_field(page, "project", project_uuid)
    shot(page, "role-binding-form")
    submit_create(page)
    expect(page.locator('[data-field="user"] a')).to_have_attribute(
        "href", f"#/k/iam/users/{user_uuid}")
    expect(page.locator('[data-field="project"] a')).to_have_attribute(
        "href", f"#/k/iam/projects/{project_uuid}")
    shot(page, "role-binding-created")
    no_page_errors(page)

    # the new user, in a browser context of its own (no cookie of the admin's)
    other = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        fresh = other.new_page()
        fresh.goto(console_appliance.console_url)
        heading(fresh, "Log in")
        fresh.locator('input[name="username"]').fill(username)
        fresh.locator('input[name="password"]').fill(PASSWORD)
        shot(fresh, "new-user-login-form")
        fresh.get_by_role("button", name="Log in").click()
        heading(fresh, "Overview")
        expect(fresh.get_by_role("banner")).to_contain_text(username)
        session = fresh.evaluate("fetch('/console/session').then(r => r.json())")
        assert session["user"]["username"] == username
        assert [p["uuid"] for p in session["projects"]] == [project_uuid]
        shot(fresh, "new-user-overview")
        # logging out returns to the login page
        fresh.get_by_role("button", name="Log out").click()
        heading(fresh, re.compile("^Log in$"))
        shot(fresh, "new-user-logged-out")
    finally:
        other.close()
