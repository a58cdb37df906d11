"""The web console's page weight and speed (docs/console.md, "Speed"; issue 30).

    python -m tests.bench console

Against a real `appliance up` (make run's entry point; tests/bench/bench_memory.py's
Appliance), in headless Chromium (tests/browser.py), logged in as admin through
POST /console/session (the login form's own call). Each of ROUNDS rounds:
- **cold**: a new browser context (empty cache, no connection) opens /console/ and shows
  the overview;
- **warm**: the same context reloads it (the browser's cache as the first load left it:
  the `?v=` files kept as immutable, the rest revalidated);
- **live**: CHANGES status changes, each a direct store write of a project's status and
  status_reason (what a daemon does: no API request), timed until the change is on the
  screen (the overview's latest events show the new reason). Goal < 500 ms.

A load's figures, all from the page's own clock (performance.now(), from the navigation's
start): ms until the overview's h1, ms until its first data (the version from
/v1/health), ms until the event stream says live; and the bytes transferred (the
Resource Timing API's transferSize of the document and every finished request: headers and
body as they came over the wire, 0 for a file the cache served; the open event stream has
not finished, so it is not counted) with the count of requests and of those served from the
cache. The change's time: the write's wall clock (taken just before Store.update) to the
page's wall clock (performance.timeOrigin + now()) when a MutationObserver first sees the
new reason in the events list; beside it, the time until Playwright's wait for the text
returned in this process (which adds Playwright's round trips).

Printed: min / median / max over the rounds. Figures are printed, never asserted.
Environment: BENCH_CONSOLE_ROUNDS (default 5), BENCH_CONSOLE_CHANGES (per round, 3).
"""

import http.client
import json
import os
import time
import uuid

from . import ROOT, note, spread, table, title
from .bench_memory import PASSWORD, Appliance, get_token, request

ROUNDS = int(os.environ.get("BENCH_CONSOLE_ROUNDS", "5"))
CHANGES = int(os.environ.get("BENCH_CONSOLE_CHANGES", "3"))
WAIT_MS = 60_000

# runs before the page's own scripts in every document of a context: the moments the
# overview's parts first appear, on the page's clock (ms from the navigation's start), and
# when a marker text first appears in the events list (wall clock, ms since the epoch)
MARKS = """
window.__marks = {};
window.__seen = {};
window.__watch = [];
new MutationObserver(() => {
  const m = window.__marks, now = performance.now();
  if (m.h1 === undefined) {
    const h = document.querySelector("main h1");
    if (h && h.textContent === "Overview") m.h1 = now;
  }
  if (m.data === undefined && document.querySelector("#version")) m.data = now;
  if (m.live === undefined) {
    const s = document.querySelector("header .stream");
    if (s && s.textContent === "live") m.live = now;
  }
  if (window.__watch.length) {
    const list = document.querySelector("ol.events");
    const text = list ? list.textContent : "";
    for (const marker of window.__watch) {
      if (!(marker in window.__seen) && text.includes(marker)) {
        window.__seen[marker] = performance.timeOrigin + now;
      }
    }
  }
}).observe(document, { subtree: true, childList: true, characterData: true });
"""

TRANSFER = """() => {
  const entries = [...performance.getEntriesByType("navigation"),
                   ...performance.getEntriesByType("resource")];
  return {
    bytes: entries.reduce((sum, e) => sum + (e.transferSize || 0), 0),
    requests: entries.length,
    cached: entries.filter((e) => e.transferSize === 0 && e.decodedBodySize > 0).length,
    largest: entries.map((e) => [e.name.replace(location.origin, ""), e.transferSize || 0])
                    .sort((a, b) => b[1] - a[1]).slice(0, 6),
  };
}"""


def wait_overview(page):
    page.wait_for_function(
        "() => ['h1', 'data', 'live'].every((k) => window.__marks[k] !== undefined)",
        timeout=WAIT_MS)
    # every request the overview makes when it opens has finished (the stream is open)
    page.wait_for_load_state("networkidle", timeout=WAIT_MS)
    marks = page.evaluate("window.__marks")
    return {**marks, **page.evaluate(TRANSFER)}


