// The audit trail (#/audit): GET /v1/audit/ as a table, newest first, filtered by the
// route's own filters (actor, project_id, kind, method, since, until: docs/audit.md) and
// paged by its X-Pagination-Marker header. The filters live in the hash, so a filtered
// page can be linked and reloaded. The trail is no part of the event feed, so the page
// reads it when opened, filtered or paged, and on Refresh. Shown only when the session holds the route's
// permission; what a project's owner may read (its project's entries) is the API's answer.
import { html, useState, useEffect } from "./html.js";
import { request } from "./api.js";
import { allows } from "./openapi.js";
import { Alert, shortTime } from "./view.js";
import { Heading, useTitle } from "./page.js";

export const AUDIT = "/v1/audit/";
const PAGE = 50;
const TEXT_FILTERS = ["actor", "project_id", "kind", "method"];
const TIME_FILTERS = ["since", "until"];

/** The permission of the trail's route, read from the OpenAPI document. */
export function auditPermission(doc) {
  const ops = doc.paths[AUDIT] || doc.paths[AUDIT.replace(/\/$/, "")] || {};
  return ops.get ? ops.get["x-permission"] : null;
}

export function mayReadAudit(doc, session) {
  return allows(session.permissions, auditPermission(doc));
}

// <input type="datetime-local"> speaks local time without a zone; the API RFC 3339 UTC
const toRfc3339 = (local) => (local ? new Date(local).toISOString() : "");
function toLocal(rfc) {
  const d = new Date(rfc);
  if (!rfc || isNaN(d)) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function AuditPage({ doc, session, query }) {
  const [rows, setRows] = useState(null);
  const [marker, setMarker] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  useTitle("Audit trail");
  const allowed = mayReadAudit(doc, session);

  const params = new URLSearchParams();
  for (const [k, v] of query.entries()) if ([...TEXT_FILTERS, ...TIME_FILTERS, "page_marker"].includes(k) && v) params.append(k, v);
  params.set("sort_dir", query.get("sort_dir") === "asc" ? "asc" : "desc");
  params.set("page_limit", String(PAGE));
  const url = AUDIT + "?" + params.toString();

  useEffect(() => {
    if (!allowed) return undefined;
    let live = true;
    setRows(null);
    request("GET", url).then((r) => {
      if (!live) return;
      setRows(r.data);
      setMarker(r.headers.get("X-Pagination-Marker"));
      setError(null);
    }, (e) => { if (live) { setError(e); setRows([]); } });
    return () => { live = false; };
  }, [url, allowed, reload]);

  const go = (next) => {
    const qs = next.toString();
    location.hash = "#/audit" + (qs ? "?" + qs : "");
  };
  const apply = (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const next = new URLSearchParams();
    for (const k of TEXT_FILTERS) { const v = String(form.get(k) || "").trim(); if (v) next.set(k, v); }
    for (const k of TIME_FILTERS) { const v = toRfc3339(form.get(k)); if (v) next.set(k, v); }
    if (form.get("oldest_first")) next.set("sort_dir", "asc");
    go(next);
  };
  const page = (to) => {
    const next = new URLSearchParams(query);
    if (to) next.set("page_marker", to); else next.delete("page_marker");
    go(next);
  };

  if (!allowed) return html`<main id="main" tabindex="-1"><${Heading}>Audit trail</${Heading}>
    <p class="alert" role="alert">Your session may not read the audit trail: administrators read all of it, a project's owner (with a session in that project) its project's entries.</p></main>`;
  const filtered = [...TEXT_FILTERS, ...TIME_FILTERS].filter((k) => query.get(k));
  return html`
    <main id="main" tabindex="-1" class="audit">
      <${Heading}>Audit trail</${Heading}>
      <p class="hint">Every change made through the API (and every login), whatever its answer${session.project_id && session.project_id !== "00000000-0000-0000-0000-000000000000" ? ": the entries of your project" : ""}. Newest first.</p>
      <form class="filters audit-filters" aria-label="Filter the audit trail" onSubmit=${apply}>
        <span><label for="audit-actor">Actor</label> <input id="audit-actor" name="actor" value=${query.get("actor") || ""} placeholder="user name or uuid" /></span>
        <span><label for="audit-project">Project</label> <input id="audit-project" name="project_id" value=${query.get("project_id") || ""} placeholder="project uuid" /></span>
        <span><label for="audit-kind">Kind</label> <input id="audit-kind" name="kind" value=${query.get("kind") || ""} placeholder="repo_elements" /></span>
        <span><label for="audit-method">Method</label>
          <select id="audit-method" name="method" value=${query.get("method") || ""}>
            ${["", "POST", "PUT", "PATCH", "DELETE"].map((m) => html`<option value=${m}>${m || "any"}</option>`)}
          </select></span>
        <span><label for="audit-since">From</label> <input id="audit-since" name="since" type="datetime-local" value=${toLocal(query.get("since"))} /></span>
        <span><label for="audit-until">Until</label> <input id="audit-until" name="until" type="datetime-local" value=${toLocal(query.get("until"))} /></span>
        <span><label class="check"><input type="checkbox" name="oldest_first" checked=${query.get("sort_dir") === "asc"} /> oldest first</label></span>
        <button type="submit">Filter</button>
        ${filtered.length ? html`<button type="button" onClick=${() => go(new URLSearchParams())}>Clear</button>` : ""}
        <button type="button" onClick=${() => setReload((n) => n + 1)}>Refresh</button>
      </form>
      ${filtered.length ? html`<ul class="chips" aria-label="Active filters">${filtered.map((k) => html`<li>${k} = ${query.get(k)}</li>`)}</ul>` : ""}
      <${Alert} error=${error} />
      ${rows === null ? html`<p>Loading…</p>` : rows.length === 0 ? (error ? "" : html`<p>No entry${filtered.length ? " with these filters" : ""}.</p>`) : html`
      <div class="scroll"><table class="list audit-entries">
        <thead><tr>${["time", "actor", "method", "path", "status", "kind", "project", "source"].map((c) => html`<th scope="col">${c}</th>`)}</tr></thead>
        <tbody>${rows.map((e) => html`<tr key=${e.uuid} data-uuid=${e.uuid} data-kind=${e.kind || ""}>
          <td class="time">${shortTime(e.created_at)}</td>
          <td>${e.actor ? e.actor.name || e.actor.id : e.login ? html`<span class="muted">(login as ${e.login.username})</span>` : html`<span class="muted">—</span>`}${e.login ? html` <span class=${e.login.succeeded ? "status status-active" : "status status-error"}>${e.login.succeeded ? "login" : "failed login"}</span>` : ""}</td>
          <td>${e.method}</td>
          <td><code>${e.path}</code></td>
          <td><span class=${"status " + (e.status >= 400 ? "status-error" : "status-active")}>${e.status}</span></td>
          <td>${e.kind || ""}</td>
          <td>${e.project_id ? html`<a href=${"#/k/iam/projects/" + e.project_id} title=${e.project_id}>${e.project_id.slice(0, 8)}…</a>` : html`<span class="muted">platform</span>`}</td>
          <td>${e.source || ""}</td>
        </tr>`)}</tbody>
      </table></div>`}
      <nav class="pager" aria-label="Pages">
        ${query.get("page_marker") ? html`<button type="button" onClick=${() => page(null)}>First page</button>` : ""}
        ${marker ? html`<button type="button" onClick=${() => page(marker)}>Next page</button>` : ""}
      </nav>
    </main>`;
}
