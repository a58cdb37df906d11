// The generic pages of every collection in the OpenAPI document, shared parts: an item's
// title, the page title, the focused heading and the breadcrumbs.
import { html, useEffect, useRef } from "./html.js";
import { hashFor } from "./view.js";

export const titleOfItem = (item) => (item && (item.name || item.username || item.title || item.uuid)) || "";

export function useTitle(text) {
  useEffect(() => { document.title = `${text} · appliance console`; }, [text]);
}

export function Heading({ children }) {
  const ref = useRef(null);
  // a new page takes the focus to its heading, so that a keyboard or screen reader user
  // starts there and not at the end of the previous page
  useEffect(() => { ref.current && ref.current.focus(); }, []);
  return html`<h1 tabindex="-1" ref=${ref}>${children}</h1>`;
}

export function Breadcrumbs({ cols, apiPath }) {
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
