// Every call of the console to the API: same origin, the session cookie (HttpOnly, so
// never read here), JSON both ways, and on writes the X-CSRF-Token header echoing the
// appliance_csrf cookie (docs/console.md). Errors come back as ApiError carrying the
// conventions' body {type, code, message}.

export class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.message || body.error_description)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

let unauthorized = () => {};

/** Called with the message of any 401 but the login's own: the session is over. */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function csrfToken() {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === "appliance_csrf") return decodeURIComponent(rest.join("="));
  }
  return "";
}

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);

// cache: "no-store" for the API's data (always read afresh); "no-cache" for what carries
// an ETag and rarely changes (the OpenAPI document): kept, and revalidated by a 304
export async function request(method, path, body, cache = "no-store") {
  const headers = { Accept: "application/json" };
  if (!SAFE.has(method)) headers["X-CSRF-Token"] = csrfToken();
  const init = { method, headers, credentials: "same-origin", cache };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, { message: `the appliance did not answer (${error.message})` });
  }
  const type = response.headers.get("Content-Type") || "";
  let data = null;
  if (response.status !== 204) {
    data = type.includes("json") ? await response.json().catch(() => null) : await response.text();
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data && typeof data === "object" ? data : { message: String(data || response.statusText) });
    if (response.status === 401 && !path.startsWith("/console/session")) unauthorized(error.message);
    throw error;
  }
  return { data, headers: response.headers, status: response.status };
}

export const get = (path) => request("GET", path).then((r) => r.data);
export const getRevalidated = (path) => request("GET", path, undefined, "no-cache").then((r) => r.data);
export const post = (path, body) => request("POST", path, body ?? {}).then((r) => r.data);
export const put = (path, body) => request("PUT", path, body).then((r) => r.data);
export const del = (path) => request("DELETE", path).then((r) => r.data);
