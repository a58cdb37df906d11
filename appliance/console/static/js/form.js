// The create and edit forms, built from the operation's request schema: a field the API
// adds appears by itself; the API's validation message is shown beside the field it names.
import { html, useState, useEffect } from "./html.js";
import { get, post, put } from "./api.js";
import { allows, plain, deref, titleOf } from "./openapi.js";
import { Alert, hashFor } from "./view.js";
import { Breadcrumbs, Heading, titleOfItem, useTitle } from "./page.js";

function inputKind(doc, schema) {
  const s = plain(doc, schema);
  if (s.enum) return "enum";
  if (s.type === "boolean") return "boolean";
  if (s.type === "integer" || s.type === "number") return s.type;
  if (s.type === "array" && ["string", undefined].includes(plain(doc, s.items || {}).type) && !plain(doc, s.items || {}).properties) return "strings";
  if (s.type === "string") return "string";
  return "json";
}

const nullable = (doc, schema) => {
  const s = deref(doc, schema);
  return (Array.isArray(s.type) && s.type.includes("null")) || (s.anyOf || s.oneOf || []).some((a) => deref(doc, a).type === "null");
};

function display(kind, value) {
  if (value === null || value === undefined) return "";
  if (kind === "strings") return Array.isArray(value) ? value.join(", ") : String(value);
  if (kind === "json") return JSON.stringify(value, null, 2);
  return String(value);
}

export function Field({ doc, name, schema, required, error, value }) {
  const s = plain(doc, schema);
  const kind = inputKind(doc, schema);
  const id = "field-" + name;
  const hint = [s.description, kind === "strings" ? "comma-separated" : "", kind === "json" ? "JSON" : ""].filter(Boolean).join("; ");
  const described = [hint ? id + "-hint" : "", error ? "error-" + name : ""].filter(Boolean).join(" ") || undefined;
  const common = { id, name, "aria-describedby": described, "aria-invalid": error ? "true" : undefined, "aria-required": required ? "true" : undefined };
  let input;
  if (kind === "enum") {
    // uncontrolled inputs (default values): a re-render showing an error keeps what was typed
    const current = display(kind, value);
    input = html`<select ...${common}>
      ${!required || value === undefined ? html`<option value="" selected=${current === ""}>(not set)</option>` : ""}
      ${s.enum.filter((v) => v !== null).map((v) => html`<option value=${String(v)} selected=${current === String(v)}>${String(v)}</option>`)}</select>`;
  } else if (kind === "boolean" && value === undefined && s.default === undefined) {
    // a create form: the schema does not say the API's default (a vhost's `enabled` is
    // true), so an untouched field sends nothing rather than a checkbox's false
    input = html`<select ...${common}>
      <option value="" selected>(API default)</option><option value="true">true</option><option value="false">false</option></select>`;
  } else if (kind === "boolean") {
    input = html`<input type="checkbox" ...${common} defaultChecked=${value === undefined ? s.default === true : value === true} />`;
  } else if (kind === "integer" || kind === "number") {
    input = html`<input type="number" step=${kind === "integer" ? "1" : "any"} min=${s.minimum} max=${s.maximum} ...${common} defaultValue=${display(kind, value)} />`;
  } else if (kind === "json") {
    input = html`<textarea rows="4" ...${common} defaultValue=${display(kind, value)}></textarea>`;
  } else {
    const secret = /password|secret|private_key/.test(name);
    const target = referenceTarget(s);
    input = html`<input type=${secret ? "password" : "text"} autocomplete=${secret ? "new-password" : "off"} list=${target ? id + "-choices" : undefined} ...${common} defaultValue=${display(kind, value)} />
      ${target ? html`<${Choices} id=${id + "-choices"} path=${target} />` : ""}`;
  }
  return html`<div class=${"field" + (error ? " invalid" : "")} data-kind=${kind}>
    <label for=${id}>${name}${required ? html`<span class="required" aria-hidden="true"> *</span>` : ""}${required ? html`<span class="sr-only"> (required)</span>` : ""}</label>
    ${input}
    ${hint ? html`<p class="hint" id=${id + "-hint"}>${hint}</p>` : ""}
    ${error ? html`<p class="field-error" id=${"error-" + name} role="alert">${error}</p>` : ""}
  </div>`;
}

/** A reference field's collection, from its input pattern "^(/v1/<collection>/)?<uuid>$". */
function referenceTarget(schema) {
  const m = typeof schema.pattern === "string" && schema.pattern.match(/^\^\((\/v1\/[a-z_/]+)\/\)\?/);
  return m ? m[1] : null;
}

/** The referenced collection's first 200 items as suggestions (uuid, labelled by name). */
function Choices({ id, path }) {
  const [items, setItems] = useState([]);
  useEffect(() => {
    get(path + "?page_limit=200").then((rows) => Array.isArray(rows) && setItems(rows), () => {});
  }, [path]);
  return html`<datalist id=${id}>${items.map((r) => html`<option value=${r.uuid} label=${titleOfItem(r)} />`)}</datalist>`;
}

