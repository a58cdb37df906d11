"""Element names as the reference writes them (`passwords-example`,
`core-service-example`): lower-case letters, digits, `_` and `-`, from a letter, up to 255
characters. A hyphenated name is written as it is inside links
(`$core-service-example.imports.$x:value`): `-` is a name character of the link grammar,
never an operator. Real API and builder daemon (tests/em/conftest.py)."""

import pytest

from tests.secret.conftest import wait_for

from .conftest import ADMIN_PROJECT, element, install, post_manifest, wait_element
from .test_element_manager import app_manifest, owned

P = ADMIN_PROJECT
PROVIDER = "core-service-example"
MIDDLE = "consumer-of-hyphens"
LAST = "plain_importer"


def test_links_from_and_to_hyphenated_elements(admin):
    install(admin, app_manifest(name=PROVIDER))
    provider = wait_element(admin, PROVIDER)
    password = owned(admin, provider, "secret.passwords.$db_password")["value"]
    # its own links, written with its hyphenated name
    assert owned(admin, provider, "secret.secrets.$db_password_copy")["default_value"] == \
        password
    assert owned(admin, provider, "secret.secrets.$db_url")["default_value"] == \
        f"postgres://{PROVIDER}:{password}@db/{PROVIDER}"

    # a hyphenated element imports from a hyphenated one and exports to an underscored one
    install(admin, {
        "name": MIDDLE, "version": "0.1.0",
        "requirements": {PROVIDER: {"from_version": "1.0.0"}},
        "imports": {"provider_password": {"element": f"${PROVIDER}", "kind": "resource",
                                          "link": f"${PROVIDER}.secret.passwords.$db_password"}},
        "resources": {"$core.secret.secrets": {"copy": {
            "name": f"{MIDDLE}-copy", "project_id": P, "constructor": {"kind": "plain"},
            "default_value": f'f"seen {{${MIDDLE}.imports.$provider_password:value}}"'}}},
        "exports": {"copy": {"link": f"${MIDDLE}.secret.secrets.$copy"}}})
    middle = wait_element(admin, MIDDLE)
    assert owned(admin, middle, "secret.secrets.$copy")["default_value"] == f"seen {password}"

    install(admin, {
        "name": LAST, "version": "0.1.0",
        "requirements": {MIDDLE: {"from_version": "0.1.0"}},
        "imports": {"copy": {"element": f"${MIDDLE}", "link": f"${MIDDLE}.secret.secrets.$copy"}},
        "resources": {"$core.secret.secrets": {"again": {
            "name": f"{LAST}-again", "project_id": P, "constructor": {"kind": "plain"},
            "default_value": f"${LAST}.imports.$copy:default_value"}}}})
    last = wait_element(admin, LAST)
    assert owned(admin, last, "secret.secrets.$again")["default_value"] == f"seen {password}"
    assert element(admin, MIDDLE)["status"] == "ACTIVE"


@pytest.mark.parametrize("name", ["a", "test-element-1", "passwords-example", "x_y-z",
                                  "a" + "-b" * 127])
def test_names_the_reference_accepts(admin, name):
    resp = post_manifest(admin, {"name": name, "version": "0.0.1", "resources": {}})
    assert resp.status == 201, resp.json
    assert resp.json["name"] == name


@pytest.mark.parametrize("name", ["", "Upper", "1starts-with-digit", "-lead", "_lead",
                                  "dot.ted", "sp ace", "dollar$", "a" * 256, "tail\n"])
def test_other_names_are_refused(admin, name):
    before = admin.get("/v1/em/manifests").json
    resp = post_manifest(admin, {"name": name, "version": "0.0.1", "resources": {}},
                         as_yaml=False)
    assert resp.status == 400, resp.json
    assert "name" in resp.json["message"]
    assert admin.get("/v1/em/manifests").json == before


@pytest.mark.parametrize("field,value", [
    ("requirements", {"Bad.Name": {"from_version": "1.0.0"}}),
    ("imports", {"x": {"element": "$Bad-Name", "link": "$a.secret.secrets.$s"}}),
])
def test_element_names_inside_a_manifest_follow_the_same_rule(admin, field, value):
    resp = post_manifest(admin, {"name": "names-inside", "version": "0.0.1",
                                 "resources": {}, field: value}, as_yaml=False)
    assert resp.status == 400, resp.json
    assert resp.json["message"].startswith(field), resp.json


def test_an_import_whose_element_was_uninstalled_ends_in_error(admin):
    """An element that imports from another without requiring it does not hold it: once
    that element is uninstalled, the importer's next pass goes ERROR naming the import,
    instead of waiting for a resource nothing will bring back."""
    install(admin, app_manifest(name="lender-x"))
    wait_element(admin, "lender-x")
    install(admin, {
        "name": "borrower-y", "version": "0.1.0",
        "imports": {"lent": {"element": "$lender-x",
                             "link": "$lender-x.secret.passwords.$db_password"}},
        "resources": {"$core.secret.secrets": {"copy": {
            "name": "borrower-y-copy", "project_id": P, "constructor": {"kind": "plain"},
            "default_value": "$borrower-y.imports.$lent:value"}}}})
    wait_element(admin, "borrower-y")
    lender = admin.get("/v1/em/manifests", query={"name": "lender-x"}).json[0]
    resp = admin.post(f"/v1/em/manifests/{lender['uuid']}/actions/uninstall/invoke", {})
    assert resp.status == 200, resp
    wait_for(lambda: element(admin, "lender-x") is None)
    failed = wait_element(admin, "borrower-y", "ERROR")
    assert "import lent: element lender-x is not installed" in failed["status_reason"], failed
