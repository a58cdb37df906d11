"""Fixtures of the web console's tests (docs/console.md): a real API on Waitress with a
console folder of its own (the server-side tests), and a real `appliance up` driven by
headless Chromium (the browser tests, below)."""

import os

import pytest

from tests.apiserver import ApiServer
from tests.conftest import ADMIN_PASSWORD

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>appliance</title>
<link rel="stylesheet" href="app.css?v={{v}}">
<script type="module" src="js/main.js?v={{v}}"></script></head>
<body><main><h1>Appliance console</h1><p id="status">loading</p></main></body></html>
"""
MAIN_JS = """import { show } from "./show.js";
show(document.getElementById("status"), "ready");
"""
SHOW_JS = """export function show(element, text) { element.textContent = text; }
"""
APP_CSS = "body { font-family: sans-serif; }\n"


def write_console(folder):
    """A tiny front end of the shape the real one has (index.html naming js/main.js with
    ?v={{v}}, a module it imports by relative name, a stylesheet): the server-side tests do
    not depend on the front end's files (appliance/console/static/, another part's)."""
    os.makedirs(os.path.join(folder, "js"), exist_ok=True)
    for name, text in (("index.html", PAGE), ("js/main.js", MAIN_JS),
                       ("js/show.js", SHOW_JS), ("app.css", APP_CSS)):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return folder


@pytest.fixture(scope="module")
def console_dir(tmp_path_factory):
    return write_console(str(tmp_path_factory.mktemp("console")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, console_dir):
    """A real API (Waitress on loopback) serving the console from `console_dir`."""
    srv = ApiServer(str(tmp_path_factory.mktemp("state")), ADMIN_PASSWORD,
                    console_static_dir=console_dir).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin(server):
    return server.client(server.login("admin", ADMIN_PASSWORD))
