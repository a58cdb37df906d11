// The console's entry: the session, the hash router and the shell (header, navigation,
// main). Routes: #/login, #/ (overview), #/k/<API path after /v1/> (a list or an item),
// .../new (create form), .../<uuid>/edit (edit form). docs/console.md.
import { html, render, useState, useEffect, useCallback } from "./html.js";
import { request, get, getRevalidated, onUnauthorized, ApiError, csrfToken } from "./api.js";
import { collections, allows, locate } from "./openapi.js";
import { connect, disconnect, onStreamState } from "./events.js";
import { Alert } from "./view.js";
import { Overview } from "./overview.js";
import { ListPage } from "./list.js";
import { DetailPage } from "./detail.js";
import { FormPage } from "./form.js";

// pages of their own, loaded when first opened: the overview's first load does not carry them
function Lazy({ load, name, ...props }) {
  const [page, setPage] = useState(null);
  useEffect(() => { load().then((m) => setPage(() => m[name]), (e) => setPage(() => () => html`<main id="main"><h1>The page cannot load</h1><${Alert} error=${e} /></main>`)); }, []);
  return page ? html`<${page} ...${props} />` : html`<main id="main"><p>Loading…</p></main>`;
}
const auditPermission = (doc) => ((doc.paths["/v1/audit/"] || doc.paths["/v1/audit"] || {}).get || {})["x-permission"];