/** The body a form describes: on create the fields filled, on edit the fields changed. */
export function readForm(doc, schema, form, mode, initial) {
  const body = {};
  const errors = {};
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    const el = form.elements[name];
    if (!el) continue;
    const kind = inputKind(doc, prop);
    const threeState = kind === "boolean" && el.tagName === "SELECT";
    if (threeState) {
      if (el.value !== "") body[name] = el.value === "true";
      continue;
    }
    const raw = kind === "boolean" ? el.checked : el.value;
    if (mode === "edit") {
      const before = kind === "boolean" ? initial[name] === true : display(kind, initial[name]);
      if (raw === before) continue;
    }
    if (kind !== "boolean" && raw.trim() === "") {
      if (mode === "edit" && nullable(doc, prop)) body[name] = null;
      else if (mode === "edit") body[name] = "";
      continue;
    }
    try {
      if (kind === "boolean") body[name] = raw;
      else if (kind === "integer" || kind === "number") body[name] = Number(raw);
      else if (kind === "strings") body[name] = raw.split(",").map((v) => v.trim()).filter(Boolean);
      else if (kind === "json") body[name] = JSON.parse(raw);
      else if (kind === "enum") {
        const option = plain(doc, prop).enum.find((v) => String(v) === raw);
        body[name] = option === undefined ? raw : option;
      } else body[name] = raw;
    } catch (e) {
      errors[name] = `${name}: is not valid JSON (${e.message})`;
    }
  }
  return { body, errors };
}

/**
 * The form field a 400/403 message is about, or null. The API names it first:
 * "<field>[.<inner path>]: <what is wrong>" (appliance/api/validation.py describe) and
 * "<field> is read-only" (appliance/api/resource.py).
 */
export function fieldOfMessage(message, fields) {
  const patterns = [/^([A-Za-z_][A-Za-z0-9_]*)(?:[.[][^:]*)?: /, /^([A-Za-z_][A-Za-z0-9_]*) is read-only/, /^([A-Za-z_][A-Za-z0-9_]*) /];
  for (const p of patterns) {
    const m = String(message || "").match(p);
    if (m && fields.includes(m[1])) return m[1];
  }
  return null;
}

export function FormPage({ doc, cols, session, collection, apiPath, mode }) {
  const schema = (mode === "create" ? collection.createSchema : collection.updateSchema) || { properties: {} };
  const [item, setItem] = useState(mode === "create" ? {} : null);
  const [errors, setErrors] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  const op = mode === "create" ? collection.create : collection.update;
  const permitted = op && allows(session.permissions, op["x-permission"]);
  const title = mode === "create" ? `Create in ${titleOf(collection.path)}` : `Edit ${titleOfItem(item) || apiPath.split("/").pop()}`;
  useTitle(title);
  useEffect(() => {
    if (mode === "edit") get(apiPath).then(setItem, setFormError);
  }, [apiPath]);

  // the optional client-chosen uuid last: it is rarely what a person wants to type
  const fields = Object.keys(schema.properties || {}).sort((a, b) => (a === "uuid") - (b === "uuid"));
  const required = schema.required || [];
  // a new resource of a project-scoped session belongs to that project unless changed
  const initial = mode === "create" && session.project_id ? { project_id: session.project_id } : item;
  const submit = async (event) => {
    event.preventDefault();
    const { body, errors: found } = readForm(doc, schema, event.target, mode, item || {});
    setErrors(found);
    setFormError(null);
    if (Object.keys(found).length) return;
    setBusy(true);
    try {
      const saved = mode === "create" ? await post(apiPath, body) : await put(apiPath, body);
      location.hash = hashFor(mode === "create" ? `${apiPath}/${saved.uuid}` : apiPath);
    } catch (e) {
      const field = fieldOfMessage(e.message, fields);
      if (field && (e.status === 400 || e.status === 403 || e.status === 409)) {
        setErrors({ [field]: e.message });
        setTimeout(() => document.getElementById("field-" + field)?.focus(), 0);
      } else setFormError(e);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <main id="main" tabindex="-1">
      <${Breadcrumbs} cols=${cols} apiPath=${mode === "create" ? apiPath + "/new" : apiPath + "/edit"} />
      <${Heading}>${title}</${Heading}>
      ${!permitted ? html`<p class="alert" role="alert">Your session may not ${mode} here.</p>` : ""}
      <${Alert} error=${formError} id="form-error" />
      ${item && permitted ? html`<form class="resource" onSubmit=${submit} novalidate>
        <p class="hint">Fields marked * are required. Read-only fields (status, timestamps, …) are not in this form: the API sets them.</p>
        ${fields.map((name) => html`<${Field} key=${name} doc=${doc} name=${name} schema=${schema.properties[name]} required=${required.includes(name)} error=${errors[name]} value=${initial[name]} />`)}
        <p class="buttons"><button type="submit" disabled=${busy}>${mode === "create" ? "Create" : "Save"}</button>
          <a href=${hashFor(mode === "create" ? apiPath : apiPath)}>Cancel</a></p>
      </form>` : ""}
    </main>`;
}
