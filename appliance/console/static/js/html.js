// htm bound to Preact's h: templates become elements without a build step and without
// eval (the CSP has no 'unsafe-eval'). Every interpolated value becomes a text node or
// an attribute value, never markup.
import { h, render, Fragment } from "../vendor/preact.mjs";
import htm from "../vendor/htm.mjs";

export const html = htm.bind(h);
export { render, Fragment };
export * from "../vendor/preact-hooks.mjs";
