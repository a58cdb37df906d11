"""Upgrade test: mark the state as migrated by the newer build (tests/image).

Copied into the newer build only (image-build --extra-migrations); its number sits far
above the real migrations so that it is always the last one."""

MARKER_KIND = "upgrade_test_marks"
MARKER_UUID = "00000000-0000-4000-8000-000000009000"


def apply(store):
    marks = store.collection(MARKER_KIND)
    if marks.find_one(uuid=MARKER_UUID) is None:      # idempotent: run again, same state
        marks.insert({"uuid": MARKER_UUID, "note": "written by migration 9000"})
