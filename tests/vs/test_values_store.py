"""Values Store (profiles, variables, values) against a real Waitress server and store."""

import threading
import uuid

import pytest
from openapi_spec_validator import validate

from appliance import vs
from appliance.iam.builtin import ADMIN_PROJECT
from appliance.vs import values as vs_values
from appliance.vs.resources import Setter
from appliance.vs.seed import PROFILE_NAMES
from appliance.vs.seed import seed as vs_seed
from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD
from tests.iam.helpers import bind, make_project, make_user

P = "/v1/vs/profiles"
VAR = "/v1/vs/variables"
VAL = "/v1/vs/values"


def wire_vs(api):
    """What bootstrap and app.capabilities() do once vs is wired in; a no-op then."""
    vs_seed(api.store)
    if not any(route.path.startswith(P) for route in api.routes):
        vs.register(api)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    extra=wire_vs).start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def develop_active(admin):
    """Every test starts, and leaves the realm, with develop active."""
    activate(admin, "develop")
    yield
    activate(admin, "develop")


def assert_error(resp, status, type_, *words):
    assert resp.status == status, resp
    body = resp.json
    assert set(body) == {"type", "code", "message"}
    assert body["code"] == status and body["type"] == type_
    for word in words:
        assert word in body["message"], body["message"]


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def profile(admin, name):
    found = admin.get(P, query={"name": name}).json
    assert len(found) == 1, found
    return found[0]


def activate(admin, name, body=None):
    resp = admin.post(f"{P}/{profile(admin, name)['uuid']}/actions/activate/invoke", body)
    assert resp.status == 200, resp
    return resp.json


def active_names(admin):
    return [p["name"] for p in admin.get(P, query={"active": "true"}).json]


def create(admin, path, **fields):
    resp = admin.post(path, {"name": unique("x"), "project_id": ADMIN_PROJECT, **fields})
    assert resp.status == 201, resp
    assert resp.header("Location") == f"{path}/{resp.json['uuid']}"
    return resp.json


def per_profile(admin, table, **setter):
    """A profile setter from {profile name: value}."""
    return {"kind": "profile", **setter, "profiles": [
        {"profile": profile(admin, name)["uuid"], "value": value}
        for name, value in table.items()]}


def value_of(admin, variable):
    resp = admin.get(f"{VAR}/{variable['uuid']}")
    assert resp.status == 200, resp
    return resp.json["value"]


REPLICAS = {"develop": 1, "small": 1, "medium": 2, "large": 3, "legacy": 1}


# ---- profiles and the one active profile -------------------------------------------

def test_seed_creates_the_five_profiles_once_with_develop_active(server, admin):
    seeded = admin.get(P, query={"name": list(PROFILE_NAMES)}).json
    assert sorted(p["name"] for p in seeded) == sorted(PROFILE_NAMES)
    for p in seeded:
        assert p["profile_type"] == "GLOBAL" and p["project_id"] == ADMIN_PROJECT
        assert p["active"] is (p["name"] == "develop")
        assert p["description"] == f"The {p['name']} profile"
    before = server.store.collection(vs_values.PROFILES).records()
    vs_seed(server.store)
    vs_seed(server.store)
    after = server.store.collection(vs_values.PROFILES).records()
    assert [(r["uuid"], r["revision"]) for r in after] == \
        [(r["uuid"], r["revision"]) for r in before]
    assert active_names(admin) == ["develop"]


def test_activate_switches_and_exactly_one_is_active(server, admin):
    large = activate(admin, "large")
    assert large["name"] == "large" and large["active"] is True
    assert active_names(admin) == ["large"]
    assert profile(admin, "develop")["active"] is False
    assert activate(admin, "large", {})["active"] is True      # again: nothing changes
    assert active_names(admin) == ["large"]
    vs_seed(server.store)                                       # a restart keeps the choice
    assert active_names(admin) == ["large"]
    assert vs_values.active_profile(server.store)["name"] == "large"


