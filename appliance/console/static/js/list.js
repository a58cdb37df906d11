// A collection's list page: columns from the item schema, the route's filters, sorting,
// paging by the X-Pagination-Marker header, rows following the event stream.
import { html, useState, useEffect } from "./html.js";
import { request } from "./api.js";
import { allows, plain, titleOf } from "./openapi.js";
import { subscribe } from "./events.js";
import { Alert, Status, Value, hashFor, shortTime } from "./view.js";
import { Breadcrumbs, Heading, titleOfItem, useTitle } from "./page.js";

const PAGE = 50;
const FIRST = ["name", "username", "kind", "type", "version", "status"];
const NOT_A_COLUMN = new Set(["uuid", "description", "status_reason", "updated_at", "tags", "password"]);

function columnsOf(doc, schema, rows) {
  let props = schema.properties || {};
  if (!Object.keys(props).length && rows && rows.length) {
    // an undescribed item ({"type": "object"}, the audit trail): the first rows' scalar keys
    props = {};
    for (const row of rows.slice(0, 5))
      for (const [k, v] of Object.entries(row)) if (v === null || typeof v !== "object") props[k] = { type: typeof v === "number" ? "number" : typeof v === "boolean" ? "boolean" : "string" };
  }
  const scalar = (name) => ["string", "integer", "number", "boolean"].includes(plain(doc, props[name]).type);
  const names = Object.keys(props);
  const cols = FIRST.filter((n) => n in props);
  // a kind-object such as a DNS record's {"kind", "name", "address"}: one compact column
  const objectField = names.find((n) => !NOT_A_COLUMN.has(n) && plain(doc, props[n]).type === "object");
  if (objectField) cols.push(objectField);
  for (const n of names) {
    if (cols.length >= 6) break;
    if (!cols.includes(n) && !NOT_A_COLUMN.has(n) && n !== "created_at" && scalar(n)) cols.push(n);
  }
  if ("created_at" in props) cols.push("created_at");
  return cols;
}

