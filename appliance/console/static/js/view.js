// Small pieces shared by the pages: how a value, a status and an error are shown.
// Values are always text (or a link whose text is the value): never markup.
import { html } from "./html.js";
import { isReference } from "./openapi.js";

export const hashFor = (apiPath) => "#/k/" + apiPath.replace(/^\/v1\//, "");

export function Value({ cols, value }) {
  if (value === null || value === undefined) return html`<span class="muted">—</span>`;
  if (typeof value === "boolean") return String(value);
  if (isReference(cols, value)) {
    // the kind and a short uuid: the whole path is the link's target and its tooltip
    const [kind, uuid] = value.split("/").slice(-2);
    return html`<a href=${hashFor(value)} title=${value}>${kind}/${uuid.slice(0, 8)}…</a>`;
  }
  if (Array.isArray(value) && value.every((v) => typeof v !== "object" || v === null)) {
    if (value.length === 0) return html`<span class="muted">(none)</span>`;
    return html`${value.map((v, i) => html`${i ? ", " : ""}<${Value} cols=${cols} value=${v} />`)}`;
  }
  if (typeof value === "object") return html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;
  return String(value);
}

export function Status({ status, reason }) {
  if (!status) return html`<span class="muted">—</span>`;
  return html`<span class=${"status status-" + String(status).toLowerCase()}>${status}</span>${reason ? html` <span class="status-reason">${reason}</span>` : ""}`;
}

export function Alert({ error, id }) {
  if (!error) return null;
  return html`<p class="alert" role="alert" id=${id || "page-error"}>${typeof error === "string" ? error : error.message}</p>`;
}

export function shortTime(value) {
  if (!value) return "";
  const d = new Date(value);
  return isNaN(d) ? String(value) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