def test_concurrent_activations_leave_exactly_one_active(admin):
    names = list(PROFILE_NAMES) * 4
    threads = [threading.Thread(target=activate, args=(admin, n)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(active_names(admin)) == 1


def test_activate_takes_no_parameters(admin):
    small = profile(admin, "small")
    assert_error(admin.post(f"{P}/{small['uuid']}/actions/activate/invoke", {"x": 1}),
                 400, "ValidationError", "no parameters")
    assert_error(admin.post(f"{P}/{uuid.uuid4()}/actions/activate/invoke"), 404, "NotFound")
    assert active_names(admin) == ["develop"]


def test_active_is_read_only(admin):
    assert_error(admin.post(P, {"name": unique("p"), "project_id": ADMIN_PROJECT,
                                "active": True}), 403, "Forbidden", "active")
    small = profile(admin, "small")
    assert_error(admin.put(f"{P}/{small['uuid']}", {"active": True}), 403, "Forbidden")
    assert active_names(admin) == ["develop"]


def test_created_profile_is_inactive_and_can_be_activated_and_deleted(admin):
    mine = create(admin, P, description="for a test")
    assert mine["active"] is False and mine["profile_type"] == "GLOBAL"
    activate(admin, mine["name"])
    assert active_names(admin) == [mine["name"]]
    assert_error(admin.delete(f"{P}/{mine['uuid']}"), 409, "Conflict", "active")
    activate(admin, "develop")
    assert admin.delete(f"{P}/{mine['uuid']}").status == 204
    assert admin.delete(f"{P}/{mine['uuid']}").status == 404


def test_deleting_the_active_profile_is_409(admin):
    develop = profile(admin, "develop")
    assert_error(admin.delete(f"{P}/{develop['uuid']}"), 409, "Conflict", "active")
    assert profile(admin, "develop")["active"] is True


def test_profile_names_are_unique(admin):
    assert_error(admin.post(P, {"name": "develop", "project_id": ADMIN_PROJECT}),
                 409, "Conflict", "develop")


def test_profile_used_by_a_variable_cannot_be_deleted(admin):
    mine = create(admin, P)
    var = create(admin, VAR, setter=per_profile(admin, {mine["name"]: 5}))
    assert_error(admin.delete(f"{P}/{mine['uuid']}"), 409, "Conflict", var["name"])
    assert admin.delete(f"{VAR}/{var['uuid']}").status == 204
    assert admin.delete(f"{P}/{mine['uuid']}").status == 204


# ---- variables ---------------------------------------------------------------------

def test_profile_variable_follows_activation(admin):
    var = create(admin, VAR, setter=per_profile(admin, REPLICAS))
    assert var["value"] == 1
    assert var["setter"]["fallback_strategy"] == "ignore"       # the default is shown
    for name, expected in [("large", 3), ("medium", 2), ("small", 1), ("develop", 1)]:
        activate(admin, name)
        assert value_of(admin, var) == expected, name
        listed = admin.get(VAR, query={"name": var["name"]}).json
        assert listed[0]["value"] == expected


def test_profile_values_may_be_any_json_and_profiles_given_as_paths(admin):
    develop, large = profile(admin, "develop"), profile(admin, "large")
    setter = {"kind": "profile", "profiles": [
        {"profile": f"{P}/{develop['uuid']}", "value": {"cores": 1, "disks": [10, 20]}},
        {"profile": large["uuid"].upper(), "value": "big"}]}
    var = create(admin, VAR, setter=setter)
    assert [e["profile"] for e in var["setter"]["profiles"]] == [develop["uuid"],
                                                                 large["uuid"]]
    assert var["value"] == {"cores": 1, "disks": [10, 20]}
    activate(admin, "large")
    assert value_of(admin, var) == "big"


def test_a_setter_as_a_manifest_writes_it_compares_equal_to_the_stored_one(admin):
    # the Element Manager compares render(stored) with to_input(manifest): no diff means
    # no rewrite on every reconcile pass
    develop = profile(admin, "develop")
    sent = {"kind": "profile", "profiles": [{"profile": develop["uuid"].upper(), "value": 1}]}
    var = create(admin, VAR, setter=sent)
    assert Setter().to_input(sent) == var["setter"]
    assert Setter().to_input({"kind": "selector"}) == {"kind": "selector",
                                                       "selector_strategy": "latest"}


def test_fallback_ignore_gives_null_for_an_unlisted_profile(server, admin):
    var = create(admin, VAR, setter=per_profile(admin, {"large": 3},
                                                fallback_strategy="ignore"))
    assert var["value"] is None
    activate(admin, "large")
    assert value_of(admin, var) == 3
    activate(admin, "legacy")
    assert value_of(admin, var) is None


def test_fallback_fail_reads_null_and_refuses_a_link(server, admin):
    var = create(admin, VAR, setter=per_profile(admin, {"large": 3},
                                                fallback_strategy="fail"))
    assert var["value"] is None
    record = server.store.collection(vs_values.VARIABLES).get(var["uuid"])
    with pytest.raises(vs_values.NoValue, match="develop"):
        vs_values.variable_value(server.store, record)
    activate(admin, "large")
    assert vs_values.variable_value(server.store, record) == 3


def test_setter_can_be_changed(admin):
    var = create(admin, VAR, setter=per_profile(admin, {"develop": 1}))
    resp = admin.put(f"{VAR}/{var['uuid']}", {"setter": per_profile(admin, {"develop": 7})})
    assert resp.status == 200, resp
    assert resp.json["value"] == 7
    resp = admin.put(f"{VAR}/{var['uuid']}", {"setter": {"kind": "selector"}})
    assert resp.status == 200, resp
    assert resp.json["setter"] == {"kind": "selector", "selector_strategy": "latest"}
    assert resp.json["value"] is None


def test_variable_names_are_unique_per_project(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    assert_error(admin.post(VAR, {"name": var["name"], "project_id": ADMIN_PROJECT,
                                  "setter": {"kind": "selector"}}), 409, "Conflict")
    other = make_project(admin)
    resp = admin.post(VAR, {"name": var["name"], "project_id": other,
                            "setter": {"kind": "selector"}})
    assert resp.status == 201, resp


def test_value_is_read_only(admin):
    assert_error(admin.post(VAR, {"name": unique("v"), "project_id": ADMIN_PROJECT,
                                  "setter": {"kind": "selector"}, "value": 1}),
                 403, "Forbidden", "value")


# ---- selector variables and values -------------------------------------------------

def test_selector_value_is_the_latest_bound_value(admin):
    var = create(admin, VAR, setter={"kind": "selector", "selector_strategy": "latest"})
    assert var["value"] is None
    first = create(admin, VAL, variable=var["uuid"], value="10.0.0.1")
    assert first["variable"] == f"{VAR}/{var['uuid']}"
    assert value_of(admin, var) == "10.0.0.1"
    create(admin, VAL, variable=f"{VAR}/{var['uuid']}", value="10.0.0.2")
    third = create(admin, VAL, variable=var["uuid"], value={"ip": "10.0.0.3"})
    assert value_of(admin, var) == {"ip": "10.0.0.3"}
    # editing an older record does not make it the latest
    assert admin.put(f"{VAL}/{first['uuid']}", {"value": "10.9.9.9"}).status == 200
    assert value_of(admin, var) == {"ip": "10.0.0.3"}
    assert admin.delete(f"{VAL}/{third['uuid']}").status == 204
    assert value_of(admin, var) == "10.0.0.2"
    # activation has nothing to do with a selector
    activate(admin, "large")
    assert value_of(admin, var) == "10.0.0.2"


def test_null_is_a_value(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    create(admin, VAL, variable=var["uuid"], value=5)
    create(admin, VAL, variable=var["uuid"], value=None)
    assert value_of(admin, var) is None
    assert_error(admin.post(VAL, {"name": "v", "project_id": ADMIN_PROJECT,
                                  "variable": var["uuid"]}), 400, "ValidationError",
                 "value: required")


def test_deleting_a_variable_deletes_its_values(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    bound = [create(admin, VAL, variable=var["uuid"], value=i) for i in range(3)]
    assert admin.delete(f"{VAR}/{var['uuid']}").status == 204
    for v in bound:
        assert admin.get(f"{VAL}/{v['uuid']}").status == 404


def test_a_selector_with_values_cannot_become_a_profile_variable(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    create(admin, VAL, variable=var["uuid"], value=1)
    assert_error(admin.put(f"{VAR}/{var['uuid']}", {"setter": per_profile(admin, REPLICAS)}),
                 409, "Conflict", "bound")
    assert admin.get(f"{VAR}/{var['uuid']}").json["setter"]["kind"] == "selector"


def test_a_value_is_bound_for_good(admin):
    a = create(admin, VAR, setter={"kind": "selector"})
    b = create(admin, VAR, setter={"kind": "selector"})
    v = create(admin, VAL, variable=a["uuid"], value=1)
    assert_error(admin.put(f"{VAL}/{v['uuid']}", {"variable": b["uuid"]}), 403, "Forbidden")


# ---- selection: values on their own, bound and chosen by select_value -------------

def select(client, variable, value, status=200):
    resp = client.post(f"{VAR}/{variable['uuid']}/actions/select_value/invoke",
                       {"value": value})
    assert resp.status == status, resp
    return resp


def release(client, variable, status=200):
    resp = client.post(f"{VAR}/{variable['uuid']}/actions/release_value/invoke")
    assert resp.status == status, resp
    return resp


def stored(server, uuid):
    """The record as the store holds it: proof that a refused call wrote nothing."""
    return server.store.collection(vs_values.VALUES).get(uuid)


def test_the_references_selector_variable_and_free_values(admin):
    # the reference's CLI creates a selector variable with exactly this setter
    var = create(admin, VAR, setter={"kind": "selector", "selector_strategy": "latest"})
    free = create(admin, VAL, value="blue")
    assert free["variable"] is None and free["manual_selected"] is False
    assert value_of(admin, var) is None
    # selecting a free value binds it and makes it the value
    chosen = select(admin, var, free["uuid"]).json
    assert chosen["uuid"] == var["uuid"] and chosen["value"] == "blue"
    bound = admin.get(f"{VAL}/{free['uuid']}").json
    assert bound["variable"] == f"{VAR}/{var['uuid']}" and bound["manual_selected"] is True
    # a newer bound value does not displace the selection
    newer = create(admin, VAL, variable=var["uuid"], value="green")
    assert value_of(admin, var) == "blue"
    # selecting another (given as its path) moves the one flag
    select(admin, var, f"{VAL}/{newer['uuid']}")
    flags = {v["uuid"]: v["manual_selected"]
             for v in admin.get(VAL, query={"variable": var["uuid"]}).json}
    assert flags == {free["uuid"]: False, newer["uuid"]: True}
    assert [v["uuid"] for v in admin.get(VAL, query={"variable": var["uuid"],
                                                     "manual_selected": "true"}).json] == [
        newer["uuid"]]
    select(admin, var, free["uuid"])
    assert value_of(admin, var) == "blue"
    # release: the latest bound value applies again; the values stay bound
    released = release(admin, var).json
    assert released["value"] == "green"
    assert [v["manual_selected"] for v in admin.get(
        VAL, query={"variable": f"{VAR}/{var['uuid']}"}).json] == [False, False]
    # deleting the selected value falls back to the latest as well
    select(admin, var, free["uuid"])
    assert admin.delete(f"{VAL}/{free['uuid']}").status == 204
    assert value_of(admin, var) == "green"


def test_the_reference_clis_vv_set_rotate_requests(admin):
    """The bodies and filters `exordos vs vv set NAME VALUE --rotate` sends, in order."""
    var_uuid = str(uuid.uuid4())
    name = unique("cli")
    created = admin.post(VAR, {"uuid": var_uuid, "project_id": ADMIN_PROJECT, "name": name,
                               "description": "", "setter": {
                                   "kind": "selector", "selector_strategy": "latest"}})
    assert created.status == 201, created
    for value in ("one", 2):
        existing = admin.get(VAL, query={"variable": f"{VAR}/{var_uuid}"})
        assert existing.status == 200, existing
        for old in existing.json:
            assert admin.delete(f"{VAL}/{old['uuid']}").status == 204
        resp = admin.post(VAL, {"uuid": str(uuid.uuid4()), "project_id": ADMIN_PROJECT,
                                "name": f"{name}_value", "description": "", "value": value,
                                "variable": f"{VAR}/{var_uuid}"})
        assert resp.status == 201, resp
        assert admin.get(f"{VAR}/{var_uuid}").json["value"] == value
    assert len(admin.get(VAL, query={"variable": var_uuid}).json) == 1


def test_a_manifest_link_reads_the_selected_value(server, admin):
    from appliance.em.links import parse_link  # noqa: PLC0415
    var = create(admin, VAR, setter={"kind": "selector"})
    first = create(admin, VAL, variable=var["uuid"], value=1)
    create(admin, VAL, variable=var["uuid"], value=2)
    select(admin, var, first["uuid"])
    record = server.store.collection(vs_values.VARIABLES).get(var["uuid"])
    resource = server.api.resources[VAR]
    link = parse_link(f"$core.vs.variables.${var['name']}:value")
    assert resource.link_value(resource.render(record), link.fields[0]) == 1


def test_concurrent_selections_leave_exactly_one_selected(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    made = [create(admin, VAL, variable=var["uuid"], value=i)["uuid"] for i in range(6)]
    threads = [threading.Thread(target=select, args=(admin, var, u)) for u in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flagged = [v for v in admin.get(VAL, query={"variable": var["uuid"]}).json
               if v["manual_selected"]]
    assert len(flagged) == 1
    assert value_of(admin, var) == flagged[0]["value"]


def test_bad_selections_are_refused_and_change_nothing(server, admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    mine = create(admin, VAL, variable=var["uuid"], value=1)
    other_var = create(admin, VAR, setter={"kind": "selector"})
    theirs = create(admin, VAL, variable=other_var["uuid"], value=2)
    elsewhere = admin.post(VAL, {"name": "v", "project_id": make_project(admin),
                                 "value": 3}).json
    prof = create(admin, VAR, setter=per_profile(admin, REPLICAS))
    free = create(admin, VAL, value=4)
    before = {u: stored(server, u) for u in (mine["uuid"], theirs["uuid"],
                                             elsewhere["uuid"], free["uuid"])}
    path = f"{VAR}/{var['uuid']}/actions/select_value/invoke"
    for body, status, words in [
            ({"value": theirs["uuid"]}, 400, ["another variable"]),
            ({"value": elsewhere["uuid"]}, 400, ["project"]),
            ({"value": str(uuid.uuid4())}, 400, ["does not exist"]),
            ({"value": "nope"}, 400, ["does not exist"]),
            ({"value": {"uuid": mine["uuid"]}}, 400, ["value"]),
            ({"value": [mine["uuid"]]}, 400, ["value"]),
            ({"value": mine["uuid"], "extra": 1}, 400, ["value"]),
            ({}, 400, ["value"]),
            ([mine["uuid"]], 400, ["value"])]:
        assert_error(admin.post(path, body), status, "ValidationError", *words)
    assert_error(admin.post(path, raw=b"{not json", content_type="application/json"),
                 400, "ValidationError")
    # a profile variable selects nothing: 409, and the free value stays free
    assert_error(admin.post(f"{VAR}/{prof['uuid']}/actions/select_value/invoke",
                            {"value": free["uuid"]}), 409, "Conflict", "profile")
    assert_error(admin.post(f"{VAR}/{prof['uuid']}/actions/release_value/invoke"),
                 409, "Conflict", "profile")
    # nothing selected: nothing to release
    assert_error(admin.post(f"{VAR}/{var['uuid']}/actions/release_value/invoke"),
                 409, "Conflict", "no selected value")
    assert_error(admin.post(f"{VAR}/{var['uuid']}/actions/release_value/invoke",
                            {"value": mine["uuid"]}), 400, "ValidationError")
    assert_error(admin.post(f"{VAR}/{uuid.uuid4()}/actions/select_value/invoke",
                            {"value": mine["uuid"]}), 404, "NotFound")
    # the flag is the action's to set, and a free value is bound only by selection
    assert_error(admin.put(f"{VAL}/{free['uuid']}", {"manual_selected": True}), 403,
                 "Forbidden", "manual_selected")
    assert_error(admin.post(VAL, {"name": "v", "project_id": ADMIN_PROJECT, "value": 1,
                                  "manual_selected": True}), 403, "Forbidden")
    assert_error(admin.put(f"{VAL}/{free['uuid']}", {"variable": var["uuid"]}), 403,
                 "Forbidden", "variable")
    assert {u: stored(server, u) for u in before} == before
    assert value_of(admin, var) == 1


def test_selection_is_scoped_to_the_callers_project(server, admin):
    project = make_project(admin)
    user, username, password = make_user(admin)
    bind(admin, user, "owner", project)
    owner = server.client(server.login(username, password, scope=f"project:{project}"))
    reader_id, reader_name, reader_password = make_user(admin)
    bind(admin, reader_id, "reader", project)
    reader = server.client(server.login(reader_name, reader_password,
                                        scope=f"project:{project}"))

    var = owner.post(VAR, {"name": "colour", "setter": {"kind": "selector"}}).json
    free = owner.post(VAL, {"name": "c", "value": "red"}).json
    assert free["project_id"] == project
    # a reader reads, but selecting is a write
    assert_error(reader.post(f"{VAR}/{var['uuid']}/actions/select_value/invoke",
                             {"value": free["uuid"]}), 403, "Forbidden")
    assert select(owner, var, free["uuid"]).json["value"] == "red"
    # the admin project's value is not the owner's to bind, nor its variable to change
    admin_free = create(admin, VAL, value="x")
    assert_error(owner.post(f"{VAR}/{var['uuid']}/actions/select_value/invoke",
                            {"value": admin_free["uuid"]}), 400, "ValidationError")
    admin_var = create(admin, VAR, setter={"kind": "selector"})
    assert owner.post(f"{VAR}/{admin_var['uuid']}/actions/select_value/invoke",
                      {"value": free["uuid"]}).status == 404
    assert stored(server, admin_free["uuid"])["variable"] is None
    assert_error(reader.post(f"{VAR}/{var['uuid']}/actions/release_value/invoke"),
                 403, "Forbidden")
    assert release(owner, var).json["value"] == "red"


@pytest.mark.parametrize("kind", [{"profile": 1}, ["selector"], 7, None])
def test_setter_kind_of_the_wrong_type_is_400_on_post_and_put(admin, kind):
    name = unique("bad")
    assert_error(admin.post(VAR, {"name": name, "project_id": ADMIN_PROJECT,
                                  "setter": {"kind": kind}}),
                 400, "ValidationError", "setter.kind")
    assert admin.get(VAR, query={"name": name}).json == []
    var = create(admin, VAR, setter={"kind": "selector"})
    assert_error(admin.put(f"{VAR}/{var['uuid']}", {"setter": {"kind": kind}}),
                 400, "ValidationError", "setter.kind")
    assert admin.get(f"{VAR}/{var['uuid']}").json == var


def test_the_reference_clis_profile_setter_with_element_null(admin):
    var = create(admin, VAR, setter={"kind": "profile", "fallback_strategy": "ignore",
                                     "profiles": [], "element": None})
    assert var["setter"] == {"kind": "profile", "fallback_strategy": "ignore",
                             "profiles": []}
    assert_error(admin.post(VAR, {"name": unique("v"), "project_id": ADMIN_PROJECT,
                                  "setter": {"kind": "profile", "profiles": [],
                                             "element": str(uuid.uuid4())}}),
                 400, "ValidationError", "element")


# ---- bad input: one 400 each, with the error body ----------------------------------

@pytest.mark.parametrize("setter, words", [
    ({"kind": "formula"}, ["setter.kind", "profile, selector"]),
    ({"kind": "profile"}, ["setter.profiles: required"]),
    ({"kind": "profile", "profiles": [], "fallback_strategy": "guess"},
     ["setter.fallback_strategy"]),
    ({"kind": "profile", "profiles": [{"profile": "develop", "value": 1}]},
     ["setter.profiles.0.profile"]),
    ({"kind": "selector", "selector_strategy": "oldest"}, ["setter.selector_strategy"]),
    ({"kind": "selector", "profiles": []}, ["setter", "profiles"]),
    ({}, ["setter.kind: required"]),
    ("profile", ["setter"]),
])
def test_malformed_setter_is_400(admin, setter, words):
    name = unique("bad")
    assert_error(admin.post(VAR, {"name": name, "project_id": ADMIN_PROJECT,
                                  "setter": setter}), 400, "ValidationError", *words)
    assert admin.get(VAR, query={"name": name}).json == []


def test_setter_naming_a_missing_profile_is_400(admin):
    ghost = str(uuid.uuid4())
    setter = per_profile(admin, {"develop": 1})
    setter["profiles"].append({"profile": ghost, "value": 2})
    assert_error(admin.post(VAR, {"name": unique("v"), "project_id": ADMIN_PROJECT,
                                  "setter": setter}),
                 400, "ValidationError", "setter.profiles.1.profile", ghost)
    var = create(admin, VAR, setter=per_profile(admin, {"develop": 1}))
    assert_error(admin.put(f"{VAR}/{var['uuid']}", {"setter": setter}),
                 400, "ValidationError", ghost)
    assert value_of(admin, var) == 1


def test_setter_listing_a_profile_twice_is_400(admin):
    setter = per_profile(admin, {"develop": 1})
    setter["profiles"].append(dict(setter["profiles"][0]))
    assert_error(admin.post(VAR, {"name": unique("v"), "project_id": ADMIN_PROJECT,
                                  "setter": setter}), 400, "ValidationError", "twice")


def test_value_bound_to_a_profile_variable_is_400(admin):
    var = create(admin, VAR, setter=per_profile(admin, REPLICAS))
    assert_error(admin.post(VAL, {"name": "v", "project_id": ADMIN_PROJECT,
                                  "variable": var["uuid"], "value": 9}),
                 400, "ValidationError", "variable", "profile")
    assert admin.get(VAL, query={"variable": var["uuid"]}).json == []
    assert value_of(admin, var) == 1


def test_value_bound_to_an_unknown_variable_is_400(admin):
    ghost = str(uuid.uuid4())
    assert_error(admin.post(VAL, {"name": "v", "project_id": ADMIN_PROJECT,
                                  "variable": ghost, "value": 9}),
                 400, "ValidationError", "variable", ghost)
    assert_error(admin.post(VAL, {"name": "v", "project_id": ADMIN_PROJECT,
                                  "variable": "not-a-uuid", "value": 9}),
                 400, "ValidationError", "variable")


def test_value_in_another_project_than_its_variable_is_400(admin):
    var = create(admin, VAR, setter={"kind": "selector"})
    other = make_project(admin)
    assert_error(admin.post(VAL, {"name": "v", "project_id": other, "variable": var["uuid"],
                                  "value": 1}), 400, "ValidationError", "project")


def test_unknown_project_and_unknown_field_are_400(admin):
    assert_error(admin.post(VAR, {"name": "v", "project_id": str(uuid.uuid4()),
                                  "setter": {"kind": "selector"}}),
                 400, "ValidationError", "project_id")
    assert_error(admin.post(P, {"name": unique("p"), "project_id": ADMIN_PROJECT,
                                "profile_type": "LOCAL"}), 400, "ValidationError",
                 "profile_type")
    assert_error(admin.post(VAR, {"name": "v", "project_id": ADMIN_PROJECT,
                                  "setter": {"kind": "selector"}, "colour": 1}),
                 400, "ValidationError", "colour")


# ---- listing, as for any resource --------------------------------------------------

def test_filters_sorting_and_paging(admin):
    assert [p["name"] for p in admin.get(P, query={"active": "True"}).json] == ["develop"]
    assert len(admin.get(P, query={"name": ["small", "large"]}).json) == 2
    names = [p["name"] for p in admin.get(P, query={"sort_key": "name",
                                                     "name": list(PROFILE_NAMES)}).json]
    assert names == sorted(PROFILE_NAMES)

    var = create(admin, VAR, setter={"kind": "selector"})
    made = [create(admin, VAL, variable=var["uuid"], value=i)["uuid"] for i in range(5)]
    seen, marker = [], None
    while True:
        query = {"variable": var["uuid"], "page_limit": 2}
        if marker:
            query["page_marker"] = marker
        resp = admin.get(VAL, query=query)
        assert resp.status == 200 and resp.header("X-Pagination-Limit") == "2"
        seen += [v["uuid"] for v in resp.json]
        marker = resp.header("X-Pagination-Marker")
        if not marker:
            break
    assert seen == made
    only = admin.get(VAL, query={"variable": var["uuid"], "fields": ["uuid", "value"]}).json
    assert only[0] == {"uuid": made[0], "value": 0}
    projected = admin.get(VAR, query={"name": var["name"], "fields": ["name"]}).json
    assert projected == [{"name": var["name"]}]

    assert_error(admin.get(VAR, query={"value": "1"}), 400, "ValidationError", "value")
    assert_error(admin.get(P, query={"active": "maybe"}), 400, "ValidationError", "active")
    assert_error(admin.get(VAL, query={"variable": "nope"}), 400, "ValidationError")


def test_every_object_of_a_kind_has_the_same_keys(admin):
    sel = create(admin, VAR, setter={"kind": "selector"})
    prof = create(admin, VAR, setter=per_profile(admin, REPLICAS))
    assert set(sel) == set(prof) == {"uuid", "name", "description", "project_id", "setter",
                                     "value", "created_at", "updated_at"}
    bound = create(admin, VAL, variable=sel["uuid"], value=1)
    free = create(admin, VAL, value=None)
    assert set(bound) == set(free) == {"uuid", "name", "description", "project_id",
                                       "variable", "value", "manual_selected", "tags",
                                       "created_at", "updated_at"}
    assert set(profile(admin, "develop")) == {
        "uuid", "name", "description", "project_id", "profile_type", "active", "created_at",
        "updated_at"}


# ---- project scoping ---------------------------------------------------------------

def test_project_owner_uses_global_profiles_but_cannot_switch_them(server, admin):
    project = make_project(admin)
    user, username, password = make_user(admin)
    bind(admin, user, "owner", project)
    owner = server.client(server.login(username, password, scope=f"project:{project}"))

    assert sorted(p["name"] for p in owner.get(P).json) == sorted(PROFILE_NAMES)
    body = {"name": "replicas", "setter": per_profile(owner, REPLICAS)}
    resp = owner.post(VAR, body)
    assert resp.status == 201, resp
    assert resp.json["project_id"] == project and resp.json["value"] == 1
    large = profile(owner, "large")
    assert_error(owner.post(f"{P}/{large['uuid']}/actions/activate/invoke"),
                 403, "Forbidden")
    assert active_names(admin) == ["develop"]

    hidden = create(admin, VAR, setter={"kind": "selector"})
    assert_error(owner.post(VAL, {"name": "v", "variable": hidden["uuid"], "value": 1}),
                 400, "ValidationError", "does not exist")
    assert owner.get(f"{VAR}/{hidden['uuid']}").status == 404


def test_openapi_document_covers_the_values_store(server):
    doc = server.client().get("/v1/openapi.json").json
    validate(doc)
    for path in (P, VAR, "/v1/vs/values"):
        assert path in doc["paths"] and f"{path}/{{uuid}}" in doc["paths"]
    assert f"{P}/{{uuid}}/actions/activate/invoke" in doc["paths"]
    for action in ("select_value", "release_value"):
        assert f"{VAR}/{{uuid}}/actions/{action}/invoke" in doc["paths"]
