"""Element Manager manifests and elements get `project_id`: the project they act for.

Before it, every element was written as the platform, including one a project uploaded
to its own repository (docs/security.md, "Elements"). Each record without the field gets
the one appliance.em.acting works out: an element linked from a repo element acts for
that repo element's project, a manifest for its element or the repo element of its name
and version, anything else (posted to the Element Manager directly, which only
administrators could do) for the platform (null). Idempotent: a record that has the
field is left alone.
"""


def apply(store):
    # imported here: every process lists the migrations at start, and the daemons that
    # never import the API must not load it for this one (tests/supervisor/test_imports.py)
    from appliance.em import acting  # noqa: PLC0415

    for kind in ("em_elements", "em_manifests"):
        collection = store.collection(kind)
        for record in collection.records():
            if "project_id" not in record:
                project = acting.acting_project(store, record, kind)
                collection.update(record["uuid"], {"project_id": project})
