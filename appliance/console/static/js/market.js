// The marketplace: #/market browses the catalogs (the repositories and their elements,
// grouped by name, searchable), #/market/e/<repo element uuid> shows one version (what it
// requires, what it creates, the other versions) with Install, Upgrade and Uninstall, the
// same actions as `appliance elements install|upgrade|uninstall`, and follows the work
// live: the element's status, its Element Manager element and that element's resources,
// each read again when the event stream says one of them changed (no polling).
import { html, useState, useEffect, useRef } from "./html.js";
import { request, get, post } from "./api.js";
import { allows } from "./openapi.js";
import { subscribe } from "./events.js";
import { Alert, Status, shortTime } from "./view.js";
import { Heading, useTitle } from "./page.js";

const ELEMENTS = "/v1/repo/elements";
const REPOS = "/v1/repo/repositories";
const EM_ELEMENTS = "/v1/em/elements";
const ADMIN_PROJECT = "00000000-0000-0000-0000-000000000000";

const collectionAt = (cols, path) => cols.find((c) => c.path === path);
const actionPermission = (cols, name) => {
  const c = collectionAt(cols, ELEMENTS);
  const a = c && c.actions.find((x) => x.name === name && x.invoke);
  return a ? a.permission : null;
};
const mayList = (cols, perms, path) => {
  const c = collectionAt(cols, path);
  return !!(c && allows(perms, c.list["x-permission"]));
};

/** Whether the session may write an element of this project: a project's caller writes
 * its own project only, the admin project's catalog is written by platform callers
 * (unscoped, or scoped to the admin project): the shared-catalog rule of docs/repo.md. The
 * API checks it again; this only leaves out a button it would refuse. */
function writesProjectOf(session, element) {
  const scope = session.project_id;
  return !scope || scope === ADMIN_PROJECT || element.project_id === scope;
}

/** Version precedence as the API's (appliance/versions.py) for the usual shapes: numeric
 * parts compared as numbers, a release above its pre-releases. */
export function compareVersions(a, b) {
  const [ra, pa] = String(a).split(/-(.*)/s);
  const [rb, pb] = String(b).split(/-(.*)/s);
  const xs = ra.split("."), ys = rb.split(".");
  for (let i = 0; i < Math.max(xs.length, ys.length); i++) {
    const x = Number(xs[i] || 0), y = Number(ys[i] || 0);
    if (x !== y) return isNaN(x) || isNaN(y) ? String(xs[i]).localeCompare(String(ys[i])) : x - y;
  }
  if (pa === undefined || pb === undefined) return (pa === undefined ? 1 : 0) - (pb === undefined ? 1 : 0);
  return pa.localeCompare(pb, undefined, { numeric: true });
}

/** Re-run `read` whenever an event matching `wanted` arrives (and on a resync). */
function useLive(wanted, read, deps) {
  useEffect(() => subscribe((event) => {
    if (event.type === "resync" || wanted(event)) read();
  }), deps);
}

export function MarketPage({ cols, session, route }) {
  const m = route.path.match(/^\/market\/e\/([0-9a-fA-F-]{36})$/);
  if (m) return html`<${ElementPage} key=${m[1]} cols=${cols} session=${session} uuid=${m[1].toLowerCase()} />`;
  return html`<${Catalog} cols=${cols} session=${session} query=${route.query} />`;
}

