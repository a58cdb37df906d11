// The special panels some kinds add to their generic detail page (docs/console.md,
// "Special views"): what the API can say of an item beyond its fields (a zone's answer,
// an LB's rendered routes, a node's serial console, a database's replication). The
// detail page asks panelFor(collection) and stays generic; each panel shows itself only
// when allows() grants the read it makes (readAction, in read_action.js).
import { DomainPanel } from "./dns.js";
import { LbPanel } from "./lb.js";
import { NodeConsolePanel } from "./node_console.js";
import { SqldbPanel } from "./sqldb.js";

const PANELS = new Map([
  ["/v1/dns/domains", DomainPanel],
  ["/v1/network/lb", LbPanel],
  ["/v1/compute/nodes", NodeConsolePanel],
  ["/v1/sqldb/instances", SqldbPanel],
]);

/** The panel component of a collection's items, or null. */
export function panelFor(collection) {
  return PANELS.get(collection.path) || null;
}
