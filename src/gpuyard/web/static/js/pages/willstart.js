// "Will my job start now?": the server's dry run for a size the user picks, in words.

import { api } from "../api.js";
import { h, clear, relative, localTime, announce } from "../dom.js";
import { SIZE_FIELDS, fieldInputs, fieldValues } from "../sizefields.js";

export function mount(main) {
  const answer = h("div", { "aria-live": "polite" });
  const form = h("form.panel", { onsubmit: ask, "aria-labelledby": "ws-title" },
    h("div.form-grid", fieldInputs(SIZE_FIELDS, "ws")),
    h("button.primary", { type: "submit" }, "Will it start?"));
  clear(main,
    h("h1#ws-title", "Will my job start now?"),
    h("p.muted", "Pick a size: the scheduler answers as for ", h("code", "gpuyard submit --dry-run"),
      ", from the queue as it is now. Nothing is queued."),
    form, answer);

  async function ask(event) {
    event.preventDefault();
    const body = { command: ["true"], ...fieldValues(form, SIZE_FIELDS) };
    clear(answer, h("p.muted", "Asking the scheduler…"));
    try {
      const out = await api("/api/v1/jobs/dry-run", { method: "POST", body });
      const [kind, text, detail] = words(out);
      clear(answer, h(`div.panel.answer.${kind}`, h("strong", text), detail ? h("p.muted", detail) : null));
      announce(text);
    } catch (err) {
      const text = err.status === 422 || err.status === 400
        ? `It cannot run here: ${err.message}` : `No answer: ${err.message}`;
      clear(answer, h("div.panel.answer.bad", { role: "alert" }, h("strong", text)));
    }
  }
  return null;
}

function words(out) {
  const preempt = out.estimate_assumes === "preemption"
    ? "This holds only if the policy preempts a running job for it, as it plans." : null;
  if (out.start_at && out.starts_in_s !== null && out.starts_in_s <= 1) {
    return ["ok", "Yes: it would start now.", preempt];
  }
  if (out.start_at) {
    return ["wait", `Not now: estimated start ${relative(out.start_at)} (${localTime(out.start_at)}).`,
      preempt || "If the running jobs use their whole time limit; sooner if they end early."];
  }
  if (out.not_before) {
    return ["wait", `Not before ${localTime(out.not_before)} (${relative(out.not_before)}).`,
      "The projection stopped there: jobs ahead of it hold the GPUs until then at least."];
  }
  return ["wait", "Not until running jobs without a time limit end.",
    "They may run for ever: no start time can be projected."];
}
