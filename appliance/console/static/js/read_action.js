// What the special panels need of the OpenAPI document: a read action of an item (GET
// .../actions/<name>) when the session may call it, and the query parameters it takes.
import { allows } from "./openapi.js";

/** The GET action `name` of the collection when the session may call it, else null. */
export function readAction(session, collection, name) {
  const action = collection.actions.find((a) => a.name === name && !a.invoke);
  return action && allows(session.permissions, action.permission) ? action : null;
}

/** The query parameters the action's operation declares. */
export function actionParameters(doc, collection, name) {
  const path = collection.itemPath && collection.itemPath + "/actions/" + name;
  const op = path && doc.paths[path] && doc.paths[path].get;
  return ((op && op.parameters) || []).filter((p) => p.in === "query");
}
