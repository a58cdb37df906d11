// An LB's panel: the routes as nginx gets them (GET .../actions/routes: the producer's
// value and the node driver's renderer) and the rendered nginx text, so that an operator
// sees what a request meets without logging in to the LB's node. Read again when an
// event for the LB or a kind under it (vhosts, routes, pools) arrives.
import { html, useState, useEffect } from "./html.js";
import { get } from "./api.js";
import { subscribe } from "./events.js";
import { Alert, Status, hashFor } from "./view.js";
import { readAction } from "./read_action.js";

export function LbPanel({ session, collection, apiPath, item }) {
  if (!readAction(session, collection, "routes")) return null;
  return html`<${Routes} apiPath=${apiPath} projectId=${item.project_id} />`;
}

const endpointText = (e) => `${e.host}:${e.port}${e.weight !== undefined && e.weight !== null ? ` (weight ${e.weight})` : ""}`;

function Routes({ apiPath, projectId }) {
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    let live = true;
    get(apiPath + "/actions/routes").then((d) => live && (setData(d), setError(null)), (e) => live && setError(e));
    return () => { live = false; };
  }, [apiPath, reload]);
  // the LB's own events, and those of the kinds under it (vhosts, routes, pools: a nested
  // item's event carries no path nor parent, so any of the LB's project)
  useEffect(() => subscribe((event) => {
    if (event.type === "resync" || event.path === apiPath ||
        ((event.kind || "").startsWith("network_lb_") && (event.project_id ?? projectId) === projectId)) setReload((n) => n + 1);
  }), [apiPath, projectId]);
  const nginx = data && data.nginx;
  return html`<section class="panel" aria-labelledby="h-routes">
    <h2 id="h-routes">Rendered routes</h2>
    <${Alert} error=${error} id="routes-error" />
    ${data ? html`
      ${data.unavailable ? html`<p class="alert" role="status" id="routes-unavailable">Not rendered yet: ${data.unavailable}</p>` : ""}
      ${data.render_error ? html`<p class="alert" role="alert" id="routes-render-error">nginx cannot be given this LB: ${data.render_error}</p>` : ""}
      ${(data.refused || []).length ? html`<ul class="refused" aria-label="Endpoints left out">${data.refused.map((r) => html`<li>${r}</li>`)}</ul>` : ""}
      ${data.routes.length ? html`<div class="scroll"><table class="routes">
        <thead><tr><th scope="col">Vhost</th><th scope="col">Route</th><th scope="col">Match</th><th scope="col">Backends</th></tr></thead>
        <tbody>${data.routes.map((r) => html`<tr key=${r.route}>
          <td><a href=${hashFor(`${apiPath}/vhosts/${r.vhost}`)} title=${r.vhost}>${r.protocol}:${r.port}</a>
            ${(r.domains || []).length ? html`<div class="muted">${r.domains.join(", ")}</div>` : ""}</td>
          <td><a href=${hashFor(`${apiPath}/vhosts/${r.vhost}/routes/${r.route}`)} title=${r.route}>${r.route.slice(0, 8)}…</a></td>
          <td><code>${r.match}${r.value !== null && r.value !== undefined ? " " + r.value : ""}</code>
            ${(r.actions || []).length ? html`<div class="muted">${r.actions.join(", ")}</div>` : ""}</td>
          <td>${r.backends.length ? r.backends.map((b) => html`<div><a href=${hashFor(`${apiPath}/backend_pools/${b.pool}`)} title=${b.pool}>pool ${b.pool.slice(0, 8)}…</a>:
            ${b.endpoints.length ? b.endpoints.map(endpointText).join(", ") : html`<span class="muted">no endpoint</span>`}</div>`) : html`<span class="muted">—</span>`}</td>
        </tr>`)}</tbody></table></div>` : html`<p>No routes.</p>`}
      ${nginx ? html`<h3>nginx</h3>
        ${nginx.http ? html`<p class="hint">inside <code>http {}</code></p><pre class="text nginx" data-nginx="http">${nginx.http}</pre>` : ""}
        ${nginx.stream ? html`<p class="hint">inside <code>stream {}</code></p><pre class="text nginx" data-nginx="stream">${nginx.stream}</pre>` : ""}` : ""}
      <p class="hint">Status of the LB: <${Status} status=${data.status} /></p>
    ` : error ? "" : html`<p>Loading…</p>`}
  </section>`;
}
