// The dashboard's shell: who is logged in, client-side routing under /ui/, the nav bar.
// Each page module exports mount(main, ctx) and returns a function that stops it (its
// streams and timers) when the user leaves the page.

import { api, ApiError, forgetSessionKey, takeSessionKey } from "./api.js";
import { h, clear, notice } from "./dom.js";

const ROUTES = [
  [/^\/ui\/?$/, () => import("./pages/queue.js"), "Queue"],
  [/^\/ui\/will-it-start\/?$/, () => import("./pages/willstart.js"), "Will my job start now?"],
  [/^\/ui\/jobs\/(\d+)\/?$/, () => import("./pages/job.js"), "Job"],
  [/^\/ui\/gpus\/?$/, () => import("./pages/gpus.js"), "GPUs"],
  [/^\/ui\/usage\/?$/, () => import("./pages/usage.js"), "Usage"],
  [/^\/ui\/events\/?$/, () => import("./pages/events.js"), "Events"],
  [/^\/ui\/submit\/?$/, () => import("./pages/submit.js"), "Submit"],
];

let stopPage = null;
let me = null;
let generation = 0;
let focusAfterNav = false; // move the focus to the new page's heading (not on the first load)

export function navigate(path, { replace = false } = {}) {
  focusAfterNav = true;
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  render();
}

async function render() {
  const mine = ++generation;
  if (stopPage) {
    try { stopPage(); } catch { /* a page's cleanup must not break navigation */ }
    stopPage = null;
  }
  notice("");
  const main = document.getElementById("main");
  const path = location.pathname;
  if (/^\/ui\/login\/?$/.test(path)) {
    document.body.classList.add("logged-out");
    const page = await import("./pages/login.js");
    if (mine !== generation) return;
    document.title = "Log in · gpuyard";
    stopPage = page.mount(main, { navigate, query: new URLSearchParams(location.search) }) || null;
    return;
  }
  document.body.classList.remove("logged-out");
  if (!me) {
    try {
      me = await api("/api/v1/whoami");
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return; // api() went to the login page
      clear(main, h("h1", "gpuyard"), h("p.error", err.message));
      return;
    }
    showWho();
  }
  const route = ROUTES.find(([pattern]) => pattern.test(path));
  markNav(path);
  if (!route) {
    document.title = "Not found · gpuyard";
    clear(main, h("h1", { tabindex: "-1" }, "Page not found"),
      h("p", "There is no such page. ", h("a", { href: "/ui/", "data-nav": "" }, "Back to the queue")));
    return;
  }
  const [pattern, load, title] = route;
  const params = path.match(pattern).slice(1);
  let page;
  try {
    page = await load();
  } catch (err) {
    clear(main, h("p.error", `This page could not be loaded: ${err.message}`));
    return;
  }
  if (mine !== generation) return;
  document.title = `${title} · gpuyard`;
  clear(main);
  stopPage = page.mount(main, { me, params, query: new URLSearchParams(location.search), navigate }) || null;
  const heading = main.querySelector("h1");
  if (heading && focusAfterNav) {
    heading.setAttribute("tabindex", "-1");
    heading.focus({ preventScroll: true });
  }
  focusAfterNav = false;
}

function markNav(path) {
  for (const link of document.querySelectorAll("#nav a")) {
    const target = link.getAttribute("href");
    const current = target === "/ui/" ? /^\/ui\/?$/.test(path) || path.startsWith("/ui/jobs/")
      : path.startsWith(target);
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showWho() {
  const who = document.getElementById("who");
  clear(who,
    h("span.user", { title: `role ${me.role}${me.team ? `, team ${me.team}` : ""}` },
      me.user, me.role === "admin" ? h("span.badge", "admin") : null),
    h("button.link", { type: "button", onclick: logout }, "Log out"));
}

async function logout() {
  try {
    await api("/ui/logout", { method: "POST", raw: true });
  } catch (err) {
    if (!(err instanceof ApiError) || !err.missing) {
      notice(`Log out failed: ${err.message}`);
      return;
    }
  }
  me = null;
  forgetSessionKey();
  clear(document.getElementById("who"));
  navigate("/ui/login", { replace: true });
}

document.addEventListener("click", (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey ||
      event.shiftKey || event.altKey) return;
  const link = event.target.closest("a[href]");
  if (!link || link.target || link.hasAttribute("download")) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui") ||
      url.pathname.startsWith("/ui/static/")) return;
  event.preventDefault();
  if (url.pathname + url.search === location.pathname + location.search) return;
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", () => render());

takeSessionKey(); // a login just sent the browser here with the session's key
render();
