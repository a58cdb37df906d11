// A node's serial console log, following: GET .../actions/console without an offset for
// the tail, then again from each answer's next_offset, appended. The API answers at once
// (no long poll; a console has no event), so following is a paced loop, run only while
// the panel is open, the page shown and the tab visible: a hidden tab or a closed panel
// asks nothing. A log written faster than one answer carries is read at once until
// caught up; a 403 or 404 stops the loop. An answer with `reset` (the node was made
// again, its log started anew) replaces the text. The view keeps to the bottom unless
// the user scrolled up.
import { html, useState, useEffect, useRef } from "./html.js";
import { get } from "./api.js";
import { Alert } from "./view.js";
import { readAction } from "./read_action.js";

const PACE_MS = 1000;            // between asks while following
const KEEP_CHARS = 512 * 1024;   // the browser keeps the log's last half MiB

export function NodeConsolePanel({ session, collection, apiPath }) {
  if (!readAction(session, collection, "console")) return null;
  return html`<${ConsoleLog} key=${apiPath} apiPath=${apiPath} />`;
}

function ConsoleLog({ apiPath }) {
  const [open, setOpen] = useState(true);
  const [visible, setVisible] = useState(document.visibilityState === "visible");
  const [text, setText] = useState("");
  const [size, setSize] = useState(null);
  const [error, setError] = useState(null);
  const [following, setFollowing] = useState(false);
  const next = useRef(null);          // next_offset of the last answer; null: ask the tail
  const pre = useRef(null);
  const stick = useRef(true);         // at the bottom: new text keeps it there

  useEffect(() => {
    const onVisibility = () => setVisible(document.visibilityState === "visible");
    document.addEventListener("visibilitychange", onVisibility);
    return () => document.removeEventListener("visibilitychange", onVisibility);
  }, []);

  useEffect(() => {
    if (!open || !visible) { setFollowing(false); return; }
    let stopped = false;
    let timer = null;
    const ask = async () => {
      let behind = false;   // more is written than one answer carries: ask again at once
      try {
        const url = apiPath + "/actions/console" + (next.current === null ? "" : "?offset=" + next.current);
        const answer = await get(url);
        if (stopped) return;
        const reset = answer.reset || next.current === null;
        next.current = answer.next_offset;
        setSize(answer.size);
        setError(null);
        if (reset || answer.log) setText((old) => ((reset ? "" : old) + answer.log).slice(-KEEP_CHARS));
        behind = answer.log.length > 0 && answer.next_offset < answer.size;
      } catch (e) {
        if (stopped) return;
        setError(e);
        // the node is gone or the session may no longer read it: asking again is useless
        if (e.status === 403 || e.status === 404) { setFollowing(false); return; }
      }
      if (!stopped) timer = setTimeout(ask, behind ? 0 : PACE_MS);
    };
    setFollowing(true);
    ask();
    return () => { stopped = true; clearTimeout(timer); setFollowing(false); };
  }, [apiPath, open, visible]);

  useEffect(() => {
    const el = pre.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  const onScroll = () => {
    const el = pre.current;
    if (el) stick.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
  };

  return html`<section class="panel" aria-labelledby="h-console">
    <details class="console" open=${open} onToggle=${(e) => setOpen(e.currentTarget.open)}>
      <summary><h2 id="h-console">Serial console</h2>
        <span class="follow" id="console-follow">${following ? "following" : "paused"}</span>
        ${size !== null ? html` <span class="muted">${size} bytes</span>` : ""}</summary>
      <${Alert} error=${error} id="console-error" />
      <pre class="text console-log" ref=${pre} onScroll=${onScroll} tabindex="0" aria-label="Serial console log" aria-live="off">${text}</pre>
      ${text ? "" : html`<p class="muted" id="console-empty">The log is empty: nothing written on the node's serial console yet.</p>`}
    </details>
  </section>`;
}
