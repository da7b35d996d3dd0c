// Checks constrained output in the page: a regex must match the whole text; JSON must parse and
// satisfy the schema's common keywords (type, properties, required, enum, items, bounds).
export function checkOutput(mode, constraint, text) {
  if (mode === "regex") {
    const ok = new RegExp("^(?:" + constraint + ")$", "u").test(text);
    return { ok, message: ok ? "matches the regex" : "does not match the regex" };
  }
  if (mode === "json_schema") {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return { ok: false, message: "not JSON: " + e.message };
    }
    const problems = [];
    checkSchema(JSON.parse(constraint), value, "$", problems);
    return problems.length
      ? { ok: false, message: "breaks the schema: " + problems.join("; ") }
      : { ok: true, message: "valid JSON for the schema" };
  }
  if (mode === "ebnf") return { ok: true, message: "generated under the EBNF grammar (enforced by the server)" };
  return null;
}

function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function checkSchema(schema, value, path, problems) {
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    const actual = typeOf(value);
    if (!types.includes(actual) && !(actual === "integer" && types.includes("number"))) {
      problems.push(`${path} is ${actual}, not ${types.join("|")}`);
      return;
    }
  }
  if (schema.enum && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(value)))
    problems.push(`${path} is not one of the enum values`);
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) problems.push(`${path} < ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) problems.push(`${path} > ${schema.maximum}`);
  }
  if (typeof value === "string") {
    if (schema.minLength !== undefined && value.length < schema.minLength) problems.push(`${path} too short`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) problems.push(`${path} too long`);
  }
  if (typeOf(value) === "object") {
    for (const name of schema.required || []) if (!(name in value)) problems.push(`${path}.${name} missing`);
    for (const [name, sub] of Object.entries(schema.properties || {}))
      if (name in value) checkSchema(sub, value[name], `${path}.${name}`, problems);
  }
  if (Array.isArray(value) && schema.items) value.forEach((v, i) => checkSchema(schema.items, v, `${path}[${i}]`, problems));
}
