// A DNS domain's panel: its records as a table and the answer the built-in server gives
// for a name (GET .../actions/resolve, one real query to the running server), so that
// what clients get, including what the daemon has not loaded yet, is one click away.
import { html, useState, useEffect } from "./html.js";
import { get } from "./api.js";
import { allows, plain } from "./openapi.js";
import { subscribe } from "./events.js";
import { Alert, hashFor } from "./view.js";
import { readAction, actionParameters } from "./read_action.js";
import { fieldOfMessage } from "./form.js";

/** What a record says, whatever its type: an address, a text, a host or the SOA's numbers. */
export function recordValue(record) {
  const r = record.record || {};
  if (r.address !== undefined) return r.address;
  if (r.content !== undefined) return r.content;
  if (r.primary_dns !== undefined) return [r.primary_dns, r.serial, r.refresh, r.retry, r.expire, r.ttl].join(" ");
  const rest = Object.entries(r).filter(([k]) => k !== "kind" && k !== "name");
  return rest.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
}

export function DomainPanel({ doc, cols, session, collection, apiPath, item }) {
  const recordsCol = collection.children.find((c) => c.path.endsWith("/records"));
  const canList = recordsCol && allows(session.permissions, recordsCol.list["x-permission"]);
  const resolve = readAction(session, collection, "resolve");
  if (!canList && !resolve) return null;
  return html`
    ${canList ? html`<${Records} apiPath=${apiPath} projectId=${item.project_id} />` : ""}
    ${resolve ? html`<${Resolve} doc=${doc} collection=${collection} apiPath=${apiPath} zone=${item.name} />` : ""}`;
}

function Records({ apiPath, projectId }) {
  const [records, setRecords] = useState(null);
  const [error, setError] = useState(null);
  const [reload, setReload] = useState(0);
  useEffect(() => {
    let live = true;
    get(apiPath + "/records").then((rows) => live && (setRecords(rows), setError(null)), (e) => live && setError(e));
    return () => { live = false; };
  }, [apiPath, reload]);
  // a nested item's event has no path (nor its parent): any record event of the domain's
  // project reads the table again
  useEffect(() => subscribe((event) => {
    if (event.type === "resync" || (event.kind === "dns_records" && (event.project_id ?? projectId) === projectId)) setReload((n) => n + 1);
  }), [apiPath, projectId]);
  const sorted = (records || []).slice().sort((a, b) => ((a.record || {}).name || "").localeCompare((b.record || {}).name || "") || a.type.localeCompare(b.type));
  return html`<section class="panel" aria-labelledby="h-records">
    <h2 id="h-records">Records</h2>
    <${Alert} error=${error} id="records-error" />
    ${records ? records.length ? html`<div class="scroll"><table class="records">
      <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">TTL</th><th scope="col">Value</th></tr></thead>
      <tbody>${sorted.map((r) => html`<tr key=${r.uuid} class=${r.disabled ? "disabled" : ""}>
        <th scope="row"><a href=${hashFor(apiPath + "/records/" + r.uuid)}>${(r.record || {}).name}</a>${r.disabled ? html` <span class="muted">(disabled)</span>` : ""}</th>
        <td>${r.type}</td><td>${r.ttl ?? ""}</td><td class="value">${recordValue(r)}</td></tr>`)}</tbody>
    </table></div>` : html`<p>No records.</p>` : error ? "" : html`<p>Loading…</p>`}
  </section>`;
}

function Resolve({ doc, collection, apiPath, zone }) {
  const parameters = actionParameters(doc, collection, "resolve");
  const typeParam = parameters.find((p) => p.name === "type");
  const types = (typeParam && plain(doc, typeParam.schema).enum) || ["A"];
  const [answer, setAnswer] = useState(null);
  const [errors, setErrors] = useState({});
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const name = String(form.get("name") || "").trim();
    setErrors({}); setError(null); setAnswer(null);
    if (!name) { setErrors({ name: "name: give the full name to ask" }); return; }
    setBusy(true);
    try {
      setAnswer(await get(`${apiPath}/actions/resolve?` + new URLSearchParams({ name, type: form.get("type") || "A" })));
    } catch (e) {
      // the API's message naming a parameter goes beside it, as in the forms
      const field = e.status === 400 && fieldOfMessage(e.message, ["name", "type"]);
      if (field) setErrors({ [field]: e.message });
      else setError(e);
    } finally {
      setBusy(false);
    }
  };
  const described = (name) => (errors[name] ? "resolve-error-" + name : undefined);
  return html`<section class="panel" aria-labelledby="h-resolve">
    <h2 id="h-resolve">Resolve</h2>
    <p class="hint">Asks the built-in DNS server what it answers now for a name in ${zone}.</p>
    <form class="resolve" onSubmit=${submit} aria-label="Resolve a name">
      <div class="field">
        <label for="resolve-name">name</label>
        <input id="resolve-name" name="name" type="text" autocomplete="off" placeholder=${"www." + zone}
          aria-invalid=${errors.name ? "true" : undefined} aria-describedby=${described("name")} />
        ${errors.name ? html`<span class="error" role="alert" id="resolve-error-name">${errors.name}</span>` : ""}
      </div>
      <div class="field">
        <label for="resolve-type">type</label>
        <select id="resolve-type" name="type" aria-invalid=${errors.type ? "true" : undefined} aria-describedby=${described("type")}>
          ${types.map((t) => html`<option value=${t} selected=${t === ((typeParam && typeParam.schema.default) || "A")}>${t}</option>`)}</select>
        ${errors.type ? html`<span class="error" role="alert" id="resolve-error-type">${errors.type}</span>` : ""}
      </div>
      <p><button type="submit" disabled=${busy}>Resolve</button></p>
    </form>
    <${Alert} error=${error} id="resolve-error" />
    ${answer ? html`<div class="answer" aria-live="polite">
      <dl class="facts">
        <dt>rcode</dt><dd id="resolve-rcode">${answer.rcode}</dd>
        <dt>authoritative</dt><dd>${String(answer.authoritative)}</dd>
        <dt>transport</dt><dd>${answer.transport}</dd>
        <dt>ms</dt><dd>${answer.elapsed_ms}</dd>
        <dt>server</dt><dd>${answer.server}</dd>
      </dl>
      ${[["answer", "Answer"], ["authority", "Authority"]].map(([key, title]) => (answer[key] || []).length ? html`<table class=${"rrs rrs-" + key}>
        <caption>${title}</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">TTL</th><th scope="col">Data</th></tr></thead>
        <tbody>${answer[key].map((rr) => html`<tr><td>${rr.name}</td><td>${rr.type}</td><td>${rr.ttl}</td><td class="value">${rr.data}</td></tr>`)}</tbody>
      </table>` : "")}
      ${(answer.answer || []).length ? "" : html`<p class="muted">No answer records.</p>`}
    </div>` : ""}
  </section>`;
}
