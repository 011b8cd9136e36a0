"""JSON: JSON Schema (draft-04, -06, -07, 2019-09, 2020-12, picked by ``$schema``;
draft-07 when absent, as Confluent) checked against its meta-schema and validated by
jsonschema-rs.

Why jsonschema-rs and not the pure-Python jsonschema: both implement these drafts; on the
records of ``bench/schemas.py`` jsonschema-rs validated 94-149x faster (2.0 M against
21 k validations/s, compiled once per schema, Rust), and every typed JSON produce and
fetch pays a validation per record. jsonschema stays a dependency (the test suite's
OpenAPI/AsyncAPI checks use it); only jsonschema-rs is used here.

References: each ``ResolvedReference`` is a resource of a jsonschema-rs ``Registry`` under
its ``name`` (the ``$ref`` URL as written; a relative name is also registered resolved
against the referencing schema's ``$id``), and no ``$ref`` is ever fetched from the network.

Compatibility (no library does it) follows Confluent's JSON Schema rules, reader/writer
style: the reader accepts every document the writer accepts. See ``_Compare``.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas._util import flatten_references, load_json
from app.common.schemas.types import LIMITS, Codec, ResolvedReference

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFTS = {
    "http://json-schema.org/draft-04/schema": "draft-04",
    "http://json-schema.org/draft-06/schema": "draft-06",
    "http://json-schema.org/draft-07/schema": "draft-07",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}


def _no_network(uri: str) -> Any:
    raise ValueError(f"$ref {uri!r} is not among the schema's references (nothing is fetched)")


def _meta_check(doc: Any, what: str) -> None:
    import jsonschema_rs

    if isinstance(doc, bool):
        return
    if not isinstance(doc, dict):
        raise InvalidSchema("JSON", f"{what}must be a JSON object or a boolean")
    declared = doc.get("$schema")
    if declared is None:
        doc = {**doc, "$schema": DRAFT7}
    elif not isinstance(declared, str) or declared.rstrip("#") not in DRAFTS:
        raise InvalidSchema(
            "JSON",
            f"{what}$schema {declared!r} is not a supported draft; use one of " + ", ".join(DRAFTS),
        )
    try:
        jsonschema_rs.meta.validate(doc)
    except jsonschema_rs.ValidationError as e:
        where = "/".join(map(str, e.instance_path))
        raise InvalidSchema("JSON", f"{what}at /{where}: {e.message}") from None


class JsonSchema(Codec):
    """A JSON Schema with its references, compiled once for validation."""

    schema_type = "JSON"

    def __init__(self, raw: str, references: tuple[ResolvedReference, ...]) -> None:
        import jsonschema_rs

        self.raw = raw
        self.references = references
        self.doc: Any = load_json("JSON", raw)
        _meta_check(self.doc, "")
        resources: list[tuple[str, Any]] = []
        # Referenced documents by every name a $ref may use (for compatibility checks).
        self.documents: dict[str, Any] = {}
        base = self.doc.get("$id") if isinstance(self.doc, dict) else None
        for ref in flatten_references("JSON", references):
            what = f"reference {ref.name!r} ({ref.subject} version {ref.version}): "
            doc = load_json("JSON", ref.schema, what)
            _meta_check(doc, what)
            for uri in _uris(ref.name, base):
                resources.append((uri, doc))
                self.documents[uri] = doc
        if isinstance(self.doc, dict) and self.doc.get("$schema") is None:
            compile_doc: Any = {**self.doc, "$schema": DRAFT7}
        else:
            compile_doc = self.doc
        try:
            registry = jsonschema_rs.Registry(resources) if resources else None
            self._validator = jsonschema_rs.validator_for(
                compile_doc, registry=registry, retriever=_no_network
            )
        except (jsonschema_rs.ValidationError, ValueError, TypeError) as e:
            message = str(e).split("\n", 1)[0]
            raise InvalidSchema("JSON", message) from None
        self._normalized = orjson.dumps(self.doc, option=orjson.OPT_SORT_KEYS).decode()

    def canonical(self) -> str:
        return self.raw

    def normalized(self) -> str:
        return self._normalized

    # --- codec ------------------------------------------------------------------------------

    def _validate(self, obj: Any) -> None:
        import jsonschema_rs

        try:
            self._validator.validate(obj)
        except jsonschema_rs.ValidationError as e:
            raise RecordInvalid(_path(e.instance_path), e.message) from None
        except ValueError as e:  # a value jsonschema-rs cannot take (e.g. a huge int)
            raise RecordInvalid("", str(e)) from None

    def encode_payload(self, obj: Any, message_name: str | None) -> bytes:
        self._validate(obj)
        try:
            return orjson.dumps(obj)
        except TypeError as e:
            raise RecordInvalid("", f"not JSON-serializable: {e}") from None

    def decode_payload(self, payload: memoryview) -> Any:
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            raise RecordInvalid("", f"payload is not JSON: {e}") from None
        self._validate(value)
        return value

    # --- compatibility ----------------------------------------------------------------------

    def reader_incompatibilities(self, writer: Any) -> list[str]:
        from app.common.schemas._json_compat import Compare

        return Compare(self, writer).run()


def _uris(name: str, base: Any) -> list[str]:
    uris = [name]
    if isinstance(base, str) and "://" not in name:
        from urllib.parse import urljoin

        joined = urljoin(base, name)
        if joined != name:
            uris.append(joined)
    if "://" not in name:
        # jsonschema-rs resolves a relative $ref of a schema without $id against this base.
        uris.append("json-schema:///" + name.lstrip("/"))
    return uris


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


__all__ = ["LIMITS", "JsonSchema"]
