"""A validator for request bodies against Swagger 2.0 definitions, in the standard library only.

It covers what the Batch service's definitions use (tests/fixtures/batch/README.md): `$ref` to
`#/definitions/NAME`, `type` (object, array, string, integer, number, boolean; a schema with
`properties` and no `type` is an object, as `ComputeNodeIdentityReference` is written), `required`,
`enum`, `items`, `additionalProperties` (a schema or a boolean), `format` int32/int64 (ranges) and
duration (ISO 8601), `minimum`/`maximum`, and `readOnly` (a property the service sets: refused in a
request body). For the Compute gallery's definitions (tests/fixtures/gallery/README.md) also `allOf`
as Swagger 2.0 uses it for inheritance: a schema's own `properties` and `required` together with
those of every schema in its `allOf` (followed through their own `allOf`), checked as one object.

Unknown properties. The Batch definitions never say `additionalProperties: false`; in JSON Schema
its absence would allow any extra property. This validator is closed instead: where a schema lists
`properties` and says nothing of `additionalProperties`, a property it does not list is an error (a
misspelled `waitForSucess` must not pass as an extension). An object schema with no `properties`
(`VMExtension.settings`) takes anything; an explicit `additionalProperties` schema (`resourceTags`,
a map of strings) checks each value against it.

`documented_rules` adds the cross-field rules the definitions state only in their descriptions
(mutually exclusive properties, one of several required), each with the sentence it comes from.
"""
import difflib
import re

_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# ISO 8601 durations as Batch writes them (PT15M, P1DT2H, PT0.5S); at least one component.
_DURATION = re.compile(r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")
_JSON_TYPE = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
              type(None): "null"}


class SpecError(Exception):
    """The definitions themselves are broken (a $ref that resolves to nothing, a cycle of $refs)."""


def _type_name(value):
    return _JSON_TYPE.get(type(value), type(value).__name__)


def resolve(spec, schema):
    """Follows `$ref` until a schema without one; Swagger 2.0 ignores keywords beside a `$ref`."""
    seen = []
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/definitions/"):
            raise SpecError(f"unsupported $ref {ref!r} (only #/definitions/NAME)")
        name = ref[len("#/definitions/"):]
        if name in seen:
            raise SpecError(f"$ref cycle: {' -> '.join(seen + [name])}")
        seen.append(name)
        if name not in spec.get("definitions", {}):
            raise SpecError(f"$ref {ref!r} names no definition")
        schema = spec["definitions"][name]
    return schema