def new_context(browser, app):
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.add_init_script(MARKS)
    resp = context.request.post(f"http://127.0.0.1:{app.api_port}/console/session",
                                data={"username": "admin", "password": PASSWORD})
    if resp.status != 200:
        raise RuntimeError(f"console login: {resp.status} {resp.text()[:200]}")
    return context


def status_change(page, collection, project_uuid, n):
    """One direct store write; (ms write -> on screen by the page's clock, ms until the
    wait returned here)."""
    marker = f"bench-change-{n}-{uuid.uuid4().hex[:6]}"
    page.evaluate("(m) => { window.__watch.push(m); }", marker)
    status = "ERROR" if n % 2 else "ACTIVE"
    written_at = time.time()
    started = time.perf_counter()
    collection.update(project_uuid, {"status": status, "status_reason": marker})
    page.locator("ol.events", has_text=marker).wait_for(timeout=WAIT_MS)
    returned = time.perf_counter() - started
    seen = page.wait_for_function("(m) => window.__seen[m]", arg=marker,
                                  timeout=WAIT_MS).json_value()
    return seen - written_at * 1000, returned * 1000


def main():
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    from state import Store  # noqa: PLC0415
    from tests.browser import launch  # noqa: PLC0415

    title(f"bench_console: the overview's first load cold and warm, and a store change "
          f"until it is on the screen ({ROUNDS} rounds, {CHANGES} changes each)")
    app = Appliance(ROOT)
    try:
        app.wait_ready()
        store = Store(os.path.join(app.state_dir, "var"))
        projects = store.collection("iam_projects")
        conn = http.client.HTTPConnection("127.0.0.1", app.api_port, timeout=60)
        status, raw = request(conn, "POST", "/v1/iam/projects",
                              {"name": "bench-console-" + uuid.uuid4().hex[:6]},
                              get_token(conn))
        conn.close()
        if status != 201:
            raise RuntimeError(f"creating the project: {status} {raw[:200]!r}")
        project = json.loads(raw)
        loads = {"cold": [], "warm": []}
        changes, waits = [], []
        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                url = f"http://127.0.0.1:{app.api_port}/console/"
                for r in range(ROUNDS):
                    context = new_context(browser, app)
                    try:
                        page = context.new_page()
                        page.goto(url)
                        loads["cold"].append(wait_overview(page))
                        page.reload()
                        loads["warm"].append(wait_overview(page))
                        for c in range(CHANGES):
                            shown, waited = status_change(page, projects, project["uuid"],
                                                          r * CHANGES + c)
                            changes.append(shown)
                            waits.append(waited)
                    finally:
                        context.close()
            finally:
                browser.close()
        rows = []
        for side in ("cold", "warm"):
            got = loads[side]
            rows.append([side,
                         spread([g["h1"] for g in got], "{:.0f}"),
                         spread([g["data"] for g in got], "{:.0f}"),
                         spread([g["live"] for g in got], "{:.0f}"),
                         spread([g["bytes"] / 1024 for g in got], "{:.1f}"),
                         spread([g["requests"] for g in got], "{:.0f}"),
                         spread([g["cached"] for g in got], "{:.0f}")])
        note("\nthe overview's load (min / median / max over the rounds; ms from the "
             "navigation's start)")
        table(["load", "h1 ms", "first data ms", "stream live ms", "kB transferred",
               "requests", "from cache"], rows)
        note("\nthe largest transfers of the last round's loads (kB)")
        for side in ("cold", "warm"):
            table([side, "kB"], [[path[:70], f"{size / 1024:.1f}"]
                                 for path, size in loads[side][-1]["largest"]])
        note(f"\na status written to the store until it is on the screen "
             f"({len(changes)} changes; goal < 500 ms)")
        table(["measured by", "ms min / median / max"],
              [["the page's MutationObserver", spread(changes, "{:.0f}")],
               ["Playwright's wait returning", spread(waits, "{:.0f}")]])
        store.close()
    finally:
        errors = app.stop()
        if errors:
            note("errors logged by the appliance:\n" + "\n".join(errors[:20]))


if __name__ == "__main__":
    main()
