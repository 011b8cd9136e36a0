"""Compatibility of two .proto files, after Confluent's Protobuf rules: the difference
from the ``original`` file (the writer's) to the ``update`` (the reader's), each difference
compatible or not.

Compatible: PACKAGE_CHANGED, MESSAGE_ADDED, MESSAGE_MOVED (another index), ENUM_ADDED,
ENUM_REMOVED, ENUM_CONST_ADDED/CHANGED/REMOVED, FIELD_ADDED, FIELD_REMOVED (a field
number changed is both), FIELD_NAME_CHANGED, a scalar type changed within a wire-compatible
group (int32/uint32/int64/uint64/bool/enum; sint32/sint64; fixed32/sfixed32;
fixed64/sfixed64; string/bytes), FIELD_STRING_OR_BYTES_LABEL_CHANGED and a message field
made repeated (or back), ONEOF_ADDED (one existing field moved into a new oneof),
ONEOF_REMOVED, ONEOF_FIELD_ADDED.

Incompatible: MESSAGE_REMOVED (of the schema's own file), FIELD_KIND_CHANGED (scalar <->
message), FIELD_SCALAR_KIND_CHANGED (across groups, map key/value types too),
FIELD_NAMED_TYPE_CHANGED (a message field's type renamed, its name taken without the
package, or its structure incompatible), FIELD_NUMERIC_LABEL_CHANGED (a number made
repeated or back: packed encoding differs), REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED,
ONEOF_FIELD_REMOVED, MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF.

Not checked: services and options (they do not change what bytes mean), extensions,
reserved names/numbers (Confluent's ``confluent:reserved`` metadata).
"""

from __future__ import annotations

from typing import Any

_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool", "enum"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]
_TYPE_NAMES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
    7: "fixed32", 8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes",
    13: "uint32", 14: "enum", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}  # fmt: skip


def _kind(field: Any) -> str:
    return _TYPE_NAMES.get(field.type, str(field.type))


def _local_name(descriptor: Any) -> str:
    package = descriptor.file.package
    name: str = descriptor.full_name
    return name[len(package) + 1 :] if package and name.startswith(package + ".") else name


def _real_oneof(field: Any) -> Any:
    """The field's oneof, unless it is proto3 ``optional``'s synthetic one (named ``_x``
    and holding only ``x``)."""
    o = field.containing_oneof
    if o is None or (len(o.fields) == 1 and o.name == "_" + field.name):
        return None
    return o


def _all_messages(file: Any) -> dict[str, tuple[int, Any]]:
    out: dict[str, tuple[int, Any]] = {}
    stack = [(i, d) for i, d in enumerate(file.message_types_by_name.values())]
    while stack:
        i, d = stack.pop()
        out[_local_name(d)] = (i, d)
        stack.extend(enumerate(d.nested_types))
    return out


def differences(original: Any, update: Any) -> list[str]:
    """Incompatible differences from ``original`` (writer) to ``update`` (reader)."""
    out: list[str] = []
    old = _all_messages(original)
    new = _all_messages(update)
    for name, (_, descriptor) in old.items():
        if descriptor.GetOptions().map_entry:
            continue
        if name not in new:
            out.append(f"MESSAGE_REMOVED #/{name.replace('.', '/')}")
            continue
        _message(descriptor, new[name][1], out, set())
    return out


def _message(w: Any, r: Any, out: list[str], busy: set[tuple[str, str]]) -> None:
    key = (w.full_name, r.full_name)
    if key in busy:
        return
    busy.add(key)
    where = "#/" + _local_name(r).replace(".", "/")
    w_fields = {f.number: f for f in w.fields}
    r_fields = {f.number: f for f in r.fields}
    w_oneofs = {o.name for f in w.fields if (o := _real_oneof(f)) is not None}
    moved: dict[str, int] = {}
    for number, wf in w_fields.items():
        rf = r_fields.get(number)
        if rf is None:
            if wf.is_required:
                out.append(f"REQUIRED_FIELD_REMOVED {where}/{number}")
            elif _real_oneof(wf) is not None:
                out.append(f"ONEOF_FIELD_REMOVED {where}/{_real_oneof(wf).name}/{number}")
            continue
        _field(wf, rf, f"{where}/{number}", out, busy)
        wo, ro = _real_oneof(wf), _real_oneof(rf)
        if wo is None and ro is not None:
            if ro.name in w_oneofs:
                out.append(f"FIELD_MOVED_TO_EXISTING_ONEOF {where}/{number}")
            else:
                moved[ro.name] = moved.get(ro.name, 0) + 1
        if wf.is_required != rf.is_required:
            rule = "REQUIRED_FIELD_ADDED" if rf.is_required else "REQUIRED_FIELD_REMOVED"
            out.append(f"{rule} {where}/{number}")
    for name, count in moved.items():
        if count > 1:
            out.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF {where}/{name}")
    for number, rf in r_fields.items():
        if number not in w_fields and rf.is_required:
            out.append(f"REQUIRED_FIELD_ADDED {where}/{number}")
    busy.discard(key)


def _field(wf: Any, rf: Any, where: str, out: list[str], busy: set[tuple[str, str]]) -> None:
    wk, rk = _kind(wf), _kind(rf)
    w_map = wk == "message" and wf.message_type.GetOptions().map_entry
    r_map = rk == "message" and rf.message_type.GetOptions().map_entry
    if w_map and r_map:
        for sub in ("key", "value"):
            _field(
                wf.message_type.fields_by_name[sub],
                rf.message_type.fields_by_name[sub],
                where,
                out,
                busy,
            )
        return
    if w_map != r_map or (wk in ("message", "group")) != (rk in ("message", "group")):
        out.append(f"FIELD_KIND_CHANGED {where}")
        return
    if wk in ("message", "group"):
        if _local_name(wf.message_type) != _local_name(rf.message_type):
            out.append(f"FIELD_NAMED_TYPE_CHANGED {where}")
            return
        inner: list[str] = []
        _message(wf.message_type, rf.message_type, inner, busy)
        if inner:
            out.extend(inner)
            out.append(f"FIELD_NAMED_TYPE_CHANGED {where}")
        return
    if wk != rk and not any(wk in g and rk in g for g in _GROUPS):
        out.append(f"FIELD_SCALAR_KIND_CHANGED {where} ({wk} -> {rk})")
        return
    if wf.is_repeated != rf.is_repeated and wk not in ("string", "bytes"):
        out.append(f"FIELD_NUMERIC_LABEL_CHANGED {where}")
