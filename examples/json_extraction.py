"""Structured extraction with a regex and a JSON schema.

python examples/json_extraction.py
"""

import json

import radixlm as sgl

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "age", "city"],
}


@sgl.function
def extract(s, text):
    s += "Text: " + text + "\n"
    s += "Phone number:" + sgl.gen("phone", regex=r" \d{3}-\d{4}", temperature=0) + "\n"
    s += "Age:" + sgl.gen_int("age", max_tokens=4, temperature=0) + "\n"
    s += "As JSON: " + sgl.gen("record", json_schema=SCHEMA, max_tokens=96, temperature=0)


if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        state = extract.run(text="Maria Lopez, 34, lives in Lisbon. Call her at 555-0199.", backend=runtime)
        print("phone:", state["phone"].strip())
        print("age:", state["age"].strip())
        print("record:", json.loads(state["record"]))