export function ListPage({ doc, cols, session, collection, apiPath, query }) {
  const [rows, setRows] = useState(null);
  const [marker, setMarker] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  const perms = session.permissions;

  const title = titleOf(collection.path);
  useTitle(title);

  const params = new URLSearchParams(query);
  if (!params.has("page_limit")) params.set("page_limit", String(PAGE));
  const listUrl = apiPath + "?" + params.toString();

  useEffect(() => {
    let live = true;
    request("GET", listUrl).then((r) => {
      if (!live) return;
      setRows(r.data);
      setMarker(r.headers.get("X-Pagination-Marker"));
      setError(null);
    }, (e) => live && setError(e));
    return () => { live = false; };
  }, [listUrl, reload]);

  const columns = columnsOf(doc, collection.itemSchema, rows);

  useEffect(() => subscribe((event) => {
    if (event.type === "resync") return setReload((n) => n + 1);
    const ours = event.path ? event.path.startsWith(apiPath + "/") && !event.path.slice(apiPath.length + 1).includes("/") : false;
    if (ours && event.type === "created") return setReload((n) => n + 1);
    setRows((current) => {
      if (!current || !current.some((r) => r.uuid === event.uuid)) return current;
      if (event.type === "deleted") return current.filter((r) => r.uuid !== event.uuid);
      return current.map((r) => r.uuid === event.uuid ? { ...r, status: event.status ?? r.status, status_reason: event.status_reason, name: event.name ?? r.name } : r);
    });
  }), [apiPath]);

  const go = (changes) => {
    const next = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null) next.delete(k); else next.set(k, v);
    }
    if (!("page_marker" in changes)) next.delete("page_marker");
    const qs = next.toString();
    location.hash = hashFor(apiPath) + (qs ? "?" + qs : "");
  };
  const sortKey = query.get("sort_key");
  const sortDir = query.get("sort_dir") || "asc";
  const filters = [...query.entries()].filter(([k]) => collection.filters.includes(k));
  const addFilter = (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const next = new URLSearchParams(query);
    next.append(form.get("filter_field"), form.get("filter_value"));
    next.delete("page_marker");
    location.hash = hashFor(apiPath) + "?" + next.toString();
  };
  const removeFilter = (key, value) => {
    const next = new URLSearchParams();
    for (const [k, v] of query.entries()) if (!(k === key && v === value) && k !== "page_marker") next.append(k, v);
    const qs = next.toString();
    location.hash = hashFor(apiPath) + (qs ? "?" + qs : "");
  };
  const canCreate = collection.create && allows(perms, collection.create["x-permission"]);
  return html`
    <main id="main" tabindex="-1">
      <${Breadcrumbs} cols=${cols} apiPath=${apiPath} />
      <${Heading}>${title}</${Heading}>
      <div class="toolbar">
        ${canCreate ? html`<a class="button" href=${hashFor(apiPath) + "/new"}>Create</a>` : ""}
      </div>
      ${collection.filters.length ? html`<form class="filters" onSubmit=${addFilter} aria-label="Filter">
        <label for="filter-field">Filter on</label>
        <select id="filter-field" name="filter_field">${collection.filters.map((f) => html`<option value=${f}>${f}</option>`)}</select>
        <label for="filter-value">equal to</label>
        <input id="filter-value" name="filter_value" required />
        <button type="submit">Filter</button>
      </form>` : ""}
      ${filters.length ? html`<ul class="chips" aria-label="Active filters">${filters.map(([k, v]) => html`
        <li>${k} = ${v} <button type="button" aria-label=${`Remove filter ${k} = ${v}`} onClick=${() => removeFilter(k, v)}>×</button></li>`)}</ul>` : ""}
      <${Alert} error=${error} />
      ${rows === null ? (error ? "" : html`<p>Loading…</p>`) : rows.length === 0 ? html`<p>Nothing here${filters.length ? " with these filters" : ""}.</p>` : html`
      <div class="scroll"><table class="list">
        <thead><tr>
          ${collection.itemPath ? html`<th scope="col"><span class="sr-only">Open</span></th>` : ""}
          ${columns.map((c) => {
            const active = sortKey === c;
            const dir = active && sortDir === "asc" ? "desc" : "asc";
            return html`<th scope="col" aria-sort=${active ? (sortDir === "asc" ? "ascending" : "descending") : undefined}>
              <button type="button" class="sort" onClick=${() => go({ sort_key: c, sort_dir: dir })}>${c}${active ? (sortDir === "asc" ? " ▲" : " ▼") : ""}</button></th>`;
          })}
        </tr></thead>
        <tbody>${rows.map((row) => html`<tr key=${row.uuid || JSON.stringify(row)} data-uuid=${row.uuid}>
          ${collection.itemPath ? html`<td><a href=${hashFor(apiPath + "/" + row.uuid)} aria-label=${"Open " + titleOfItem(row)}>open</a></td>` : ""}
          ${columns.map((c) => html`<td>${c === "status" ? html`<${Status} status=${row.status} reason=${row.status_reason} />`
            : c === "created_at" ? shortTime(row[c])
            : (c === "name" || c === "username") && collection.itemPath && row[c] ? html`<a href=${hashFor(apiPath + "/" + row.uuid)}>${row[c]}</a>`
            : row[c] && typeof row[c] === "object" && !Array.isArray(row[c]) ? compact(row[c])
            : html`<${Value} cols=${cols} value=${row[c]} />`}</td>`)}
        </tr>`)}</tbody>
      </table></div>`}
      <nav class="pager" aria-label="Pages">
        ${query.get("page_marker") ? html`<button type="button" onClick=${() => go({ page_marker: null })}>First page</button>` : ""}
        ${marker ? html`<button type="button" onClick=${() => go({ page_marker: marker })}>Next page</button>` : ""}
      </nav>
    </main>`;
}

/** An object in one table cell: "key: value, ..." of its scalar members, as text. */
function compact(value) {
  const text = Object.entries(value).filter(([, v]) => v === null || typeof v !== "object")
    .map(([k, v]) => `${k}: ${v}`).join(", ");
  return text.length > 80 ? text.slice(0, 79) + "…" : text;
}
