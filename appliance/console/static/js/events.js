// One EventSource on /v1/events for the whole console, shared by every page that shows
// live state: a browser opens at most six HTTP/1.1 connections to one host, so a stream
// per page or per filter would starve the API calls. Each subscriber filters the events
// itself (by path, kind or uuid). The stream authenticates by the session cookie; the
// browser reconnects by itself with Last-Event-ID, so nothing is missed across a restart
// of the API. No page polls.

let source = null;
const subscribers = new Set();
const statusListeners = new Set();
let lost = () => {};
let state = "closed";

function emit(event) {
  for (const fn of subscribers) {
    try { fn(event); } catch (error) { console.error(error); }
  }
}

function setState(next) {
  state = next;
  for (const fn of statusListeners) fn(state);
}

export function connect(onLost) {
  lost = onLost || lost;
  if (source) return;
  source = new EventSource("/v1/events", { withCredentials: true });
  setState("connecting");
  source.onopen = () => setState("live");
  source.addEventListener("lifecycle", (message) => {
    let data;
    try { data = JSON.parse(message.data); } catch { return; }
    emit(data);
  });
  // the window moved past us: every subscriber reads its resources again
  source.addEventListener("resync", () => emit({ type: "resync" }));
  source.onerror = () => {
    if (source && source.readyState === EventSource.CLOSED) {
      // refused (a 401 once the session ended, or a 503): ask the session what happened
      setState("closed");
      source = null;
      lost();
    } else {
      setState("reconnecting");
    }
  };
}

export function disconnect() {
  if (source) source.close();
  source = null;
  setState("closed");
}

/** fn(event) for each lifecycle event (and {type: "resync"}); returns the unsubscribe. */
export function subscribe(fn) {
  subscribers.add(fn);
  return () => subscribers.delete(fn);
}

/** fn(state) now and at each change: "connecting", "live", "reconnecting", "closed". */
export function onStreamState(fn) {
  statusListeners.add(fn);
  fn(state);
  return () => statusListeners.delete(fn);
}

/** The body of GET /v1/events?follow=false: the latest entries the caller may see. */
export function parseEventStream(text) {
  const events = [];
  for (const block of text.split(/\n\n/)) {
    const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
    const type = (block.match(/^event:\s*(.*)$/m) || [])[1];
    if (data && type === "lifecycle") {
      try { events.push(JSON.parse(data)); } catch { /* a torn block: skip */ }
    }
  }
  return events;
}

/** The events a page shows, newest first: those the stream brought (`live`) with those of a
 * follow=false answer (`text`), each once. The answer can arrive after a live event (under
 * load): replacing the list with it would drop that event. */
export function withPastEvents(live, text, limit) {
  const seen = new Set(live.map((e) => e.revision));
  return [...live, ...parseEventStream(text).filter((e) => !seen.has(e.revision))]
    .sort((a, b) => b.revision - a.revision).slice(0, limit);
}
