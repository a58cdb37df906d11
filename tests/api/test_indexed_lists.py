"""A list served from the store's per-field indexes answers exactly what a scan of every
record answers: the same items in the same order, the same pagination headers, the same
errors, the same tenant filtering (appliance/api/listing.py `source`, docs/api.md "Lists").

The reference here is the scan the list handler did before the indexes: every record,
the visibility rule, matches(), filter_query, sort_and_page, render. Both run in this
process over a real store; the call is a stand-in holding only what a list reads (its
query, its principal, no path parameters), as tests/bench/bench_store.py's list calls.
Writes from a second Store over the same directory are another process's writes: the
indexes follow them through the journal.
"""

import random
import types
import urllib.parse

import bottle
import pytest

from appliance.api.errors import ApiError, Forbidden
from appliance.api.listing import check_project_filter, matches, parse_filters, sort_and_page
from appliance.iam.permissions import Principal
from state import Store
from tests.api.widgets import Widgets

PROJECTS = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222",
            "33333333-3333-4333-8333-333333333333"]
OWNERS = ["aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb", None]
COLORS = ["red", "green", "blue", None]


class SharedWidgets(Widgets):
    """Widgets whose second project every scoped caller reads too: a visibility of two
    projects (the union of two index groups)."""

    def __init__(self):
        super().__init__()
        self.shared_projects = (PROJECTS[1],)


def widget(rng, i):
    return {"name": f"w{i}", "project_id": rng.choice(PROJECTS), "size": rng.randrange(5),
            "enabled": rng.random() < 0.5, "color": rng.choice(COLORS),
            "owner": rng.choice(OWNERS), "spec": None,
            "tags": rng.choice([[], ["a"], ["a", "b"], None]), "status": "NEW",
            "serial": i}


@pytest.fixture
def stores(tmp_path):
    """(the API's store, another process's store) over one directory, 300 widgets written
    in three batches (three creation times) by the other."""
    rng = random.Random(32)
    ours, theirs = Store(str(tmp_path)), Store(str(tmp_path))
    coll = theirs.collection("test_widgets", unique=[("name", "project_id")])
    for batch in range(3):
        coll.insert_many([widget(rng, batch * 100 + i) for i in range(100)])
    yield ours, theirs
    ours.close()
    theirs.close()


def resource_over(store, cls=Widgets):
    resource = cls()
    resource.api = types.SimpleNamespace(store=store)
    return resource


def call_of(query, project_id=None):
    forms = bottle.FormsDict()
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        forms.append(name, value)
    principal = None if project_id is None else Principal(
        {"uuid": OWNERS[0]}, project_id, ["test.widget.read"])
    return types.SimpleNamespace(query=forms, principal=principal, params={}, request=None)


def scanned(resource, call):
    """The list as a scan of every record gives it: (items, pagination headers)."""
    visible = resource.visible_projects(call)
    check_project_filter(resource, call, visible)
    filters = parse_filters(resource, call.query)
    only = resource.projection(call)
    records = [r for r in resource.collection().records()
               if (visible is None or r.get("project_id") in visible) and matches(r, filters)]
    headers = {}
    page = sort_and_page(resource, resource.filter_query(call, records), call.query,
                         headers.__setitem__)
    return [resource.render(r, only) for r in page], headers


def listed(resource, call):
    bottle.response.bind()
    items = resource.list_handler(call)
    return items, {k: v for k, v in bottle.response.headers.items()
                   if k.startswith("X-Pagination")}


def outcome(fn, resource, call):
    try:
        return fn(resource, call)
    except ApiError as e:
        return type(e), e.body()


