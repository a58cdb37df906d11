// #/: health and version, counts by kind and status, capacity per hypervisor, each
// daemon's state, and the latest events. Counts, capacity and events follow the shared
// event stream. The daemons' states are no store records and have no event, so that table
// alone is read again on a timer, only while the tab is visible (DaemonStates).
import { html, useState, useEffect } from "./html.js";
import { get, request } from "./api.js";
import { allows } from "./openapi.js";
import { subscribe, withPastEvents } from "./events.js";
import { Alert, Status, shortTime, hashFor } from "./view.js";

const METRIC = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+(\S+)/;

function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const m = line.match(METRIC);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function bump(counts, key, status, delta) {
  if (!key) return counts;
  const row = { ...(counts[key] || {}) };
  const s = status || "(none)";
  row[s] = Math.max(0, (row[s] || 0) + delta);
  if (!row[s]) delete row[s];
  return { ...counts, [key]: row };
}

export function Overview({ doc, cols, session }) {
  const perms = session.permissions;
  const [health, setHealth] = useState(null);
  const [counts, setCounts] = useState(null);
  const [countsBy, setCountsBy] = useState(null); // "kind" (metrics) or "collection"
  const [hypervisors, setHypervisors] = useState(null);
  const [events, setEvents] = useState([]);
  const [error, setError] = useState(null);
  const metricsAllowed = allows(perms, "appliance.metrics.read");
  const hypervisorsAllowed = allows(perms, "compute.hypervisor.read");
  const daemonsOp = doc && doc.paths["/v1/system/daemons"] && doc.paths["/v1/system/daemons"].get;
  const daemonsAllowed = !!daemonsOp && allows(perms, daemonsOp["x-permission"]);
  const readable = cols.filter((c) => !c.nested && allows(perms, c.list["x-permission"]));
  const collectionOf = (path) => path && readable.find((c) => path.startsWith(c.path + "/") && !path.slice(c.path.length + 1).includes("/"));

  const loadMetrics = async () => {
    const { data } = await request("GET", "/metrics");
    const samples = parseMetrics(String(data));
    const byKind = {};
    for (const s of samples.filter((x) => x.name === "appliance_resources")) {
      const k = s.labels.kind, st = s.labels.status || "(none)";
      byKind[k] = byKind[k] || {};
      byKind[k][st] = (byKind[k][st] || 0) + s.value;
    }
    setCounts(byKind);
    setCountsBy("kind");
  };

  const loadCountsFromLists = async () => {
    let byCollection = {};
    await Promise.all(readable.map(async (c) => {
      try {
        const hasStatus = "status" in (c.itemSchema.properties || {});
        const rows = await get(c.path + (hasStatus ? "?fields=uuid&fields=status" : "?fields=uuid"));
        if (!rows.length) byCollection = { ...byCollection, [c.path]: {} };
        for (const r of rows) byCollection = bump(byCollection, c.path, r.status, 1);
      } catch { /* a kind the session may list but not read here: left out */ }
    }));
    setCounts(byCollection);
    setCountsBy("collection");
  };

  const loadHypervisors = () => hypervisorsAllowed && get("/v1/compute/hypervisors").then(setHypervisors, setError);

  useEffect(() => {
    document.title = "Overview · appliance console";
    get("/v1/health").then(setHealth, setError);
    (metricsAllowed ? loadMetrics() : loadCountsFromLists()).catch(setError);
    loadHypervisors();
    request("GET", "/v1/events?follow=false").then((r) => setEvents((live) => withPastEvents(live, String(r.data), 20)), () => {});
  }, []);

  useEffect(() => subscribe((event) => {
    if (event.type === "resync") {
      (metricsAllowed ? loadMetrics() : loadCountsFromLists()).catch(setError);
      loadHypervisors();
      return;
    }
    setEvents((list) => [event, ...list].slice(0, 20));
    setCounts((current) => {
      if (!current) return current;
      const key = countsBy === "collection" ? (collectionOf(event.path) || {}).path : event.kind;
      if (event.type === "created") return bump(current, key, event.status, 1);
      if (event.type === "deleted") return bump(current, key, event.old_status, -1);
      if (event.status !== event.old_status) return bump(bump(current, key, event.old_status, -1), key, event.status, 1);
      return current;
    });
    if (hypervisorsAllowed && event.path && event.path.startsWith("/v1/compute/hypervisors/")) loadHypervisors();
  }), [countsBy]);

  // a store kind is named <service>_<collection> for most kinds (iam_projects): link those
  const kindPath = (kind) => (readable.find((c) => `${c.service}_${c.path.split("/").pop()}` === kind) || {}).path;
  const statuses = counts ? [...new Set(Object.values(counts).flatMap((r) => Object.keys(r)))].sort() : [];
  return html`
    <main id="main" tabindex="-1">
      <h1>Overview</h1>
      <${Alert} error=${error} />
      <section aria-labelledby="h-health">
        <h2 id="h-health">Health</h2>
        ${health ? html`<dl class="facts">
          <dt>Status</dt><dd><${Status} status=${health.status} /></dd>
          <dt>Version</dt><dd id="version">${health.version}</dd>
        </dl>` : html`<p>Asking…</p>`}
      </section>
      <section aria-labelledby="h-counts">
        <h2 id="h-counts">Resources by ${countsBy === "kind" ? "kind" : "collection"} and status</h2>
        ${counts ? html`<div class="scroll"><table class="counts">
          <thead><tr><th scope="col">${countsBy === "kind" ? "Kind" : "Collection"}</th>${statuses.map((s) => html`<th scope="col">${s}</th>`)}<th scope="col">Total</th></tr></thead>
          <tbody>${Object.keys(counts).sort().filter((k) => Object.keys(counts[k]).length).map((k) => html`<tr>
            <th scope="row">${countsBy === "collection" ? html`<a href=${hashFor(k)}>${k}</a>`
              : kindPath(k) ? html`<a href=${hashFor(kindPath(k))}>${k}</a>` : k}</th>
            ${statuses.map((s) => html`<td>${counts[k][s] || ""}</td>`)}
            <td>${Object.values(counts[k]).reduce((a, b) => a + b, 0)}</td></tr>`)}</tbody>
        </table></div>` : html`<p>Counting…</p>`}
      </section>
      ${hypervisorsAllowed ? html`<section aria-labelledby="h-capacity">
        <h2 id="h-capacity">Capacity per hypervisor</h2>
        ${hypervisors && hypervisors.length ? html`<div class="scroll"><table>
          <thead><tr><th scope="col">Hypervisor</th><th scope="col">Status</th><th scope="col">Cores used / free</th><th scope="col">RAM MB used / free</th><th scope="col">Disk GB used / free</th></tr></thead>
          <tbody>${hypervisors.map((h) => html`<tr>
            <th scope="row"><a href=${hashFor("/v1/compute/hypervisors/" + h.uuid)}>${h.name || h.uuid}</a></th>
            <td><${Status} status=${h.status} reason=${h.status_reason} /></td>
            ${["cores", "ram", "disk"].map((r) => html`<td>${usage(h["all_" + r], h["avail_" + r])}</td>`)}
          </tr>`)}</tbody></table></div>` : html`<p>${hypervisors ? "No hypervisors." : "Asking…"}</p>`}
      </section>` : ""}
      ${daemonsAllowed ? html`<${DaemonStates} />` : ""}
      <section aria-labelledby="h-events">
        <h2 id="h-events">Latest events</h2>
        <ol class="events" aria-live="polite">
          ${events.map((e) => html`<li key=${e.revision}>
            <span class="time">${shortTime(e.timestamp)}</span>
            <span class="etype">${e.type}${e.action ? " " + e.action.name : ""}</span>
            <span class="ekind">${e.resource || e.kind}</span>
            ${e.path ? html`<a href=${hashFor(e.path)}>${e.name || e.uuid}</a>` : html`<span>${e.name || e.uuid}</span>`}
            ${e.status ? html` <${Status} status=${e.status} reason=${e.status_reason} />` : ""}
            ${e.actor && e.actor.name ? html` <span class="actor">by ${e.actor.name}</span>` : ""}
          </li>`)}
        </ol>
        ${events.length ? "" : html`<p>No events yet.</p>`}
      </section>
    </main>`;
}

