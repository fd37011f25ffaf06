// Log in with an API token (the form posts to /ui/login: the server sets the session cookie
// and sends the browser on), or with a one-time link made on the server's machine.

import { h, clear } from "../dom.js";

export function mount(main, { query }) {
  const next = safeNext(query.get("next"));
  const error = query.get("error");
  clear(main,
    h("section.login.panel", { "aria-labelledby": "login-title" },
      h("h1#login-title", "Log in to gpuyard"),
      error ? h("p.notice.error", { role: "alert" }, error) : null,
      h("form", { method: "post", action: "/ui/login" },
        h("label", { for: "token" }, "API token",
          h("input#token", { name: "token", type: "password", autocomplete: "current-password",
            required: true, spellcheck: "false", autofocus: true })),
        h("input", { type: "hidden", name: "next", value: next }),
        h("button.primary", { type: "submit" }, "Log in")),
      h("h2", "Where is my token?"),
      h("p.muted", "Make one with ", h("code", "gpuyard token create"),
        " (it is shown once). Your session lasts until you log out or it expires; the token stays yours."),
      h("h2", "On the server's machine"),
      h("p.muted", "You need no token there: ", h("code", "gpuyard dashboard"),
        " prints a one-time link that logs your browser in as the same user the CLI is."),
    ));
  main.querySelector("#token").focus(); // autofocus is not honoured on an element added later
  return null;
}

/** Only a path of this dashboard: never another site (an open redirect). */
function safeNext(next) {
  return next && /^\/ui(\/|$)/.test(next) && !next.startsWith("//") ? next : "/ui/";
}
