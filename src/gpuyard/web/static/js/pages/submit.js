// Submit a job: the same request the CLI sends (argv, sizes in Slurm's forms); the server
// checks the spec with the CLI's rules and its one-line error is shown as it is.

import { api } from "../api.js";
import { h, clear, announce } from "../dom.js";
import { SIZE_FIELDS, fieldInputs, fieldValues } from "../sizefields.js";
import { shellSplit, shellOperators, SplitError } from "../shlex.js";

const MORE_FIELDS = [
  { key: "name", label: "Name", placeholder: "default: the program's name" },
  { key: "priority", label: "Priority", type: "number", value: "0" },
  { key: "workdir", label: "Working directory", placeholder: "/home/you/project", hint: "absolute, on the server; empty: the server's default" },
  { key: "retries", label: "Retries", type: "number", min: 0, value: "0", hint: "requeued after a failure" },
];

export function mount(main) {
  const preview = h("div.hint#cmd-preview", { "aria-live": "polite" });
  const command = h("input#cmd", { name: "command", required: true, autocomplete: "off", spellcheck: "false",
    placeholder: "python train.py --epochs 10", "aria-describedby": "cmd-preview", oninput: showPreview });
  const env = h("textarea#env", { name: "env", rows: "3", placeholder: "WANDB_MODE=offline", spellcheck: "false",
    "aria-describedby": "env-hint" });
  const preemptible = h("select#preemptible", { name: "preemptible" },
    h("option", { value: "" }, "server default"),
    h("option", { value: "true" }, "yes (may be requeued)"),
    h("option", { value: "false" }, "no"));
  const result = h("div", { "aria-live": "polite" });
  const button = h("button.primary", { type: "submit" }, "Submit");
  const form = h("form.panel", { onsubmit: submit, "aria-labelledby": "submit-title", novalidate: true },
    h("label.wide", { for: "cmd" }, "Command", command, preview),
    h("div.form-grid", fieldInputs(SIZE_FIELDS, "sub"), fieldInputs(MORE_FIELDS, "sub"),
      h("label", { for: "preemptible" }, "Preemptible", preemptible),
      h("label.wide", { for: "env" }, "Environment (one KEY=VALUE a line)", env,
        h("span.hint#env-hint", "added to the job's environment"))),
    button);
  clear(main,
    h("h1#submit-title", "Submit a job"),
    h("p.muted", "As ", h("code", "gpuyard submit"), ": the command runs as its arguments, without a shell (use ",
      h("code", "sh -c '…'"), " for pipes or redirections)."),
    form, result);

  function showPreview() {
    try {
      const words = shellSplit(command.value);
      const ops = shellOperators(words);
      clear(preview, words.length ? [
        "Arguments: ", words.map((w, i) => [i ? " " : "", h("code", JSON.stringify(w))]),
        ops.length ? h("span.error", ` (${ops.join(" ")} is passed as an argument: no shell runs it)`) : null,
      ] : "");
    } catch (err) {
      clear(preview, h("span.error", err.message));
    }
  }

  async function submit(event) {
    event.preventDefault();
    let argv;
    try {
      argv = shellSplit(command.value);
    } catch (err) {
      if (!(err instanceof SplitError)) throw err;
      return fail(`command: ${err.message}`, command);
    }
    if (!argv.length) return fail("command: empty; type the program and its arguments", command);
    const body = { command: argv, ...fieldValues(form, SIZE_FIELDS), ...fieldValues(form, MORE_FIELDS) };
    if (preemptible.value) body.preemptible = preemptible.value === "true";
    const vars = {};
    for (const [n, line] of env.value.split("\n").entries()) {
      if (!line.trim()) continue;
      const at = line.indexOf("=");
      if (at <= 0) return fail(`environment line ${n + 1}: write KEY=VALUE`, env);
      vars[line.slice(0, at).trim()] = line.slice(at + 1);
    }
    if (Object.keys(vars).length) body.env = vars;
    button.disabled = true;
    try {
      const job = await api("/api/v1/jobs", { method: "POST", body });
      clear(result, h("div.panel.answer.ok", { role: "status" },
        h("strong", `Submitted job ${job.id}`), ` (${job.name}), ${job.state.toLowerCase()}. `,
        h("a", { href: `/ui/jobs/${job.id}` }, "Open job"), " · ", h("a", { href: "/ui/" }, "Queue"),
        job.hint ? h("p.muted", job.hint) : null));
      announce(`Submitted job ${job.id}`);
    } catch (err) {
      const field = err.field && form.elements[err.field];
      fail(err.message, field || null);
    } finally {
      button.disabled = false;
    }
  }

  function fail(message, field) {
    clear(result, h("div.panel.answer.bad", { role: "alert" }, h("strong", "Not submitted: "), message));
    if (field && field.focus) {
      field.setAttribute("aria-invalid", "true");
      field.addEventListener("input", () => field.removeAttribute("aria-invalid"), { once: true });
      field.focus();
    }
  }
  return null;
}