function Catalog({ cols, session, query }) {
  const perms = session.permissions;
  const [repos, setRepos] = useState([]);
  const [elements, setElements] = useState(null);
  const [emElements, setEmElements] = useState({});
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  const search = query.get("q") || "";
  const repository = query.get("repository") || "";
  const dev = query.get("dev") === "true";
  useTitle("Marketplace");

  useEffect(() => {
    let live = true;
    if (mayList(cols, perms, REPOS)) get(REPOS).then((r) => live && setRepos(r), () => {});
    if (mayList(cols, perms, EM_ELEMENTS))
      get(EM_ELEMENTS).then((list) => live && setEmElements(Object.fromEntries(list.map((e) => [e.name, e]))), () => {});
    get(ELEMENTS + (dev ? "" : "?development=false")).then((list) => { if (live) { setElements(list); setError(null); } }, (e) => live && setError(e));
    return () => { live = false; };
  }, [dev, reload]);
  // an element installed, moved or removed, a catalog refreshed: the list is read again
  // (events come in bursts: one read for a burst)
  const pending = useRef(null);
  useLive((e) => ["repo_elements", "repo_repositories", "em_elements"].includes(e.kind), () => {
    clearTimeout(pending.current);
    pending.current = setTimeout(() => setReload((n) => n + 1), 150);
  }, []);
  useEffect(() => () => clearTimeout(pending.current), []);

  const go = (changes) => {
    const next = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) { if (v) next.set(k, v); else next.delete(k); }
    const qs = next.toString();
    location.hash = "#/market" + (qs ? "?" + qs : "");
  };
  const onSearch = (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    go({ q: String(form.get("q") || "").trim(), repository: form.get("repository"), dev: form.get("dev") ? "true" : null });
  };

  const byName = new Map();
  for (const e of elements || []) {
    if (repository && !e.repository.endsWith("/" + repository)) continue;
    if (search && !e.name.toLowerCase().includes(search.toLowerCase())) continue;
    if (!byName.has(e.name)) byName.set(e.name, []);
    byName.get(e.name).push(e);
  }
  const rows = [...byName.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, versions]) => {
    versions.sort((a, b) => compareVersions(b.version, a.version));
    const installed = versions.find((v) => v.installation_state === "INSTALLED");
    return { name, latest: versions[0], versions, installed, em: emElements[name] };
  });
  const repoName = (path) => (repos.find((r) => path.endsWith("/" + r.uuid)) || {}).name || path.split("/").pop().slice(0, 8);
  return html`
    <main id="main" tabindex="-1" class="market">
      <${Heading}>Marketplace</${Heading}>
      <p class="hint">Elements of every catalog (repository) you may see. Open one to see its versions and what it requires, and to install it.</p>
      <form class="filters" role="search" aria-label="Search the catalogs" onSubmit=${onSearch}>
        <label for="market-search">Name</label>
        <input id="market-search" name="q" type="search" value=${search} placeholder="part of a name" />
        <label for="market-repository">Catalog</label>
        <select id="market-repository" name="repository" value=${repository}>
          <option value="">every catalog</option>
          ${repos.map((r) => html`<option value=${r.uuid}>${r.name} (${r.status})</option>`)}
        </select>
        <label class="check"><input type="checkbox" name="dev" checked=${dev} /> development versions</label>
        <button type="submit">Search</button>
      </form>
      <${Alert} error=${error} />
      ${repos.length ? html`<details class="catalogs"><summary>Catalogs (${repos.length})</summary>
        <ul>${repos.map((r) => html`<li><a href=${"#/k/repo/repositories/" + r.uuid}>${r.name}</a> <${Status} status=${r.status} reason=${r.status_reason} />
          <span class="muted">${r.driver_spec && r.driver_spec.kind}${r.synced_at ? ", read " + shortTime(r.synced_at) : ""}</span></li>`)}</ul></details>` : ""}
      ${elements === null ? (error ? "" : html`<p>Loading…</p>`) : rows.length === 0 ? html`<p>No element${search ? ` whose name contains “${search}”` : ""}.</p>` : html`
      <div class="scroll"><table class="list market-elements">
        <thead><tr><th scope="col">name</th><th scope="col">latest</th><th scope="col">description</th><th scope="col">versions</th><th scope="col">installed</th><th scope="col">catalog</th></tr></thead>
        <tbody>${rows.map((row) => html`<tr key=${row.name} data-name=${row.name}>
          <td><a href=${"#/market/e/" + (row.installed || row.latest).uuid}>${row.name}</a></td>
          <td>${row.latest.version}${row.latest.development ? html` <span class="muted">(dev)</span>` : ""}</td>
          <td class="description">${row.latest.description || ""}</td>
          <td>${row.versions.length}</td>
          <td>${row.installed ? html`${row.installed.version} <${Status} status=${row.installed.status} />`
            : row.em ? html`${row.em.version} <span class="muted">(from a manifest)</span>` : html`<span class="muted">—</span>`}</td>
          <td>${repoName(row.latest.repository)}</td>
        </tr>`)}</tbody>
      </table></div>`}
    </main>`;
}

/** A requirement's constraint ({from_version, to_version, version} or a string) as text. */
function constraintText(value) {
  if (value === null || value === undefined) return "any version";
  if (typeof value !== "object") return String(value);
  const parts = [];
  if (value.version) parts.push("= " + value.version);
  if (value.from_version) parts.push("≥ " + value.from_version);
  if (value.to_version) parts.push("< " + value.to_version);
  return parts.length ? parts.join(", ") : "any version";
}

/** What a manifest creates: [collection path, resource name]. */
function declared(manifest) {
  const out = [];
  for (const [path, group] of Object.entries((manifest && manifest.resources) || {}))
    if (group && typeof group === "object") for (const name of Object.keys(group)) out.push([path, name]);
  return out;
}

