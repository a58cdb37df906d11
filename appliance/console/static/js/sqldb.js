// A DBaaS instance's panel: how clients connect (the URI, without password), which node
// is the primary and each member's role, lag and freshness (GET .../actions/replication).
// Read again when an event for the instance or under it arrives (a failover, a member's
// status, a user or database made); the members' lag has no event of its own, so a
// "Refresh" button reads it on demand.
import { html, useState, useEffect } from "./html.js";
import { get } from "./api.js";
import { subscribe } from "./events.js";
import { Alert, Status, hashFor } from "./view.js";
import { readAction } from "./read_action.js";

export function SqldbPanel({ session, collection, apiPath, item }) {
  if (!readAction(session, collection, "replication")) return null;
  return html`<${Replication} apiPath=${apiPath} reason=${item.status_reason} projectId=${item.project_id} />`;
}

const NESTED = new Set(["sqldb_users", "sqldb_databases"]);
const NODE = (uuid) => hashFor("/v1/compute/nodes/" + uuid);

function Replication({ apiPath, reason, projectId }) {
  const uuid = apiPath.split("/").pop();
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  const [copied, setCopied] = useState(null);
  useEffect(() => {
    let live = true;
    get(apiPath + "/actions/replication").then((d) => live && (setData(d), setError(null)), (e) => live && setError(e));
    return () => { live = false; };
  }, [apiPath, reload]);
  useEffect(() => subscribe((event) => {
    // the instance itself (a failover, a member's status), or a user or database, whose
    // names the URI carries (a nested item's event has no path nor parent: any of the
    // instance's project)
    if (event.type === "resync" || event.uuid === uuid ||
        (NESTED.has(event.kind) && (event.project_id ?? projectId) === projectId)) setReload((n) => n + 1);
  }), [uuid, projectId]);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(data.uri);
      setCopied("Copied.");
    } catch (e) {
      // no clipboard (not a secure context, or refused): the text stays selectable
      setCopied("The browser refused the clipboard: select the text instead.");
    }
  };
  return html`<section class="panel" aria-labelledby="h-replication">
    <h2 id="h-replication">Connection and replication</h2>
    <${Alert} error=${error} id="replication-error" />
    ${data ? html`
      <dl class="facts">
        <dt>Connection</dt><dd>${data.uri ? html`<code id="sqldb-uri">${data.uri}</code>
          <button type="button" class="copy" onClick=${copy} aria-describedby="copy-said">Copy</button>
          <span id="copy-said" role="status">${copied || ""}</span>` : html`<span class="muted" id="sqldb-no-uri">no endpoint yet: the primary has no address${reason ? ` (${reason})` : ""}</span>`}</dd>
        <dt>Host, port</dt><dd>${data.host ? `${data.host}:${data.port}` : `— (port ${data.port})`}</dd>
        <dt>Users</dt><dd id="sqldb-users">${(data.users || []).join(", ") || "—"}</dd>
        <dt>Databases</dt><dd id="sqldb-databases">${(data.databases || []).join(", ") || "—"}</dd>
        <dt>Addresses</dt><dd>${(data.addresses || []).join(", ") || "—"}</dd>
        <dt>Primary</dt><dd id="sqldb-primary">${data.primary ? html`<a href=${NODE(data.primary)}>${(data.members.find((m) => m.node === data.primary) || {}).name || data.primary}</a>` : "—"}</dd>
        <dt>Epoch</dt><dd>${data.epoch}</dd>
        <dt>Status</dt><dd><${Status} status=${data.status} /></dd>
      </dl>
      ${data.members.length ? html`<div class="scroll"><table class="members">
        <thead><tr><th scope="col">Member</th><th scope="col">Role</th><th scope="col">Status</th><th scope="col">Lag (bytes)</th><th scope="col">Reported</th></tr></thead>
        <tbody>${data.members.map((m) => html`<tr key=${m.node}>
          <th scope="row"><a href=${NODE(m.node)}>${m.name || m.node}</a>${m.address ? html` <span class="muted">${m.address}</span>` : ""}</th>
          <td>${m.role}</td><td><${Status} status=${m.status} /></td>
          <td>${m.lag_bytes ?? "—"}</td>
          <td class=${m.fresh ? "fresh" : "stale"}>${m.reported_seconds_ago === null ? "never" : `${m.reported_seconds_ago} s ago`}${m.fresh ? "" : " (stale)"}</td>
        </tr>`)}</tbody></table></div>` : html`<p>No members yet.</p>`}
      <p><button type="button" onClick=${() => setReload((n) => n + 1)}>Refresh replication</button></p>
    ` : error ? "" : html`<p>Loading…</p>`}
  </section>`;
}
