"""A small JSON-schema checker for the parts of the standard our fixtures use (type, enum, const, properties,
additionalProperties: false, required, minimum, exclusiveMinimum, items, allOf, if/then, not): jsonschema itself
is not a dependency of the project."""
from __future__ import annotations

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def errors(value, schema: dict, where: str = "$") -> list[str]:
    """What in `value` breaks `schema`, one line each (empty: it conforms)."""
    found = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, n) for n in names):
            return [f"{where}: {value!r} is not of type {'/'.join(names)}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{where}: {value} < {schema['minimum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            found.append(f"{where}: {value} <= {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{where}: {key!r} is required")
        for key, item in value.items():
            if key in properties:
                found += errors(item, properties[key], f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{where}: unknown field {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += errors(item, schema["items"], f"{where}[{i}]")
    for part in schema.get("allOf", []):
        found += errors(value, part, where)
    if "if" in schema and not errors(value, schema["if"], where):
        found += errors(value, schema.get("then", {}), where)
    if "not" in schema and not errors(value, schema["not"], where):
        found.append(f"{where}: matches a schema it must not")
    return found