function parseHash() {
  const raw = decodeURIComponent(location.hash.replace(/^#/, "")) || "/";
  const [path, query = ""] = raw.split("?");
  return { path: path || "/", query: new URLSearchParams(query), raw };
}

function Login({ message, onLoggedIn }) {
  const [error, setError] = useState(message || null);
  const [busy, setBusy] = useState(false);
  useEffect(() => { document.title = "Log in · appliance console"; }, []);
  const submit = async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    setBusy(true);
    try {
      const { data } = await request("POST", "/console/session", { username: form.get("username"), password: form.get("password") });
      onLoggedIn(data);
    } catch (e) {
      setError(e.status === 429 ? `${e.message} (too many attempts: wait a little)` : e.message);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <main id="main" class="login">
      <h1>Log in</h1>
      <${Alert} error=${error} id="login-error" />
      <form onSubmit=${submit}>
        <p><label for="login-username">Username</label>
          <input id="login-username" name="username" autocomplete="username" required /></p>
        <p><label for="login-password">Password</label>
          <input id="login-password" name="password" type="password" autocomplete="current-password" required /></p>
        <p><button type="submit" disabled=${busy}>Log in</button></p>
      </form>
    </main>`;
}

function Header({ name, session, onSwitch, onLogout }) {
  const [stream, setStream] = useState("connecting");
  useEffect(() => onStreamState(setStream), []);
  const projects = session.projects || [];
  return html`
    <header class="top">
      <a class="brand" href="#/">${name}</a>
      <span class=${"stream stream-" + stream} title="live updates">${stream === "live" ? "live" : stream}</span>
      <span class="who">${session.user.username}</span>
      ${projects.length > 1 ? html`
        <label class="switch">Project
          <select name="project" value=${session.project_id || ""} onChange=${(e) => onSwitch(e.target.value || null)}>
            <option value="">(no project: unscoped)</option>
            ${projects.map((p) => html`<option value=${p.uuid}>${p.name}</option>`)}
          </select>
        </label>` : html`<span class="project">Project: ${(projects.find((p) => p.uuid === session.project_id) || { name: "none (unscoped)" }).name}</span>`}
      <button type="button" onClick=${onLogout}>Log out</button>
    </header>`;
}

function Navigation({ doc, cols, session, current }) {
  const groups = {};
  for (const c of cols) {
    if (c.nested || !allows(session.permissions, c.list["x-permission"])) continue;
    (groups[c.service] = groups[c.service] || []).push(c);
  }
  return html`
    <nav aria-label="Resources" class="side">
      <ul class="group">
        <li><a href="#/" aria-current=${current === "/" ? "page" : undefined}>Overview</a></li>
        ${cols.some((c) => c.path === "/v1/repo/elements" && allows(session.permissions, c.list["x-permission"])) ? html`<li><a href="#/market" aria-current=${current === "/market" || current.startsWith("/market/") ? "page" : undefined}>Marketplace</a></li>` : ""}
        ${allows(session.permissions, auditPermission(doc)) ? html`<li><a href="#/audit" aria-current=${current === "/audit" ? "page" : undefined}>Audit trail</a></li>` : ""}
      </ul>
      ${Object.keys(groups).sort().map((service) => html`<div class="group">
        <h2 id=${"nav-" + service}>${service}</h2>
        <ul aria-labelledby=${"nav-" + service}>
          ${groups[service].map((c) => {
            const href = "#/k/" + c.path.replace(/^\/v1\//, "");
            const here = current === href.slice(1) || current.startsWith(href.slice(1) + "/");
            return html`<li><a href=${href} aria-current=${here ? "page" : undefined}>${c.title}</a></li>`;
          })}
        </ul></div>`)}
    </nav>`;
}

function Page({ route, doc, cols, session }) {
  if (route.path === "/") return html`<${Overview} doc=${doc} cols=${cols} session=${session} />`;
  if (route.path === "/market" || route.path.startsWith("/market/")) return html`<${Lazy} key="market" load=${() => import("./market.js")} name="MarketPage" cols=${cols} session=${session} route=${route} />`;
  if (route.path === "/audit") return html`<${Lazy} load=${() => import("./audit.js")} name="AuditPage" key=${route.raw} doc=${doc} session=${session} query=${route.query} />`;
  if (route.path.startsWith("/k/")) {
    let apiPath = "/v1/" + route.path.slice(3).replace(/\/+$/, "");
    let mode = null;
    if (apiPath.endsWith("/new")) { mode = "create"; apiPath = apiPath.slice(0, -4); }
    else if (apiPath.endsWith("/edit")) { mode = "edit"; apiPath = apiPath.slice(0, -5); }
    const where = locate(cols, apiPath);
    if (where && mode === "create" && !where.item)
      return html`<${FormPage} key=${route.raw} cols=${cols} doc=${doc} session=${session} collection=${where.collection} apiPath=${apiPath} mode="create" />`;
    if (where && mode === "edit" && where.item)
      return html`<${FormPage} key=${route.raw} cols=${cols} doc=${doc} session=${session} collection=${where.collection} apiPath=${apiPath} mode="edit" />`;
    if (where && !mode && !where.item)
      return html`<${ListPage} key=${route.raw} cols=${cols} doc=${doc} session=${session} collection=${where.collection} apiPath=${apiPath} query=${route.query} />`;
    if (where && !mode && where.item)
      return html`<${DetailPage} key=${route.raw} cols=${cols} doc=${doc} session=${session} collection=${where.collection} apiPath=${apiPath} />`;
  }
  return html`<main id="main"><h1>Not found</h1><p>The console has no page at ${route.raw}.</p><p><a href="#/">Overview</a></p></main>`;
}

function App() {
  const [route, setRoute] = useState(parseHash());
  const [session, setSession] = useState(undefined); // undefined: asking; null: none
  const [message, setMessage] = useState(null);
  const [doc, setDoc] = useState(null);
  const [name, setName] = useState("appliance");
  const [fatal, setFatal] = useState(null);
  const [generation, setGeneration] = useState(0); // a project switch re-reads every page

  useEffect(() => {
    const changed = () => setRoute(parseHash());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);

  const ended = useCallback((text) => {
    disconnect();
    setSession(null);
    setMessage(text || "Your session has ended: log in again.");
  }, []);

  useEffect(() => {
    onUnauthorized((text) => ended(`Your session has ended (${text}): log in again.`));
    get("/").then((root) => root && root.name && setName(root.name), () => {});
    // no CSRF cookie: no session was opened in this browser (both cookies come and go
    // together), so straight to the login page without asking
    if (!csrfToken()) { setSession(null); return; }
    request("GET", "/console/session").then((r) => setSession(r.data), (e) => {
      if (e.status === 401) setSession(null);
      else setFatal(e);
    });
  }, []);

  useEffect(() => {
    if (!session) return;
    if (!doc) getRevalidated("/v1/openapi.json").then(setDoc, setFatal);
    // a stream refused once the session is over: ask the session, whose 401 logs out
    connect(() => request("GET", "/console/session").catch((e) => e.status === 401 && ended()));
  }, [session]);

  const back = route.path === "/login" ? null : route.raw;
  useEffect(() => {
    if (session === null && route.path !== "/login") {
      sessionStorage.setItem("console.after-login", back || "/");
      location.hash = "#/login";
    }
  }, [session, route.path]);

  if (fatal) return html`<main id="main"><h1>The console cannot start</h1><${Alert} error=${fatal} /></main>`;
  if (session === undefined) return html`<main id="main"><h1>appliance console</h1><p>Loading…</p></main>`;
  if (session === null || route.path === "/login") {
    if (session && route.path === "/login") { location.hash = "#/"; return null; }
    return html`<${Login} message=${message} onLoggedIn=${(s) => {
      setMessage(null);
      setSession(s);
      const after = sessionStorage.getItem("console.after-login") || "/";
      sessionStorage.removeItem("console.after-login");
      location.hash = "#" + (after === "/login" ? "/" : after);
    }} />`;
  }
  if (!doc) return html`<main id="main"><h1>appliance console</h1><p>Loading the API description…</p></main>`;
  const cols = collections(doc);
  const switchProject = async (project) => {
    try {
      const { data } = await request("PUT", "/console/session", { project });
      disconnect();
      setSession(data);
      setGeneration((g) => g + 1);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) alert(e.message);
    }
  };
  const logout = async () => {
    try { await request("DELETE", "/console/session"); } catch { /* the cookie goes either way */ }
    disconnect();
    setSession(null);
    setMessage("You have logged out.");
  };
  return html`
    <a class="skip" href="#main" onClick=${(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>Skip to content</a>
    <${Header} name=${name} session=${session} onSwitch=${switchProject} onLogout=${logout} />
    <div class="body">
      <${Navigation} doc=${doc} cols=${cols} session=${session} current=${route.path} />
      <${Page} key=${generation} route=${route} doc=${doc} cols=${cols} session=${session} />
    </div>`;
}

const root = document.getElementById("app");
root.textContent = ""; // the "Loading" placeholder: Preact renders into an empty element
render(html`<${App} />`, root);