def queries(store):
    coll = store.collection("test_widgets")
    some = [r["uuid"] for r in coll.records()[::37]]
    return [
        "", "color=red", "color=red&color=blue", "color=red&color=red", "enabled=true",
        "enabled=False", f"owner={OWNERS[0]}", f"owner=/v1/iam/users/{OWNERS[1]}",
        f"owner={OWNERS[0]}&owner={OWNERS[1]}&color=green", "size=3", "size=3&color=red",
        "tags=a", "tags=b&color=blue", "status=NEW", "status=ACTIVE", "name=w7",
        # whole unique keys (name, project_id): looked up, not scanned
        *(f"name=w{i}&project_id={p}" for i in (7, 150) for p in PROJECTS),
        f"name=w7&name=w150&name=w299&project_id={PROJECTS[0]}&project_id={PROJECTS[2]}",
        f"name=w7&project_id={PROJECTS[0].upper()}&color=red",
        f"name=w7&project_id={PROJECTS[1]}&tags=a&sort_dir=desc&page_limit=1",
        f"uuid={some[0]}", f"uuid={some[1].upper()}&uuid={some[2]}",
        f"uuid={some[3]}&color=red", "uuid=99999999-9999-4999-8999-999999999999",
        f"project_id={PROJECTS[0]}", f"project_id={PROJECTS[0]}&project_id={PROJECTS[2]}",
        f"project_id={PROJECTS[1].upper()}&enabled=true",
        "color=blue&sort_key=size&sort_dir=desc", "enabled=true&page_limit=7",
        "color=green&sort_key=size&page_limit=5", "color=red&fields=name&fields=color",
        f"owner={OWNERS[1]}&sort_dir=desc&page_limit=3",
        "color=purple", "enabled=maybe", "size=3&page_limit=0", "colour=red",
    ]


def follow_pages(resource, call_for, query, side):
    """Every page of a paged list, following X-Pagination-Marker."""
    pages, marker = [], None
    for _ in range(100):
        q = query + (f"&page_marker={marker}" if marker else "")
        got = outcome(side, resource, call_for(q))
        pages.append(got)
        if not isinstance(got[1], dict) or "X-Pagination-Marker" not in got[1]:
            return pages
        marker = got[1]["X-Pagination-Marker"]
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("cls", [Widgets, SharedWidgets])
@pytest.mark.parametrize("project_id", [None, PROJECTS[0]])
def test_indexed_lists_answer_what_the_scan_answers(stores, cls, project_id):
    ours, theirs = stores
    resource = resource_over(ours, cls)
    for query in queries(ours):
        call = call_of(query, project_id)
        assert outcome(listed, resource, call) == outcome(scanned, resource, call), query
    # every page, through the markers
    for query in ("color=red&page_limit=9", "enabled=true&sort_key=size&page_limit=11",
                  f"owner={OWNERS[2] or OWNERS[0]}&sort_dir=desc&page_limit=13"):
        assert follow_pages(resource, lambda q: call_of(q, project_id), query, listed) == \
            follow_pages(resource, lambda q: call_of(q, project_id), query, scanned), query


def test_a_scoped_caller_sees_only_its_projects_through_the_index(stores):
    ours, _ = stores
    resource = resource_over(ours)
    items, _ = listed(resource, call_of("color=red", PROJECTS[0]))
    everyone, _ = listed(resource, call_of("color=red"))
    assert items and {i["project_id"] for i in items} == {f"/v1/iam/projects/{PROJECTS[0]}"}
    assert len(everyone) > len(items)
    # another project's widget named by its uuid stays out of sight
    foreign = next(r for r in ours.collection("test_widgets").records()
                   if r["project_id"] == PROJECTS[2])
    assert listed(resource, call_of(f"uuid={foreign['uuid']}", PROJECTS[0]))[0] == []
    with pytest.raises(Forbidden):
        listed(resource, call_of(f"project_id={PROJECTS[2]}", PROJECTS[0]))


def test_the_indexes_follow_another_processs_writes(stores):
    ours, theirs = stores
    resource = resource_over(ours, SharedWidgets)
    probe = ["color=red", "color=blue&enabled=true", f"owner={OWNERS[0]}",
             f"name=w3&name=w40&project_id={PROJECTS[0]}&project_id={PROJECTS[1]}",
             f"project_id={PROJECTS[2]}", "status=ACTIVE", "color=green&page_limit=4"]
    for query in probe:                 # builds the indexes in this process
        for project_id in (None, PROJECTS[0]):
            call = call_of(query, project_id)
            assert outcome(listed, resource, call) == outcome(scanned, resource, call)
    coll = theirs.collection("test_widgets")
    rng = random.Random(7)
    records = coll.records()
    for r in rng.sample(records, 40):   # moves between groups, some back in time order
        coll.update(r["uuid"], {"color": rng.choice(COLORS), "enabled": not r["enabled"],
                                "project_id": rng.choice(PROJECTS), "status": "ACTIVE"})
    for r in rng.sample(coll.records(), 20):
        coll.delete(r["uuid"])
    coll.insert_many([widget(rng, 1000 + i) for i in range(30)])
    for query in probe + queries(ours):
        for project_id in (None, PROJECTS[0], PROJECTS[2]):
            call = call_of(query, project_id)
            assert outcome(listed, resource, call) == outcome(scanned, resource, call), query


