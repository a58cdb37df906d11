"""What makes the API's start cheaper (issue 12: boot to a healthy API under TCG) keeps
its behaviour: the route table compiled once, and `api_bootstrap: false`, which checks
the state's schema version instead of bootstrapping again."""

import socket
import subprocess
import sys
import time

import pytest

from appliance import config, metrics, server
from appliance.api.routing import _Router
from appliance.bootstrap import bootstrap, require_bootstrapped
from appliance.migrations import MigrationError, latest
from state import Store
from tests.apiserver import Client, free_port
from tests.backup.conftest import clean_environ
from tests.conftest import ROOT
from tests.processes import stop


def environ(method, path):
    return {"REQUEST_METHOD": method, "PATH_INFO": path}


def test_routes_added_after_a_compile_still_match():
    router = _Router()
    router.add("/v1/a/<uuid>", "GET", "a")
    router.compile_stale()
    assert router.match(environ("GET", "/v1/a/1"))[0] == "a"
    router.add("/v1/b/<uuid>", "GET", "b")          # stale again: compiled at the match
    assert router.match(environ("GET", "/v1/b/2")) == ("b", {"uuid": "2"})
    assert router.match(environ("GET", "/v1/a/3"))[0] == "a"
    with pytest.raises(Exception) as e:
        router.match(environ("DELETE", "/v1/b/2"))
    assert e.value.status_code == 405


def settings_for(state_dir, **overrides):
    return config.load(environ={}, overrides={"state_dir": str(state_dir), **overrides})


def test_a_state_not_bootstrapped_is_refused_without_bootstrap(tmp_path, monkeypatch):
    # serve() starts as the API process does, sending this process's metrics to the
    # state's files (metrics.enable): put that back at the end, or a later test's
    # in-process counters would no longer be what its /metrics reads
    import prometheus_client.values as values
    monkeypatch.setenv(metrics.ENV, "")
    monkeypatch.delenv(metrics.ENV)
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)
    settings = settings_for(tmp_path, api_bootstrap=False)
    with pytest.raises(MigrationError, match="bootstrap has not migrated it"):
        require_bootstrapped(settings)
    # the API process refuses to serve it, and leaves it as it was
    assert server.serve(settings) == 1
    store = Store(str(tmp_path))
    try:
        assert store.schema_version() == 0
        assert store.collection("iam_users").records() == []
    finally:
        store.close()


def test_a_bootstrapped_state_passes_and_a_newer_one_is_refused(tmp_path):
    settings = settings_for(tmp_path, api_bootstrap=False)
    bootstrap(settings)
    require_bootstrapped(settings)
    store = Store(str(tmp_path))
    try:
        store.set_schema_version(latest() + 1)
    finally:
        store.close()
    with pytest.raises(MigrationError, match="newer"):
        require_bootstrapped(settings)


def test_api_bootstrap_is_a_boolean_setting():
    assert config.load(environ={})["api_bootstrap"] is True
    assert config.load(environ={"APPLIANCE_API_BOOTSTRAP": "false"})["api_bootstrap"] is False


def test_the_api_loads_its_code_then_waits_for_the_mark_before_the_state(tmp_path):
    """api_wait_for (the image's unit: first boot's mark): the API process starts beside
    first boot and opens the state only once the mark exists; until then it has not even
    made the state directory (which first boot has not handed to its user yet)."""
    state, mark = tmp_path / "state", tmp_path / "run" / "firstboot-done"
    port = free_port()
    env = clean_environ(APPLIANCE_STATE_DIR=str(state), APPLIANCE_API_PORT=str(port),
                        APPLIANCE_API_BOOTSTRAP="false", APPLIANCE_API_WAIT_FOR=str(mark))
    proc = subprocess.Popen([sys.executable, "-P", "-m", "appliance.server"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        # its log says when the code is loaded and the wait begins (no sleep-and-hope)
        for line in proc.stderr:
            if "waiting for" in line:
                break
        assert proc.poll() is None and not state.exists()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        bootstrap(settings_for(state))             # what first boot does, then its mark
        mark.parent.mkdir()
        mark.write_text("")
        client = Client("127.0.0.1", port)
        deadline = time.monotonic() + 60
        while True:
            try:
                assert client.get("/v1/health").status == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the API never served after the mark"
                time.sleep(0.1)
    finally:
        stop(proc)
