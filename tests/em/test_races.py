"""Element Manager actions racing the builder daemon: no internal conflict reaches a client.

Seen before the fix, on a busy machine: an uninstall invoked while the builder was still
bringing the element up answered `409 em_elements <uuid> is at revision 2, not 1`.
"""

import threading
import uuid

from state import NotFound, Store

from .conftest import ADMIN_PROJECT, act, element, install, post_manifest, wait_element
from tests.secret.conftest import wait_for


def small(name, version="1.0.0"):
    return {"name": name, "version": version, "resources": {"$core.secret.secrets": {
        "s": {"name": f"{name}-s", "project_id": ADMIN_PROJECT,
              "constructor": {"kind": "plain"}, "default_value": f"{name} {version}"}}}}


def manifest_of(admin, name):
    return element(admin, name)["manifest"].rsplit("/", 1)[1]


def test_uninstall_right_after_install_races_the_builder_and_wins(admin):
    names = [f"quick{uuid.uuid4().hex[:8]}" for _ in range(6)]
    manifests = {name: install(admin, small(name)) for name in names}
    # no waiting: the builder is bringing each one up while it is uninstalled
    answers = [act(admin, manifests[name], "uninstall") for name in names]
    assert [a.status for a in answers] == [200] * len(names), answers
    for name in names:
        wait_for(lambda name=name: element(admin, name) is None)


def test_actions_beside_a_writer_that_never_pauses(server, admin):
    name = f"busy{uuid.uuid4().hex[:8]}"
    first = install(admin, small(name))
    wait_element(admin, name)
    target = element(admin, name)["uuid"]
    stop = threading.Event()
    writes = [0]
    # a daemon-like writer, with its own store over the same files, that never rests
    other = Store(server.settings["state_dir"])

    def writer():
        coll = other.collection("em_elements")
        while not stop.is_set():
            try:
                coll.update(target, {"probe": writes[0]})
            except NotFound:
                return
            writes[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: writes[0] > 10)
        second = post_manifest(admin, small(name, "2.0.0")).json["uuid"]
        upgraded = act(admin, second, "upgrade")
        assert upgraded.status == 200, upgraded
        assert upgraded.json["version"] == "2.0.0"
        gone = act(admin, second, "uninstall")
        assert gone.status == 200, gone
        assert gone.json["desired"] == "uninstalled"
        # a conflict the client caused itself is still 409
        again = act(admin, first, "uninstall")
        assert again.status == 409 and "no element is installed" in again.json["message"]
    finally:
        stop.set()
        thread.join()
        other.close()
    wait_for(lambda: element(admin, name) is None)
