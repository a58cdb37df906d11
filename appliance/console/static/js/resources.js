// The generic pages of every collection in the OpenAPI document: list, detail, and the
// create and edit forms built from the operations' request schemas. What is offered
// follows the session's permissions (openapi.js allows); what a value means is the API's.
import { html, useState, useEffect, useRef } from "./html.js";
import { request, get, post, put, del } from "./api.js";
import { allows, plain, deref, titleOf } from "./openapi.js";
import { subscribe, parseEventStream } from "./events.js";
import { Alert, Status, Value, hashFor, shortTime } from "./view.js";

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

const titleOfItem = (item) => (item && (item.name || item.username || item.title || item.uuid)) || "";

function useTitle(text) {
  useEffect(() => { document.title = `${text} · appliance console`; }, [text]);
}

function Heading({ children }) {
  const ref = useRef(null);
  // a new page takes the focus to its heading, so that a keyboard or screen reader user
  // starts there and not at the end of the previous page
  useEffect(() => { ref.current && ref.current.focus(); }, []);
  return html`<h1 tabindex="-1" ref=${ref}>${children}</h1>`;
}

// ---------------------------------------------------------------- list

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

function Breadcrumbs({ cols, apiPath }) {
  // /v1/dns/domains/<d>/records/<r>: each collection and item on the way, as links
  const parts = apiPath.replace(/^\/v1\//, "").split("/");
  const crumbs = [];
  for (let i = 1; i < parts.length; i++) {
    const path = "/v1/" + parts.slice(0, i + 1).join("/");
    if (path === apiPath) break;
    if (cols.some((c) => c.regex.test(path) || (c.itemRegex && c.itemRegex.test(path)))) crumbs.push(path);
  }
  if (!crumbs.length) return null;
  return html`<nav aria-label="Breadcrumb" class="crumbs"><ol>${crumbs.map((p) => html`<li><a href=${hashFor(p)}>${p.split("/").pop()}</a></li>`)}</ol></nav>`;
}

// ---------------------------------------------------------------- detail

export function DetailPage({ doc, cols, session, collection, apiPath }) {
  const [item, setItem] = useState(null);
  const [error, setError] = useState(null);
  const [gone, setGone] = useState(false);
  const [reload, setReload] = useState(0);
  const [confirming, setConfirming] = useState(false);
  const [deleteError, setDeleteError] = useState(null);
  const [result, setResult] = useState(null);
  const [openAction, setOpenAction] = useState(null);
  const perms = session.permissions;
  const uuid = apiPath.split("/").pop();
  useTitle(titleOfItem(item) || uuid);

  useEffect(() => {
    let live = true;
    get(apiPath).then((data) => live && (setItem(data), setError(null)), (e) => live && setError(e));
    return () => { live = false; };
  }, [apiPath, reload]);
  const [history, setHistory] = useState([]);
  const createdAt = item && item.created_at;
  useEffect(() => {
    // this resource's past events still in the feed's window, then the live ones below
    if (!createdAt) return;
    const query = new URLSearchParams({ follow: "false", uuid, since: createdAt });
    request("GET", "/v1/events?" + query).then((r) => setHistory((live) => {
      const seen = new Set(live.map((e) => e.revision));
      return [...live, ...parseEventStream(String(r.data)).reverse().filter((e) => !seen.has(e.revision))].slice(0, 50);
    }), () => {});
  }, [createdAt]);
  useEffect(() => subscribe((event) => {
    if (event.type === "resync" || event.uuid === uuid) {
      if (event.uuid === uuid) setHistory((h) => [event, ...h].slice(0, 50));
      if (event.type === "deleted") setGone(true);
      else setReload((n) => n + 1);
    }
  }), [uuid]);

  const remove = async () => {
    try {
      await del(apiPath);
      location.hash = hashFor(apiPath.replace(/\/[^/]+$/, ""));
    } catch (e) {
      setDeleteError(e);
      setConfirming(false);
    }
  };
  const invoke = async (action, body) => {
    setResult(null);
    try {
      const url = `${apiPath}/actions/${action.name}` + (action.invoke ? "/invoke" : "");
      const data = action.invoke ? await post(url, body || {}) : await get(url);
      setResult({ action: action.name, data });
      setOpenAction(null);
      if (action.invoke) setReload((n) => n + 1);
    } catch (e) {
      setResult({ action: action.name, error: e });
    }
  };

  const schema = collection.itemSchema;
  const fields = item ? [...new Set([...Object.keys(schema.properties || {}), ...Object.keys(item)])] : [];
  const canEdit = collection.update && allows(perms, collection.update["x-permission"]);
  const canDelete = collection.remove && allows(perms, collection.remove["x-permission"]);
  const actions = collection.actions.filter((a) => allows(perms, a.permission));
  const linking = whatLinksHere(doc, cols, collection, perms);
  return html`
    <main id="main" tabindex="-1">
      <${Breadcrumbs} cols=${cols} apiPath=${apiPath} />
      <${Heading}>${item ? titleOfItem(item) : uuid}</${Heading}>
      <p class="kindline">${collection.itemSchema && titleOf(collection.path)} · <code>${apiPath}</code></p>
      <${Alert} error=${error} />
      ${gone ? html`<p class="alert" role="alert">This resource has been deleted.</p>` : ""}
      ${item ? html`
        ${"status" in item ? html`<p class="statusline">Status: <${Status} status=${item.status} reason=${item.status_reason} /></p>` : ""}
        <div class="toolbar">
          ${canEdit ? html`<a class="button" href=${hashFor(apiPath) + "/edit"}>Edit</a>` : ""}
          ${canDelete ? html`<button type="button" class="danger" onClick=${() => { setConfirming(true); setDeleteError(null); }}>Delete</button>` : ""}
          ${actions.map((a) => html`<button type="button" onClick=${() => (a.invoke && a.body && a.body.properties && Object.keys(a.body.properties).length ? setOpenAction(a) : invoke(a))}>${a.invoke ? a.name.replace(/_/g, " ") : "Show " + a.name.replace(/_/g, " ")}</button>`)}
        </div>
        ${confirming ? html`<${Confirm} text=${`Delete ${titleOfItem(item)}? This cannot be undone.`} onConfirm=${remove} onCancel=${() => setConfirming(false)} />` : ""}
        <${Alert} error=${deleteError} id="delete-error" />
        ${openAction ? html`<${ActionForm} doc=${doc} action=${openAction} onInvoke=${(body) => invoke(openAction, body)} onCancel=${() => setOpenAction(null)} />` : ""}
        ${result ? html`<section class="result" aria-labelledby="h-result"><h2 id="h-result">${result.action}</h2>
          ${result.error ? html`<${Alert} error=${result.error} id="action-error" />` : html`<${ActionAnswer} data=${result.data} />`}</section>` : ""}
        <dl class="fields">${fields.map((f) => html`<dt>${f}</dt><dd data-field=${f}>${f === "status" ? html`<${Status} status=${item.status} reason=${item.status_reason} />` : html`<${Value} cols=${cols} value=${item[f]} />`}</dd>`)}</dl>
        ${history.length ? html`<section aria-labelledby="h-history"><h2 id="h-history">History</h2>
          <ol class="events history" aria-live="polite">${history.map((e) => html`<li key=${e.revision}>
            <span class="time">${shortTime(e.timestamp)}</span>
            <span class="etype">${e.type}${e.action ? " " + e.action.name : ""}</span>
            ${e.type === "status_changed" ? html`<span>${e.old_status || "—"} → </span>` : ""}
            ${e.status ? html`<${Status} status=${e.status} reason=${e.status_reason} />` : ""}
            ${e.actor && e.actor.name ? html`<span class="actor">by ${e.actor.name}</span>` : ""}
          </li>`)}</ol></section>` : ""}
        ${collection.children.length ? html`<section aria-labelledby="h-children"><h2 id="h-children">Contains</h2><ul>
          ${collection.children.filter((c) => allows(perms, c.list["x-permission"])).map((c) => html`<li><a href=${hashFor(apiPath + "/" + c.path.split("/").pop())}>${c.path.split("/").pop().replace(/_/g, " ")}</a></li>`)}</ul></section>` : ""}
        ${linking.length ? html`<section aria-labelledby="h-links"><h2 id="h-links">What links to it</h2><ul class="links">
          ${linking.map(([c, field]) => html`<li><a href=${hashFor(c.path) + "?" + new URLSearchParams({ [field]: uuid })}>${c.service} ${titleOf(c.path)}</a> <span class="muted">by ${field}</span></li>`)}</ul></section>` : ""}
      ` : error ? "" : html`<p>Loading…</p>`}
    </main>`;
}

/** The delete's confirmation, in the page: it takes the focus, Escape cancels. */
function Confirm({ text, onConfirm, onCancel }) {
  const ref = useRef(null);
  useEffect(() => { ref.current && ref.current.focus(); }, []);
  return html`<div class="confirm" role="alertdialog" aria-labelledby="confirm-text" onKeyDown=${(e) => e.key === "Escape" && onCancel()}>
    <p id="confirm-text">${text}</p>
    <button type="button" class="danger" ref=${ref} onClick=${onConfirm}>Confirm delete</button>
    <button type="button" onClick=${onCancel}>Cancel</button></div>`;
}

/** An action's answer: a text answer ({"log": "..."}, a node's console) as its lines. */
function ActionAnswer({ data }) {
  const keys = data && typeof data === "object" ? Object.keys(data) : [];
  if (keys.length === 1 && typeof data[keys[0]] === "string")
    return html`<p class="hint">${keys[0]}</p><pre class="text" data-answer=${keys[0]}>${data[keys[0]]}</pre>`;
  return html`<pre class="json">${typeof data === "string" ? data : JSON.stringify(data, null, 2)}</pre>`;
}

/** Collections with a filterable field documented as a path under this collection. */
function whatLinksHere(doc, cols, collection, perms) {
  const out = [];
  for (const c of cols) {
    if (c.nested || !allows(perms, c.list["x-permission"])) continue;
    for (const [field, schema] of Object.entries(c.itemSchema.properties || {})) {
      const description = plain(doc, schema).description || "";
      const m = description.match(/path under (\/v1\/[^\s,;]+?)\/?(?:$|[\s,;])/);
      if (m && m[1] === collection.path && c.filters.includes(field)) out.push([c, field]);
    }
  }
  if (collection.path === "/v1/iam/projects") {
    // every project-owned kind filters on project_id (api-conventions.md section 2)
    for (const c of cols) if (!c.nested && c.filters.includes("project_id") && allows(perms, c.list["x-permission"])) out.push([c, "project_id"]);
  }
  return out.sort((a, b) => (a[0].service + a[0].title).localeCompare(b[0].service + b[0].title));
}

function ActionForm({ doc, action, onInvoke, onCancel }) {
  const [errors, setErrors] = useState({});
  const submit = (event) => {
    event.preventDefault();
    const { body, errors: found } = readForm(doc, action.body, event.target, "create", {});
    setErrors(found);
    if (!Object.keys(found).length) onInvoke(body);
  };
  return html`<form class="action" onSubmit=${submit} aria-label=${action.name}>
    <h2>${action.name.replace(/_/g, " ")}</h2>
    ${Object.keys(action.body.properties).map((name) => html`<${Field} doc=${doc} name=${name} schema=${action.body.properties[name]} required=${(action.body.required || []).includes(name)} error=${errors[name]} />`)}
    <p><button type="submit">Invoke ${action.name.replace(/_/g, " ")}</button> <button type="button" onClick=${onCancel}>Cancel</button></p>
  </form>`;
}

// ---------------------------------------------------------------- forms

function inputKind(doc, schema) {
  const s = plain(doc, schema);
  if (s.enum) return "enum";
  if (s.type === "boolean") return "boolean";
  if (s.type === "integer" || s.type === "number") return s.type;
  if (s.type === "array" && ["string", undefined].includes(plain(doc, s.items || {}).type) && !plain(doc, s.items || {}).properties) return "strings";
  if (s.type === "string") return "string";
  return "json";
}

const nullable = (doc, schema) => {
  const s = deref(doc, schema);
  return (Array.isArray(s.type) && s.type.includes("null")) || (s.anyOf || s.oneOf || []).some((a) => deref(doc, a).type === "null");
};

function display(kind, value) {
  if (value === null || value === undefined) return "";
  if (kind === "strings") return Array.isArray(value) ? value.join(", ") : String(value);
  if (kind === "json") return JSON.stringify(value, null, 2);
  return String(value);
}

function Field({ doc, name, schema, required, error, value }) {
  const s = plain(doc, schema);
  const kind = inputKind(doc, schema);
  const id = "field-" + name;
  const hint = [s.description, kind === "strings" ? "comma-separated" : "", kind === "json" ? "JSON" : ""].filter(Boolean).join("; ");
  const described = [hint ? id + "-hint" : "", error ? "error-" + name : ""].filter(Boolean).join(" ") || undefined;
  const common = { id, name, "aria-describedby": described, "aria-invalid": error ? "true" : undefined, "aria-required": required ? "true" : undefined };
  let input;
  if (kind === "enum") {
    // uncontrolled inputs (default values): a re-render showing an error keeps what was typed
    const current = display(kind, value);
    input = html`<select ...${common}>
      ${!required || value === undefined ? html`<option value="" selected=${current === ""}>(not set)</option>` : ""}
      ${s.enum.filter((v) => v !== null).map((v) => html`<option value=${String(v)} selected=${current === String(v)}>${String(v)}</option>`)}</select>`;
  } else if (kind === "boolean") {
    input = html`<input type="checkbox" ...${common} defaultChecked=${value === true} />`;
  } else if (kind === "integer" || kind === "number") {
    input = html`<input type="number" step=${kind === "integer" ? "1" : "any"} min=${s.minimum} max=${s.maximum} ...${common} defaultValue=${display(kind, value)} />`;
  } else if (kind === "json") {
    input = html`<textarea rows="4" ...${common} defaultValue=${display(kind, value)}></textarea>`;
  } else {
    const secret = /password|secret|private_key/.test(name);
    const target = referenceTarget(s);
    input = html`<input type=${secret ? "password" : "text"} autocomplete=${secret ? "new-password" : "off"} list=${target ? id + "-choices" : undefined} ...${common} defaultValue=${display(kind, value)} />
      ${target ? html`<${Choices} id=${id + "-choices"} path=${target} />` : ""}`;
  }
  return html`<div class=${"field" + (error ? " invalid" : "")} data-kind=${kind}>
    <label for=${id}>${name}${required ? html`<span class="required" aria-hidden="true"> *</span>` : ""}${required ? html`<span class="sr-only"> (required)</span>` : ""}</label>
    ${input}
    ${hint ? html`<p class="hint" id=${id + "-hint"}>${hint}</p>` : ""}
    ${error ? html`<p class="field-error" id=${"error-" + name} role="alert">${error}</p>` : ""}
  </div>`;
}

/** A reference field's collection, from its input pattern "^(/v1/<collection>/)?<uuid>$". */
function referenceTarget(schema) {
  const m = typeof schema.pattern === "string" && schema.pattern.match(/^\^\((\/v1\/[a-z_/]+)\/\)\?/);
  return m ? m[1] : null;
}

/** The referenced collection's first 200 items as suggestions (uuid, labelled by name). */
function Choices({ id, path }) {
  const [items, setItems] = useState([]);
  useEffect(() => {
    get(path + "?page_limit=200").then((rows) => Array.isArray(rows) && setItems(rows), () => {});
  }, [path]);
  return html`<datalist id=${id}>${items.map((r) => html`<option value=${r.uuid} label=${titleOfItem(r)} />`)}</datalist>`;
}

/** The body a form describes: on create the fields filled, on edit the fields changed. */
function readForm(doc, schema, form, mode, initial) {
  const body = {};
  const errors = {};
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    const el = form.elements[name];
    if (!el) continue;
    const kind = inputKind(doc, prop);
    const raw = kind === "boolean" ? el.checked : el.value;
    if (mode === "edit") {
      const before = kind === "boolean" ? initial[name] === true : display(kind, initial[name]);
      if (raw === before) continue;
    }
    if (kind !== "boolean" && raw.trim() === "") {
      if (mode === "edit" && nullable(doc, prop)) body[name] = null;
      else if (mode === "edit") body[name] = "";
      continue;
    }
    try {
      if (kind === "boolean") body[name] = raw;
      else if (kind === "integer" || kind === "number") body[name] = Number(raw);
      else if (kind === "strings") body[name] = raw.split(",").map((v) => v.trim()).filter(Boolean);
      else if (kind === "json") body[name] = JSON.parse(raw);
      else if (kind === "enum") {
        const option = plain(doc, prop).enum.find((v) => String(v) === raw);
        body[name] = option === undefined ? raw : option;
      } else body[name] = raw;
    } catch (e) {
      errors[name] = `${name}: is not valid JSON (${e.message})`;
    }
  }
  return { body, errors };
}

