// The answer form of a waiting human step, built from the step's JSON Schema.

import { h } from "./dom.js";

const SIMPLE = new Set(["string", "number", "integer", "boolean"]);

function fieldFor(name, schema, id) {
  const type = schema.type;
  const label = schema.title || name;
  if (Array.isArray(schema.enum)) {
    const select = h("select", { id, name }, schema.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    return { el: [h("label", { for: id }, label), select], read: () => JSON.parse(select.value) };
  }
  if (type === "boolean") {
    const box = h("input", { type: "checkbox", id, name });
    return { el: [h("label", { class: "inline", for: id }, box, label)], read: () => box.checked };
  }
  if (type === "number" || type === "integer") {
    const input = h("input", { type: "number", id, name, step: type === "integer" ? "1" : "any", required: true });
    return {
      el: [h("label", { for: id }, label), input],
      read: () => {
        if (input.value === "") throw new Error(`${label}: enter a number`);
        return type === "integer" ? parseInt(input.value, 10) : parseFloat(input.value);
      },
    };
  }
  const area = h("textarea", { id, name, rows: 3 });
  return { el: [h("label", { for: id }, label), area], read: () => area.value };
}

/**
 * A form for one question ({address, prompt, schema}); onSubmit(data) returns a promise.
 * Objects of simple fields get one input each; anything else is answered as JSON.
 */
export function answerForm(question, onSubmit) {
  const base = `answer-${question.address.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  const schema = question.schema;
  let fields;
  let read;
  if (!schema || SIMPLE.has(schema.type) || Array.isArray(schema.enum)) {
    const field = fieldFor("Answer", schema || { type: "string" }, `${base}-value`);
    fields = field.el;
    read = field.read;
  } else if (schema.type === "object" && schema.properties && Object.values(schema.properties).every((p) => SIMPLE.has(p.type) || Array.isArray(p.enum))) {
    const parts = Object.entries(schema.properties).map(([name, sub]) => [name, fieldFor(name, sub, `${base}-${name}`)]);
    fields = parts.map(([, part]) => part.el);
    read = () => Object.fromEntries(parts.map(([name, part]) => [name, part.read()]));
  } else {
    const area = h("textarea", { id: `${base}-json`, rows: 6 }, JSON.stringify(skeleton(schema), null, 2));
    fields = [h("label", { for: `${base}-json` }, "Answer (JSON)"), area];
    read = () => JSON.parse(area.value);
  }
  const error = h("p", { class: "check-fail", role: "alert" });
  const button = h("button", { type: "submit", class: "primary" }, "Send answer");
  const form = h(
    "form",
    { class: "answer", "data-address": question.address, "aria-label": `Answer for ${question.address}` },
    h("p", {}, h("strong", {}, question.prompt || "A person's answer is needed.")),
    h("p", { class: "muted mono" }, question.address),
    fields,
    h("div", { class: "row", style: "margin-top:8px" }, button),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    let data;
    try {
      data = read();
    } catch (problem) {
      error.textContent = problem.message;
      return;
    }
    button.disabled = true;
    try {
      await onSubmit(data);
    } catch (problem) {
      error.textContent = problem.message;
      button.disabled = false;
    }
  });
  return form;
}

function skeleton(schema) {
  if (!schema || typeof schema !== "object") return null;
  if (schema.default !== undefined) return schema.default;
  switch (schema.type) {
    case "object":
      return Object.fromEntries(Object.entries(schema.properties || {}).map(([k, v]) => [k, skeleton(v)]));
    case "array":
      return [];
    case "string":
      return "";
    case "number":
    case "integer":
      return 0;
    case "boolean":
      return false;
    default:
      return null;
  }
}