function usage(all, avail) {
  if (all === null || all === undefined) return "—";
  const free = avail ?? 0;
  return `${all - free} / ${free}`;
}

const DAEMONS_EVERY_MS = 10_000;

/** GET /v1/system/daemons: each daemon's state, since when, why, and its last good pass.
 * A daemon's state is kept by the supervisor (or systemd) outside the store, so no event
 * tells of its change: the table is read when the page opens, every 10 s while the tab
 * is visible, at once when the tab is shown again, and on a resync of the stream. A
 * platform-only read: a project's token gets 403 and the section says so. */
function DaemonStates() {
  const [daemons, setDaemons] = useState(null);
  const [error, setError] = useState(null);
  const [readAt, setReadAt] = useState(null);
  useEffect(() => {
    let stopped = false;
    let timer = null;
    const read = async () => {
      clearTimeout(timer);
      try {
        const rows = await get("/v1/system/daemons");
        if (stopped) return;
        setDaemons(rows); setError(null); setReadAt(new Date().toISOString());
      } catch (e) {
        if (stopped) return;
        setError(e);
        // a project's token (even an admin's): refused for good, asking again is useless
        if (e.status === 403) { stopped = true; return; }
      }
      if (!stopped && document.visibilityState === "visible") timer = setTimeout(read, DAEMONS_EVERY_MS);
    };
    const onVisibility = () => {
      if (stopped) return;
      if (document.visibilityState === "visible") read(); else clearTimeout(timer);
    };
    document.addEventListener("visibilitychange", onVisibility);
    const unsubscribe = subscribe((event) => event.type === "resync" && !stopped && read());
    read();
    return () => { stopped = true; clearTimeout(timer); unsubscribe(); document.removeEventListener("visibilitychange", onVisibility); };
  }, []);
  return html`<section aria-labelledby="h-daemons">
    <h2 id="h-daemons">Daemons</h2>
    <p class="hint">GET /v1/system/daemons: no event tells a daemon's state, so this table is read every ${DAEMONS_EVERY_MS / 1000} s while the tab is visible${readAt ? html` (last read ${shortTime(readAt)})` : ""}.</p>
    <${Alert} error=${error} id="daemons-error" />
    ${daemons && daemons.length ? html`<div class="scroll"><table class="daemons">
      <thead><tr><th scope="col">Daemon</th><th scope="col">State</th><th scope="col">Since</th><th scope="col">Reason</th><th scope="col">Last successful pass</th></tr></thead>
      <tbody>${daemons.map((d) => html`<tr key=${d.name} data-daemon=${d.name}>
        <th scope="row">${d.name}${d.on_demand ? html` <span class="muted">(on demand)</span>` : ""}</th>
        <td class="state"><span class=${"status daemon-" + d.state}>${d.state}</span></td>
        <td>${d.since ? shortTime(d.since) : "—"}</td>
        <td>${d.reason || ""}</td>
        <td>${d.last_success_at ? html`${shortTime(d.last_success_at)}${d.last_success_kind ? html` <span class="muted">${d.last_success_kind}</span>` : ""}` : "never"}</td>
      </tr>`)}</tbody></table></div>` : error ? "" : html`<p>${daemons ? "No daemons." : "Asking…"}</p>`}
  </section>`;
}
