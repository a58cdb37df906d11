// An item's page: its fields, status, references, actions, delete, what links to it and
// its history, following the event stream. Only what the session may do is offered.
import { html, useState, useEffect, useRef } from "./html.js";
import { request, get, post, del } from "./api.js";
import { allows, plain, titleOf } from "./openapi.js";
import { subscribe, withPastEvents } from "./events.js";
import { Alert, Status, Value, hashFor, shortTime } from "./view.js";
import { Breadcrumbs, Heading, titleOfItem, useTitle } from "./page.js";
import { Field, readForm, fieldOfMessage } from "./form.js";
import { panelFor, panelShows } from "./panels.js";

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
    request("GET", "/v1/events?" + query).then((r) => setHistory((live) => withPastEvents(live, String(r.data), 50)), () => {});
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
      return e;
    }
  };

  const schema = collection.itemSchema;
  const fields = item ? [...new Set([...Object.keys(schema.properties || {}), ...Object.keys(item)])] : [];
  const canEdit = collection.update && allows(perms, collection.update["x-permission"]);
  const canDelete = collection.remove && allows(perms, collection.remove["x-permission"]);
  const actions = collection.actions.filter((a) => allows(perms, a.permission) &&
    !panelShows(collection, a));
  const linking = whatLinksHere(doc, cols, collection, perms);
  const Panel = panelFor(collection); // a kind's own view (docs/console.md, "Special views")
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
          ${actions.map((a) => html`<button type="button" onClick=${() => (a.invoke && a.body && a.body.properties && Object.keys(a.body.properties).length ? setOpenAction(a) : invoke(a))}>${a.invoke ? a.name.replace(/_/g, " ") : "Show " + a.name.replace(/^get_/, "").replace(/_/g, " ")}</button>`)}
        </div>
        ${confirming ? html`<${Confirm} text=${`Delete ${titleOfItem(item)}? This cannot be undone.`} onConfirm=${remove} onCancel=${() => setConfirming(false)} />` : ""}
        <${Alert} error=${deleteError} id="delete-error" />
        ${openAction ? html`<${ActionForm} doc=${doc} action=${openAction} onInvoke=${(body) => invoke(openAction, body)} onCancel=${() => setOpenAction(null)} />` : ""}
        ${result ? html`<section class="result" aria-labelledby="h-result"><h2 id="h-result">${result.action}</h2>
          ${result.error ? html`<${Alert} error=${result.error} id="action-error" />` : html`<${ActionAnswer} data=${result.data} />`}</section>` : ""}
        <dl class="fields">${fields.map((f) => html`<dt>${f}</dt><dd data-field=${f}>${f === "status" ? html`<${Status} status=${item.status} reason=${item.status_reason} />` : html`<${Value} cols=${cols} value=${item[f]} />`}</dd>`)}</dl>
        ${Panel ? html`<${Panel} doc=${doc} cols=${cols} session=${session} collection=${collection} apiPath=${apiPath} item=${item} />` : ""}
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
  const submit = async (event) => {
    event.preventDefault();
    const { body, errors: found } = readForm(doc, action.body, event.target, "create", {});
    setErrors(found);
    if (Object.keys(found).length) return;
    // the API's message naming one of the action's fields goes beside it, as in the forms
    const refused = await onInvoke(body);
    const field = refused && fieldOfMessage(refused.message, Object.keys(action.body.properties));
    if (field) setErrors({ [field]: refused.message });
  };
  return html`<form class="action" onSubmit=${submit} aria-label=${action.name}>
    <h2>${action.name.replace(/_/g, " ")}</h2>
    ${Object.keys(action.body.properties).map((name) => html`<${Field} doc=${doc} name=${name} schema=${action.body.properties[name]} required=${(action.body.required || []).includes(name)} error=${errors[name]} />`)}
    <p><button type="submit">Invoke ${action.name.replace(/_/g, " ")}</button> <button type="button" onClick=${onCancel}>Cancel</button></p>
  </form>`;
}
