// What the console knows of the API comes from GET /v1/openapi.json: the collections,
// their item, create and update schemas, their actions and the permission each
// operation needs (x-permission). A new field or kind appears here without a change.

const LIST_MARK = "page_limit"; // list routes, and only they, take the paging parameters

export function allows(permissions, xPermission) {
  // The API's rule (appliance/iam/permissions.py grants + Principal.allows), mirrored:
  // "public" and "authenticated" need nothing more than the session; "a | b" means any
  // of them; a granted name matches a required one when each of its three dot-separated
  // parts equals the required part or is "*" ("*" never matches part of a word).
  if (!xPermission) return false;
  return xPermission.split(" | ").some((required) => {
    if (required === "public" || required === "authenticated") return true;
    const r = required.split(".");
    return permissions.some((granted) => {
      const g = granted.split(".");
      return g.length === 3 && r.length === 3 && g.every((part, i) => part === "*" || part === r[i]);
    });
  });
}

export function deref(doc, schema) {
  let s = schema || {};
  for (let i = 0; s && s.$ref && i < 10; i++) {
    s = s.$ref.replace(/^#\//, "").split("/").reduce((o, k) => (o ? o[k] : undefined), doc);
  }
  return s || {};
}

/** A property's schema without its null alternative: {type, enum, format, ...}. */
export function plain(doc, schema) {
  let s = deref(doc, schema);
  const alternatives = s.anyOf || s.oneOf;
  if (alternatives) {
    const rest = alternatives.map((a) => deref(doc, a)).filter((a) => a.type !== "null");
    s = { ...(rest.length === 1 ? rest[0] : { type: "string" }), description: s.description || (rest[0] || {}).description };
  }
  if (Array.isArray(s.type)) {
    const types = s.type.filter((t) => t !== "null");
    s = { ...s, type: types.length === 1 ? types[0] : "string" };
  }
  if (!s.type && s.enum) s = { ...s, type: "string" };
  return s;
}

const template = (path) => new RegExp("^" + path.replace(/\{[^}]+\}/g, "[^/]+") + "$");
const shape = (path) => path.replace(/\{[^}]+\}/g, "{}");

export function titleOf(path) {
  return path.replace(/^\/v1\/[^/]+\/?/, "").split("/").filter((p) => !p.startsWith("{")).join(" ").replace(/_/g, " ") || path.split("/")[2];
}

/** The collections of the document, each with its operations and schemas. */
export function collections(doc) {
  const out = [];
  const seen = new Map(); // item schema -> first top-level collection (aliases left out)
  const paths = Object.keys(doc.paths).filter((p) => p.startsWith("/v1/")).sort((a, b) => a.length - b.length || a.localeCompare(b));
  for (const path of paths) {
    const ops = doc.paths[path];
    if (!ops.get || !(ops.get.parameters || []).some((p) => p.name === LIST_MARK)) continue;
    const listSchema = ((ops.get.responses["200"] || {}).content || {})["application/json"];
    // a list answers an array (one alias answers {"versions": [...]}: not a list page)
    if (!listSchema || deref(doc, listSchema.schema).type !== "array") continue;
    const items = deref(doc, listSchema.schema).items || {};
    const itemRef = items.$ref || null;
    const nested = path.includes("{");
    if (!nested && itemRef) {
      if (seen.has(itemRef)) continue;
      seen.set(itemRef, path);
    }
    const itemPath = Object.keys(doc.paths).find((p) => p.startsWith(path + "/{") && p.split("/").length === path.split("/").length + 1 && !p.includes("/actions/"));
    const item = itemPath ? doc.paths[itemPath] : {};
    const actions = Object.keys(doc.paths)
      .filter((p) => itemPath && p.startsWith(itemPath + "/actions/"))
      .map((p) => {
        const [, name, invoke] = p.slice(itemPath.length).match(/^\/actions\/([^/]+)(\/invoke)?$/) || [];
        if (!name) return null;
        const op = invoke ? doc.paths[p].post : doc.paths[p].get;
        return op && { name, invoke: !!invoke, permission: op["x-permission"], summary: op.summary, body: op.requestBody && deref(doc, (op.requestBody.content["application/json"] || {}).schema) };
      })
      .filter(Boolean);
    const body = (op) => op && op.requestBody && deref(doc, (op.requestBody.content["application/json"] || Object.values(op.requestBody.content)[0]).schema);
    const service = path.split("/")[2];
    out.push({
      path, itemPath, nested, service,
      title: titleOf(path),
      regex: template(path), itemRegex: itemPath && template(itemPath),
      list: ops.get, create: ops.post, read: item.get, update: item.put, remove: item.delete,
      itemSchema: deref(doc, items),
      createSchema: body(ops.post), updateSchema: body(item.put),
      filters: (ops.get.parameters || []).filter((p) => p.in === "query" && p.description && p.description.startsWith("equality")).map((p) => p.name),
      actions,
      children: [],
    });
  }
  for (const c of out) {
    if (!c.nested) continue;
    const parentItem = c.path.replace(/\/[^/]+$/, "");
    const parent = out.find((p) => p.itemPath && shape(p.itemPath) === shape(parentItem));
    if (parent) parent.children.push(c);
  }
  return out;
}

/** The collection (and whether the item) an API path belongs to. */
export function locate(cols, apiPath) {
  for (const c of cols) {
    if (c.regex.test(apiPath)) return { collection: c, item: false };
    if (c.itemRegex && c.itemRegex.test(apiPath)) return { collection: c, item: true };
  }
  return null;
}

/** A value that is the path of an item the console can show. */
export function isReference(cols, value) {
  return typeof value === "string" && value.startsWith("/v1/") && cols.some((c) => c.itemRegex && c.itemRegex.test(value));
}