/**
 * The form field a 400/403 message is about, or null. The API names it first:
 * "<field>[.<inner path>]: <what is wrong>" (appliance/api/validation.py describe) and
 * "<field> is read-only" (appliance/api/resource.py).
 */
export function fieldOfMessage(message, fields) {
  const patterns = [/^([A-Za-z_][A-Za-z0-9_]*)(?:[.[][^:]*)?: /, /^([A-Za-z_][A-Za-z0-9_]*) is read-only/, /^([A-Za-z_][A-Za-z0-9_]*) /];
  for (const p of patterns) {
    const m = String(message || "").match(p);
    if (m && fields.includes(m[1])) return m[1];
  }
  return null;
}

export function FormPage({ doc, cols, session, collection, apiPath, mode }) {
  const schema = (mode === "create" ? collection.createSchema : collection.updateSchema) || { properties: {} };
  const [item, setItem] = useState(mode === "create" ? {} : null);
  const [errors, setErrors] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  const op = mode === "create" ? collection.create : collection.update;
  const permitted = op && allows(session.permissions, op["x-permission"]);
  const title = mode === "create" ? `Create in ${titleOf(collection.path)}` : `Edit ${titleOfItem(item) || apiPath.split("/").pop()}`;
  useTitle(title);
  useEffect(() => {
    if (mode === "edit") get(apiPath).then(setItem, setFormError);
  }, [apiPath]);

  // the optional client-chosen uuid last: it is rarely what a person wants to type
  const fields = Object.keys(schema.properties || {}).sort((a, b) => (a === "uuid") - (b === "uuid"));
  const required = schema.required || [];
  // a new resource of a project-scoped session belongs to that project unless changed
  const initial = mode === "create" && session.project_id ? { project_id: session.project_id } : item;
  const submit = async (event) => {
    event.preventDefault();
    const { body, errors: found } = readForm(doc, schema, event.target, mode, item || {});
    setErrors(found);
    setFormError(null);
    if (Object.keys(found).length) return;
    setBusy(true);
    try {
      const saved = mode === "create" ? await post(apiPath, body) : await put(apiPath, body);
      location.hash = hashFor(mode === "create" ? `${apiPath}/${saved.uuid}` : apiPath);
    } catch (e) {
      const field = fieldOfMessage(e.message, fields);
      if (field && (e.status === 400 || e.status === 403 || e.status === 409)) {
        setErrors({ [field]: e.message });
        setTimeout(() => document.getElementById("field-" + field)?.focus(), 0);
      } else setFormError(e);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <main id="main" tabindex="-1">
      <${Breadcrumbs} cols=${cols} apiPath=${mode === "create" ? apiPath + "/new" : apiPath + "/edit"} />
      <${Heading}>${title}</${Heading}>
      ${!permitted ? html`<p class="alert" role="alert">Your session may not ${mode} here.</p>` : ""}
      <${Alert} error=${formError} id="form-error" />
      ${item && permitted ? html`<form class="resource" onSubmit=${submit} novalidate>
        <p class="hint">Fields marked * are required. Read-only fields (status, timestamps, …) are not in this form: the API sets them.</p>
        ${fields.map((name) => html`<${Field} key=${name} doc=${doc} name=${name} schema=${schema.properties[name]} required=${required.includes(name)} error=${errors[name]} value=${initial[name]} />`)}
        <p class="buttons"><button type="submit" disabled=${busy}>${mode === "create" ? "Create" : "Save"}</button>
          <a href=${hashFor(mode === "create" ? apiPath : apiPath)}>Cancel</a></p>
      </form>` : ""}
    </main>`;
}