def refs_of(schema):
    """Every definition name a schema refers to directly (not following the refs)."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    found.add(value.rsplit("/", 1)[-1])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return found


def closure(spec, root):
    """The definitions reachable from `root` through $ref, `root` included."""
    reached, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        if name not in spec.get("definitions", {}):
            raise SpecError(f"definition {name!r} is referenced but missing")
        reached.add(name)
        todo.extend(refs_of(spec["definitions"][name]))
    return reached


def _is_type(value, expected):
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":  # JSON 3 is an integer, 3.0 and true are not
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise SpecError(f"unsupported type {expected!r}")


def _hint(word, choices):
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not close:
        close = [c for c in choices if isinstance(c, str) and c.lower() == word.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _with_all_of(spec, schema, seen=()):
    """`schema` with the `properties` and `required` of its `allOf` schemas merged in (its own win
    on a clash, as a derived model's do)."""
    if "allOf" not in schema:
        return schema
    props, required = {}, []
    for part in schema["allOf"]:
        ref = part.get("$ref")
        if ref in seen:
            raise SpecError(f"allOf cycle through {ref!r}")
        base = _with_all_of(spec, resolve(spec, part), seen + (ref,))
        props.update(base.get("properties", {}))
        required += [r for r in base.get("required", []) if r not in required]
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    merged["properties"] = {**props, **schema.get("properties", {})}
    merged["required"] = required + [r for r in schema.get("required", []) if r not in required]
    return merged


def _check(spec, value, schema, path, errors):
    schema = _with_all_of(spec, resolve(spec, schema))
    expected = schema.get("type") or ("object" if "properties" in schema else None)
    if expected is not None and not _is_type(value, expected):
        errors.append(f"{path}: expected {expected}, got {_type_name(value)} {value!r}")
        return
    if "enum" in schema and value not in schema["enum"]:
        hint = _hint(value, schema["enum"]) if isinstance(value, str) else ""
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}{hint}")
    fmt = schema.get("format")
    if fmt in _INT_RANGE and _is_type(value, "integer"):
        low, high = _INT_RANGE[fmt]
        if not low <= value <= high:
            errors.append(f"{path}: {value} is outside {fmt}")
    if fmt == "duration" and isinstance(value, str) and not _DURATION.match(value):
        errors.append(f"{path}: {value!r} is not an ISO 8601 duration (for example PT15M)")
    if "minimum" in schema and _is_type(value, "number") and value < schema["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if "maximum" in schema and _is_type(value, "number") and value > schema["maximum"]:
        errors.append(f"{path}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(spec, item, schema["items"], f"{path}[{i}]", errors)
    if isinstance(value, dict) and expected == "object":
        _check_object(spec, value, schema, path, errors)


def _check_object(spec, value, schema, path, errors):
    props = schema.get("properties")
    for name in schema.get("required", []):
        if name not in value:
            errors.append(f"{path}: missing required property {name!r}")
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        where = f"{path}.{name}"
        if props is not None and name in props:
            if resolve(spec, props[name]).get("readOnly") or props[name].get("readOnly"):
                errors.append(f"{where}: read-only (the service sets it), not part of a request")
                continue
            _check(spec, item, props[name], where, errors)
        elif isinstance(extra, dict):
            _check(spec, item, extra, where, errors)
        elif extra is True or (props is None and extra is None):
            continue  # a free-form object, or one that allows extra properties explicitly
        else:
            errors.append(f"{where}: unknown property{_hint(name, props or {})}")


def validate(spec, body, root):
    """Errors (strings, each starting with a JSON path: `$.startTask.commandLine: ...`) of `body`
    against definition `root`; an empty list when it conforms."""
    errors = []
    _check(spec, body, {"$ref": f"#/definitions/{root}"}, "$", errors)
    return errors


# ------------------------------------------------------------------------------------------------
# Rules that BatchService.json 2024-07-01.20.0 states in descriptions, not in schema keywords. Each
# quotes the description it comes from (definition.property).

_RESOURCE_FILE_SOURCES = ("autoStorageContainerName", "storageContainerUrl", "httpUrl")


def _resource_file_rules(rf, path):
    errors = []
    given = [k for k in _RESOURCE_FILE_SOURCES if k in rf]
    if len(given) != 1:
        # ResourceFile.httpUrl: "The autoStorageContainerName, storageContainerUrl and httpUrl
        # properties are mutually exclusive and one of them must be specified."
        errors.append(f"{path}: exactly one of {', '.join(_RESOURCE_FILE_SOURCES)} must be given, "
                      f"found {given or 'none'}")
    if "httpUrl" in rf and "filePath" not in rf:
        # ResourceFile.filePath: "If the httpUrl property is specified, the filePath is required"
        errors.append(f"{path}: filePath is required with httpUrl")
    file_path = rf.get("filePath")
    if isinstance(file_path, str) and (file_path.startswith("/") or ".." in file_path.split("/")):
        # ResourceFile.filePath: "The specified relative path cannot break out of the Task's
        # working directory (for example by using '..')."
        errors.append(f"{path}.filePath: {file_path!r} leaves the task's working directory")
    return errors


def _user_identity_rules(ui, path):
    # UserIdentity.username: "The userName and autoUser properties are mutually exclusive; you must
    # specify one but not both."
    given = [k for k in ("username", "autoUser") if k in ui]
    if len(given) != 1:
        return [f"{path}: exactly one of username and autoUser must be given, found {given or 'none'}"]
    return []


def _image_reference_rules(ref, path):
    errors = []
    # ImageReference.virtualMachineImageId: "This property is mutually exclusive with other
    # ImageReference properties."; sharedGalleryImageId and communityGalleryImageId: "This property
    # is mutually exclusive with other properties".
    for exclusive in ("virtualMachineImageId", "sharedGalleryImageId", "communityGalleryImageId"):
        others = [k for k in ref if k != exclusive]
        if exclusive in ref and others:
            errors.append(f"{path}: {exclusive} excludes the other properties, found {others}")
    return errors


def documented_rules(pool, path="$"):
    """Errors of a PoolAddParameter body against the rules its definitions state in words."""
    if not isinstance(pool, dict):
        return []
    errors = []
    if "virtualMachineConfiguration" not in pool:
        # PoolAddParameter.virtualMachineConfiguration: "This property must be specified."
        errors.append(f"{path}: virtualMachineConfiguration must be specified")
    if pool.get("enableAutoScale") is True:
        # PoolAddParameter.targetDedicatedNodes/targetLowPriorityNodes: "This property must not be
        # specified if enableAutoScale is set to true."; enableAutoScale: "If true, the
        # autoScaleFormula property is required"
        for name in ("targetDedicatedNodes", "targetLowPriorityNodes"):
            if name in pool:
                errors.append(f"{path}: {name} must not be given with enableAutoScale true")
        if "autoScaleFormula" not in pool:
            errors.append(f"{path}: autoScaleFormula is required with enableAutoScale true")
    elif "targetDedicatedNodes" not in pool and "targetLowPriorityNodes" not in pool:
        # PoolAddParameter.enableAutoScale: "If false, at least one of targetDedicatedNodes and
        # targetLowPriorityNodes must be specified."
        errors.append(f"{path}: without autoscale, targetDedicatedNodes or targetLowPriorityNodes is required")
    vmc = pool.get("virtualMachineConfiguration")
    if isinstance(vmc, dict) and isinstance(vmc.get("imageReference"), dict):
        errors += _image_reference_rules(vmc["imageReference"], f"{path}.virtualMachineConfiguration.imageReference")
    st = pool.get("startTask")
    if isinstance(st, dict):
        for i, rf in enumerate(st.get("resourceFiles") or []):
            if isinstance(rf, dict):
                errors += _resource_file_rules(rf, f"{path}.startTask.resourceFiles[{i}]")
        if isinstance(st.get("userIdentity"), dict):
            errors += _user_identity_rules(st["userIdentity"], f"{path}.startTask.userIdentity")
    return errors
