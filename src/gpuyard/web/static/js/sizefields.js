// The size fields "submit" and "will it start?" share, with the CLI's forms and names.

import { h } from "./dom.js";

export const SIZE_FIELDS = [
  { key: "gpus", label: "GPUs", type: "number", min: 0, value: "1", hint: "0 with GPU memory: 1" },
  { key: "gpu_mem", label: "GPU memory per GPU", placeholder: "e.g. 20G (shares a GPU)", hint: "--gpu-mem; empty: whole GPUs" },
  { key: "cpus", label: "CPUs", type: "number", min: 1, value: "1" },
  { key: "mem", label: "Memory", placeholder: "e.g. 16G", hint: "--mem; empty: the default" },
  { key: "time_limit", label: "Time limit", placeholder: "e.g. 2h, 90m, 1-00:00:00", hint: "--time" },
];

export function fieldInputs(fields, prefix) {
  return fields.map((f) => {
    const id = `${prefix}-${f.key}`;
    const input = h(`input#${id}`, {
      name: f.key, type: f.type || "text", min: f.min, value: f.value, placeholder: f.placeholder,
      autocomplete: "off", "aria-describedby": f.hint ? `${id}-hint` : null,
    });
    return h("label", { for: id }, f.label, input, f.hint ? h(`span.hint#${id}-hint`, f.hint) : null);
  });
}

/** The fields' values as the API takes them: numbers as numbers, empty ones left out. */
export function fieldValues(form, fields) {
  const out = {};
  for (const f of fields) {
    const raw = form.elements[f.key].value.trim();
    if (raw === "") continue;
    out[f.key] = f.type === "number" ? Number(raw) : raw;
  }
  return out;
}