def test_filters_use_indexes_of_repeated_values_only(stores):
    """Enums, booleans and references go through an index; a name (one group per record
    would cost ~280 bytes a record) and the uuid (a record's own key) do not."""
    ours, _ = stores
    resource = resource_over(ours)
    coll = ours.collection("test_widgets")
    uuid = coll.records()[5]["uuid"]
    for query in ("name=w5", f"uuid={uuid}", "size=2"):
        listed(resource, call_of(query))
    assert not set(coll._groups) & {"name", "uuid", "size"}
    listed(resource, call_of(f"color=red&owner={OWNERS[0]}&enabled=true", PROJECTS[0]))
    assert {"color", "owner", "enabled", "project_id"} <= set(coll._groups)


def test_a_value_no_index_can_hold_is_left_to_the_scan(stores):
    """A stored value that cannot be a dict key (a list where an enum belongs, written
    around the API) does not break the list: the scan decides, as before."""
    ours, theirs = stores
    theirs.collection("test_widgets").insert({**widget(random.Random(1), 999),
                                              "color": ["red"]})
    resource = resource_over(ours)
    for query in ("color=red", "color=blue&enabled=true", ""):
        call = call_of(query)
        assert outcome(listed, resource, call) == outcome(scanned, resource, call)
    assert any(i["color"] == ["red"] for i in listed(resource, call_of(""))[0])


def test_a_list_asked_again_is_answered_again_until_its_kind_changes(stores):
    """The cache of lists (appliance/api/listing.py `ListCache`): keyed by the query, the
    caller's visible projects and the kind's version. Another process's write is seen at
    once; another tenant's answer is never served; a caller mutating its answer changes
    no later one."""
    ours, theirs = stores
    resource = resource_over(ours)
    query = "color=red&sort_key=size&page_limit=5"
    first = listed(resource, call_of(query))
    assert first == listed(resource, call_of(query)) == scanned(resource, call_of(query))
    assert (resource, tuple(call_of(query).query.allitems()), None, None) in \
        resource_cache_keys()
    first[0][0]["name"] = "changed by its caller"
    assert listed(resource, call_of(query)) == scanned(resource, call_of(query))
    scoped = listed(resource, call_of(query, PROJECTS[0]))
    assert scoped == scanned(resource, call_of(query, PROJECTS[0])) != first
    target = ours.collection("test_widgets").by_key(
        ("name", "project_id"),
        (scoped[0][0]["name"], PROJECTS[0]))
    theirs.collection("test_widgets").update(target["uuid"], {"color": "blue"})
    after = listed(resource, call_of(query, PROJECTS[0]))
    assert after == scanned(resource, call_of(query, PROJECTS[0])) != scoped
    assert target["uuid"] not in {i["uuid"] for i in after[0]}


class DressedWidgets(Widgets):
    def render(self, record, only=None):
        return {**super().render(record, only), "dressed": True}


def test_a_resource_whose_render_is_its_own_is_not_cached(stores):
    """A capability's render may read other kinds (an LB's addresses, a variable's
    value): the kind's version cannot tell when its answer changes."""
    ours, _ = stores
    resource = resource_over(ours, DressedWidgets)
    items, _ = listed(resource, call_of("color=red"))
    assert items and all(i["dressed"] for i in items)
    assert not any(key[0] is resource for key in resource_cache_keys())


def resource_cache_keys():
    from appliance.api.listing import LISTED
    return set(LISTED._entries)


class ViewedWidgets(Widgets):
    """A resource over a view computed per request (as the Element Manager's parts are):
    records, get and by, no index, no version."""

    def collection(self):
        from appliance.em.parts import View
        return View(self.api.store.collection("test_widgets").records())


def test_a_view_computed_per_request_is_scanned_and_not_cached(stores):
    ours, _ = stores
    resource = resource_over(ours, ViewedWidgets)
    plain = resource_over(ours)
    for query in ("color=red&enabled=true", f"name=w7&project_id={PROJECTS[0]}",
                  f"owner={OWNERS[0]}&page_limit=4", ""):
        for project_id in (None, PROJECTS[0]):
            call = call_of(query, project_id)
            assert outcome(listed, resource, call) == outcome(scanned, plain, call), query
    assert not any(key[0] is resource for key in resource_cache_keys())