function ElementPage({ cols, session, uuid }) {
  const perms = session.permissions;
  const [element, setElement] = useState(null);
  const [versions, setVersions] = useState([]);
  const [em, setEm] = useState(null);
  const [resources, setResources] = useState([]);
  const [moves, setMoves] = useState([]);
  const [error, setError] = useState(null);
  const [actionError, setActionError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const emUuid = element && element.element ? element.element.split("/").pop() : null;
  const readEm = mayList(cols, perms, EM_ELEMENTS);
  useTitle(element ? `${element.name} ${element.version}` : "Element");

  const readElement = () => get(`${ELEMENTS}/${uuid}`).then((e) => { setElement(e); setError(null); return e; }, setError);
  const readVersions = (name) => get(`${ELEMENTS}?name=${encodeURIComponent(name)}`)
    .then((list) => setVersions(list.sort((a, b) => compareVersions(b.version, a.version))), () => {});
  const readEmParts = (id) => {
    if (!id || !readEm) return;
    get(`${EM_ELEMENTS}/${id}`).then(setEm, () => setEm(null));
    get(`${EM_ELEMENTS}/${id}/resources/`).then(setResources, () => {});
  };
  useEffect(() => { readElement().then((e) => e && readVersions(e.name)); }, [uuid]);
  useEffect(() => { if (emUuid) readEmParts(emUuid); else { setEm(null); setResources([]); } }, [emUuid]);

  // the install's moves as the stream brings them: this element, its Element Manager
  // element, the records that element manages, and the other versions (an upgrade)
  const watched = useRef({});
  watched.current = { uuid, emUuid, resources: new Set(resources.map((r) => r.uuid)), versions: new Set(versions.map((v) => v.uuid)), name: element && element.name };
  useEffect(() => subscribe((event) => {
    const w = watched.current;
    if (event.type === "resync") { readElement(); readEmParts(w.emUuid); if (w.name) readVersions(w.name); return; }
    const mine = event.uuid === w.uuid, ofEm = w.emUuid && event.uuid === w.emUuid;
    const ofResource = w.resources.has(event.uuid);
    if ((mine || ofEm || ofResource) && event.status && (event.type === "status_changed" || event.type === "created"))
      setMoves((list) => [{ ...event, what: mine ? "element" : ofEm ? "Element Manager element" : event.resource || event.kind }, ...list].slice(0, 40));
    if (mine) readElement();
    if (ofEm || ofResource) readEmParts(w.emUuid);
    if (w.versions.has(event.uuid) || (event.kind === "repo_elements" && event.name === w.name)) w.name && readVersions(w.name);
  }), []);

  const act = async (label, path, body) => {
    setBusy(true);
    setActionError(null);
    setConfirming(false);
    try {
      const answer = await post(path, body || {});
      return answer;
    } catch (e) {
      setActionError(new Error(`${label}: ${e.message}`));
      return null;
    } finally {
      setBusy(false);
    }
  };
  if (!element) return html`<main id="main" tabindex="-1"><${Heading}>Element</${Heading}><${Alert} error=${error} />${error ? "" : html`<p>Loading…</p>`}</main>`;

  const installed = versions.find((v) => v.installation_state === "INSTALLED");
  const isInstalled = element.installation_state === "INSTALLED";
  const may = (action) => writesProjectOf(session, element) && allows(perms, actionPermission(cols, action));
  const canInstall = may("install") && (!installed || (isInstalled && element.status === "ERROR"));
  const canUpgradeTo = installed && !isInstalled && may("upgrade");
  const canUninstall = isInstalled && may("uninstall");
  const install = async () => {
    const answer = await act("Install", `${ELEMENTS}/${uuid}/actions/install/invoke`);
    if (answer) { setElement(answer); readVersions(element.name); }
  };
  const upgrade = async (target) => {
    const answer = await act("Upgrade", `${ELEMENTS}/${installed.uuid}/actions/upgrade/invoke`, { target: target.uuid });
    // the work continues on the target's record: follow it there
    if (answer) location.hash = "#/market/e/" + target.uuid;
  };
  const uninstall = async () => {
    const answer = await act("Uninstall", `${ELEMENTS}/${uuid}/actions/uninstall/invoke`);
    if (answer) setElement(answer);
  };
  const requirements = Object.entries((element.manifest && element.manifest.requirements) || {});
  const creates = declared(element.manifest);
  const done = element.status === "ACTIVE" || element.status === "ERROR";
  return html`
    <main id="main" tabindex="-1" class="market">
      <nav aria-label="Breadcrumb" class="crumbs"><ol><li><a href="#/market">Marketplace</a></li></ol></nav>
      <${Heading}>${element.name} ${element.version}</${Heading}>
      ${element.description ? html`<p class="description" id="element-description">${element.description}</p>` : ""}
      <p class="statusline" id="element-status">Status: <${Status} status=${element.status} reason=${element.status_reason} />
        ${isInstalled ? html` <span class="badge">installed</span>` : ""}</p>
      <div class="toolbar">
        ${canInstall ? html`<button type="button" class="primary" disabled=${busy} onClick=${install}>${isInstalled ? "Retry install" : "Install"}</button>` : ""}
        ${canUpgradeTo ? html`<button type="button" class="primary" disabled=${busy} onClick=${() => upgrade(element)}>Upgrade ${installed.version} to ${element.version}</button>` : ""}
        ${canUninstall ? html`<button type="button" class="danger" disabled=${busy} onClick=${() => setConfirming(true)}>Uninstall</button>` : ""}
        ${installed && !isInstalled ? html`<a href=${"#/market/e/" + installed.uuid}>installed: ${installed.version}</a>` : ""}
        <a href=${"#/k/repo/elements/" + uuid}>all fields</a>
      </div>
      ${confirming ? html`<div class="confirm" role="alertdialog" aria-labelledby="uninstall-text" onKeyDown=${(e) => e.key === "Escape" && setConfirming(false)}>
        <p id="uninstall-text">Uninstall ${element.name} ${element.version}? The resources it created are deleted.</p>
        <button type="button" class="danger" onClick=${uninstall} ref=${(b) => b && b.focus()}>Confirm uninstall</button>
        <button type="button" onClick=${() => setConfirming(false)}>Cancel</button></div>` : ""}
      <${Alert} error=${actionError} id="action-error" />

      ${isInstalled || moves.length ? html`<section class="progress" aria-labelledby="h-progress">
        <h2 id="h-progress">${done ? "Installation" : "Installation in progress"}</h2>
        <dl class="facts" aria-live="polite">
          <dt>element</dt><dd id="progress-element"><${Status} status=${element.status} reason=${element.status_reason} /></dd>
          ${em ? html`<dt>Element Manager</dt><dd id="progress-em"><a href=${"#/k/em/elements/" + em.uuid}>${em.name} ${em.version}</a> <${Status} status=${em.status} reason=${em.status_reason} /></dd>` : ""}
        </dl>
        ${resources.length ? html`<div class="scroll"><table class="list" id="progress-resources">
          <caption>Resources</caption>
          <thead><tr><th scope="col">name</th><th scope="col">link</th><th scope="col">status</th></tr></thead>
          <tbody>${resources.map((r) => html`<tr key=${r.uuid} data-uuid=${r.uuid}>
            <td>${r.resource ? html`<a href=${"#/k/" + r.resource.replace(/^\/v1\//, "")}>${r.name}</a>` : r.name}</td>
            <td><code>${r.link}</code></td>
            <td><${Status} status=${r.status} reason=${r.status_reason} /></td></tr>`)}</tbody>
        </table></div>` : ""}
        ${moves.length ? html`<ol class="events history">${moves.map((e) => html`<li key=${e.revision}>
          <span class="time">${shortTime(e.timestamp || e.at)}</span><span class="etype">${e.what}${e.name ? " " + e.name : ""}</span>
          <span>${e.old_status || "—"} → </span><${Status} status=${e.status} reason=${e.status_reason} /></li>`)}</ol>` : ""}
      </section>` : ""}

      <section aria-labelledby="h-requires"><h2 id="h-requires">Requires</h2>
        ${element.manifest === null ? html`<p class="muted">Not known until the manifest is downloaded (a lazy catalog): installing downloads it.</p>`
          : requirements.length === 0 ? html`<p class="muted" id="no-requirements">Nothing: it needs only the appliance.</p>`
          : html`<ul id="requirements">${requirements.map(([name, c]) => html`<li><a href=${"#/market?q=" + encodeURIComponent(name)}>${name}</a> <span class="constraint">${constraintText(c)}</span></li>`)}</ul>`}
      </section>
      ${creates.length ? html`<section aria-labelledby="h-creates"><h2 id="h-creates">Creates</h2>
        <ul class="creates">${creates.map(([path, name]) => html`<li><code>${path}</code> ${name}</li>`)}</ul></section>` : ""}

      <section aria-labelledby="h-versions"><h2 id="h-versions">Versions</h2>
        <div class="scroll"><table class="list" id="versions">
          <thead><tr><th scope="col">version</th><th scope="col">status</th><th scope="col">installed</th><th scope="col">recorded</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>${versions.map((v) => html`<tr key=${v.uuid} data-version=${v.version} aria-current=${v.uuid === uuid ? "page" : undefined}>
            <td><a href=${"#/market/e/" + v.uuid}>${v.version}</a>${v.development ? html` <span class="muted">(dev)</span>` : ""}</td>
            <td><${Status} status=${v.status} /></td>
            <td>${v.installation_state === "INSTALLED" ? "yes" : ""}</td>
            <td>${shortTime(v.created_at)}</td>
            <td>${isInstalled && v.uuid !== uuid && may("upgrade") ? html`<button type="button" disabled=${busy} onClick=${() => upgrade(v)}>Upgrade to ${v.version}</button>` : ""}</td>
          </tr>`)}</tbody>
        </table></div>
      </section>
    </main>`;
}
