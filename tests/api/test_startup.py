"""What makes the API's start cheaper (issue 12: boot to a healthy API under TCG) keeps
its behaviour: the route table compiled once, and `api_bootstrap: false`, which checks
the state's schema version instead of bootstrapping again."""

import pytest

from appliance import config, server
from appliance.api.routing import _Router
from appliance.bootstrap import bootstrap, require_bootstrapped
from appliance.migrations import MigrationError, latest
from state import Store


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


def test_a_state_not_bootstrapped_is_refused_without_bootstrap(tmp_path):
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
