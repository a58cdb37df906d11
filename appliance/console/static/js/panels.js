// The special panels some kinds add to their generic detail page (docs/console.md,
// "Special views"): what the API can say of an item beyond its fields (a zone's answer,
// an LB's rendered routes, a node's serial console, a database's replication). The
// detail page asks panelFor(collection) and stays generic; each panel shows itself only
// when allows() grants the read it makes (read_action.js). A panel's module is imported
// when a page of its kind first opens, so the overview's first load does not carry it.
import { html, useState, useEffect } from "./html.js";

/** A component that imports `load`'s module once, then renders its export `name`. */
function lazy(load, name) {
  let loaded = null;
  return function Panel(props) {
    const [Component, setComponent] = useState(() => loaded);
    useEffect(() => {
      let live = true;
      if (!Component) {
        load().then((module) => {
          loaded = module[name];
          if (live) setComponent(() => loaded);
        }, (error) => console.error(`the ${name} panel did not load`, error));
      }
      return () => { live = false; };
    }, []);
    return Component ? html`<${Component} ...${props} />` : null;
  };
}

// one wrapper per kind, made once: a new component per render would start the panel
// anew (a node's console would lose its text and follow loop at every re-render)
const PANELS = new Map([
  ["/v1/dns/domains", lazy(() => import("./dns.js"), "DomainPanel")],
  ["/v1/network/lb", lazy(() => import("./lb.js"), "LbPanel")],
  ["/v1/compute/nodes", lazy(() => import("./node_console.js"), "NodeConsolePanel")],
  ["/v1/sqldb/instances", lazy(() => import("./sqldb.js"), "SqldbPanel")],
]);

// the read actions each panel shows itself: the page offers no "Show ..." button for them
const COVERED = new Map([
  ["/v1/dns/domains", ["resolve"]],
  ["/v1/network/lb", ["routes"]],
  ["/v1/compute/nodes", ["console"]],
  ["/v1/sqldb/instances", ["replication"]],
]);

/** Whether a collection's panel already shows this action's answer. */
export function panelShows(collection, action) {
  return !action.invoke && (COVERED.get(collection.path) || []).includes(action.name);
}

/** The panel component of a collection's items, or null. */
export function panelFor(collection) {
  return PANELS.get(collection.path) || null;
}
