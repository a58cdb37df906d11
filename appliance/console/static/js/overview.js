// #/: health and version, counts by kind and status, capacity per hypervisor, the
// daemons' last reconciles, and the latest events. Counts, capacity and events follow
// the shared event stream; nothing here polls.
import { html, useState, useEffect } from "./html.js";
import { get, request } from "./api.js";
import { allows } from "./openapi.js";
import { subscribe, parseEventStream } from "./events.js";
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

export function Overview({ cols, session }) {
  const perms = session.permissions;
  const [health, setHealth] = useState(null);
  const [counts, setCounts] = useState(null);
  const [countsBy, setCountsBy] = useState(null); // "kind" (metrics) or "collection"
  const [daemons, setDaemons] = useState(null);
  const [hypervisors, setHypervisors] = useState(null);
  const [events, setEvents] = useState([]);
  const [error, setError] = useState(null);
  const metricsAllowed = allows(perms, "appliance.metrics.read");
  const hypervisorsAllowed = allows(perms, "compute.hypervisor.read");
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
    const d = {};
    const row = (name) => (d[name] = d[name] || { daemon: name, last: 0, waiting: 0, errors: 0 });
    for (const s of samples) {
      if (s.name === "appliance_daemon_last_success_timestamp_seconds") row(s.labels.daemon).last = Math.max(row(s.labels.daemon).last, s.value);
      if (s.name === "appliance_daemon_waiting_items") row(s.labels.daemon).waiting += s.value;
      if (s.name === "appliance_daemon_errors_total") row(s.labels.daemon).errors += s.value;
    }
    setCounts(byKind);
    setCountsBy("kind");
    setDaemons(Object.values(d).sort((a, b) => a.daemon.localeCompare(b.daemon)));
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
    request("GET", "/v1/events?follow=false").then((r) => setEvents(parseEventStream(String(r.data)).reverse().slice(0, 20)), () => {});
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
      ${metricsAllowed ? html`<section aria-labelledby="h-daemons">
        <h2 id="h-daemons">Daemons</h2>
        <p class="hint">From the metrics (GET /metrics): the API serves no event for a daemon's pass, so this part is read when the page opens. <button type="button" onClick=${() => loadMetrics().catch(setError)}>Refresh daemons</button></p>
        ${daemons && daemons.length ? html`<div class="scroll"><table>
          <thead><tr><th scope="col">Daemon</th><th scope="col">Last successful pass</th><th scope="col">Waiting</th><th scope="col">Errors since start</th></tr></thead>
          <tbody>${daemons.map((d) => html`<tr><th scope="row">${d.daemon}</th><td>${d.last ? shortTime(new Date(d.last * 1000).toISOString()) : "never"}</td><td>${d.waiting}</td><td>${d.errors}</td></tr>`)}</tbody>
        </table></div>` : html`<p>${daemons ? "No daemon has reported yet." : "Asking…"}</p>`}
      </section>` : ""}
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
