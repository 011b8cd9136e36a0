"""PROTOBUF: ``.proto`` text (with imports) compiled by the protoc that grpcio-tools
bundles, into a ``FileDescriptorSet``; descriptors and message classes from protobuf's
``DescriptorPool`` and ``message_factory``, one private pool per schema.

Why protoc in a child process (``python -m grpc_tools.protoc``) rather than in-process:
protoc writes its error messages to the process's file descriptor 2, which only a child
lets us capture without redirecting the broker's own stderr, a child can be killed at a
deadline (``LIMITS.protoc_timeout``: a hostile schema cannot hang the registry), and a
crash of the compiler stays in the child. It costs ~0.2 s per new schema (schemas are
registered rarely; the compiled set is cached by text and references). protobuf's Python
package has no .proto parser of its own; grpcio-tools' in-process ``get_protos`` generates
Python modules, not descriptors.

Well-known imports (``google/protobuf/*.proto``) resolve from grpcio-tools' bundled
include directory; other imports must be references, written under their ``name``.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

from app.common.schema_errors import InvalidSchema, RecordInvalid
from app.common.schemas._util import check_depth, check_size, flatten_references
from app.common.schemas.types import LIMITS, Codec, ResolvedReference

# The main file's name inside the compiler's include directory (never a reference's name).
MAIN = "logbus_schema__main.proto"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*\.proto$")


def _include_dir() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


@functools.lru_cache(maxsize=256)
def _compile(
    files: tuple[tuple[str, str], ...], targets: tuple[str, ...], given: bytes, timeout: float
) -> bytes:
    """The serialized FileDescriptorSet of ``targets`` (names among ``files``, the .proto
    texts by import name) and their imports; ``given`` is a serialized FileDescriptorSet of
    imports known only as descriptors. Raises InvalidSchema with protoc's messages."""
    with tempfile.TemporaryDirectory(prefix="logbus-proto-") as tmp:
        for name, text in files:
            path = os.path.join(tmp, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "set.pb")
        argv = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp}",
            f"-I{_include_dir()}",
            f"--descriptor_set_out={out}",
            "--include_imports",
        ]
        if given:
            given_path = os.path.join(tmp, "given.pb")
            with open(given_path, "wb") as f:
                f.write(given)
            argv.append(f"--descriptor_set_in={given_path}")
        argv.extend(targets)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, cwd=tmp, check=False
            )
        except subprocess.TimeoutExpired:
            raise InvalidSchema(
                "PROTOBUF", f"the .proto compiler took longer than {timeout} s"
            ) from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            message = message.replace(MAIN, "schema")
            raise InvalidSchema("PROTOBUF", message or f"protoc exited {done.returncode}")
        with open(out, "rb") as f:
            data: bytes = f.read()
            return data


_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]+$")
_WELL_KNOWN = (
    "any", "api", "duration", "empty", "field_mask", "source_context", "struct",
    "timestamp", "type", "wrappers", "descriptor",
)  # fmt: skip


def _as_descriptor(text: str) -> Any:
    """The FileDescriptorProto of a schema given as base64 (Confluent's serialized form,
    what confluent-kafka's Python serializer registers), or None for .proto text."""
    import base64
    import binascii

    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    if not _BASE64.match(text):
        return None
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text, validate=False)
        )
    except (binascii.Error, DecodeError, ValueError):
        return None
    return proto if proto.message_type or proto.enum_type else None


def _well_known(name: str) -> Any:
    """The FileDescriptorProto of a google/protobuf/*.proto import, from protobuf's own."""
    import importlib

    from google.protobuf import descriptor_pb2

    stem = name.removeprefix("google/protobuf/").removesuffix(".proto")
    if not name.startswith("google/protobuf/") or stem not in _WELL_KNOWN:
        return None
    module = importlib.import_module(f"google.protobuf.{stem}_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _file_protos(raw: str, refs: list[tuple[str, str]]) -> list[Any]:
    """FileDescriptorProtos of the main schema (named MAIN) and everything it imports, in
    dependency order. Each text may be .proto text or base64 (Confluent's serialized form)."""
    from google.protobuf import descriptor_pb2

    given = descriptor_pb2.FileDescriptorSet()
    texts: list[tuple[str, str]] = []
    for name, text in [*refs, (MAIN, raw)]:
        proto = _as_descriptor(text)
        if proto is None:
            texts.append((name, text))
        else:
            proto.name = name
            given.file.append(proto)
    have = {p.name for p in given.file} | {n for n, _ in texts}
    missing = [d for p in given.file for d in p.dependency if d not in have]
    for dep in dict.fromkeys(missing):
        proto = _well_known(dep)
        if proto is None:
            raise InvalidSchema("PROTOBUF", f"import {dep!r} is not among the references")
        given.file.insert(0, proto)
    out: list[Any] = []
    if texts:
        data = _compile(
            tuple(texts),
            tuple(n for n, _ in texts),
            given.SerializeToString() if given.file else b"",
            LIMITS.protoc_timeout,
        )
        out.extend(descriptor_pb2.FileDescriptorSet.FromString(data).file)
    names = {p.name for p in out}
    # Descriptors given directly (protoc listed those it used; the others go after theirs).
    out[:0] = [p for p in given.file if p.name not in names and p.name != MAIN]
    out.extend(p for p in given.file if p.name == MAIN)
    return _dependency_order(out)


def _dependency_order(protos: list[Any]) -> list[Any]:
    by_name = {p.name: p for p in protos}
    done: set[str] = set()
    ordered: list[Any] = []
    for proto in protos:
        stack = [(proto, False)]
        while stack:
            p, expanded = stack.pop()
            if p.name in done:
                continue
            if expanded:
                done.add(p.name)
                ordered.append(p)
                continue
            stack.append((p, True))
            stack.extend(
                (by_name[d], False) for d in p.dependency if d in by_name and d not in done
            )
    return ordered


class ProtobufSchema(Codec):
    """A .proto file with its imports, as descriptors and message classes."""

    schema_type = "PROTOBUF"

    def __init__(self, raw: str, references: tuple[ResolvedReference, ...]) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        self.raw = raw
        self.references = references
        check_size("PROTOBUF", raw)
        check_depth("PROTOBUF", raw, "{", "}")
        refs: list[tuple[str, str]] = []
        for ref in flatten_references("PROTOBUF", references):
            if not _SAFE_NAME.match(ref.name) or ".." in ref.name.split("/"):
                raise InvalidSchema(
                    "PROTOBUF",
                    f"reference name {ref.name!r} is not a relative .proto import path",
                )
            check_depth("PROTOBUF", ref.schema, "{", "}", f"reference {ref.name!r}")
            refs.append((ref.name, ref.schema))
        if len({name for name, _ in refs}) != len(refs):
            raise InvalidSchema("PROTOBUF", "two references have the same import name")
        protos = _file_protos(raw, refs)
        self._pool = descriptor_pool.DescriptorPool()
        try:
            for proto in protos:
                self._pool.Add(proto)
            self.file = self._pool.FindFileByName(MAIN)
        except (TypeError, KeyError, ValueError) as e:
            raise InvalidSchema("PROTOBUF", str(e).replace(MAIN, "schema")) from None
        if not self.file.message_types_by_name:
            raise InvalidSchema("PROTOBUF", "the schema defines no message")
        main = next(p for p in protos if p.name == MAIN)
        self._first = main.message_type[0].name
        self._classes: dict[str, Any] = {}
        self._prefixes: dict[str, bytes] = {}
        self._factory = message_factory
        normal = descriptor_pb2.FileDescriptorProto()
        normal.CopyFrom(main)
        normal.ClearField("name")
        normal.ClearField("source_code_info")
        self._serialized = normal.SerializeToString(deterministic=True)

    def serialized(self) -> str:
        """Confluent's ``format=serialized`` form: the main file's FileDescriptorProto,
        base64 (what confluent-kafka's Protobuf serializer and deserializer ask for)."""
        import base64

        return base64.b64encode(self._serialized).decode("ascii")

    def canonical(self) -> str:
        return self.raw

    def normalized(self) -> str:
        """The main file's FileDescriptorProto (no file name, no comments or positions),
        base64: what protoc made of the text, so layout, comments and spelling of names
        do not count; and still a schema ``parse`` (and Confluent) accepts, so a registry
        may store it. (Confluent prints normalized .proto text instead; no maintained
        Python library prints .proto from descriptors.)"""
        return self.serialized()

    # --- messages ---------------------------------------------------------------------------

    def _descriptor(self, message_name: str | None) -> Any:
        package = self.file.package
        name = message_name or self._first
        for candidate in (name, f"{package}.{name}" if package else name):
            try:
                found = self._pool.FindMessageTypeByName(candidate.lstrip("."))
            except KeyError:
                continue
            if found.file is self.file or found.file.name == MAIN:
                return found
        raise RecordInvalid("", f"message {name!r} is not defined in the schema's file")

    def _class(self, descriptor: Any) -> Any:
        cls = self._classes.get(descriptor.full_name)
        if cls is None:
            cls = self._factory.GetMessageClass(descriptor)
            self._classes[descriptor.full_name] = cls
        return cls

    def message_class(self, message_name: str | None = None) -> Any:
        """The generated class of a message of the file (default: the first)."""
        return self._class(self._descriptor(message_name))

    # --- codec ------------------------------------------------------------------------------

    def encode_payload(self, obj: Any, message_name: str | None) -> bytes:
        from google.protobuf import json_format, message

        if isinstance(obj, message.Message):
            descriptor = self._descriptor(message_name or obj.DESCRIPTOR.full_name)
            if obj.DESCRIPTOR.full_name != descriptor.full_name:
                raise RecordInvalid(
                    "", f"a {obj.DESCRIPTOR.full_name} is not a {descriptor.full_name}"
                )
            msg = obj
        else:
            descriptor = self._descriptor(message_name)
            if not isinstance(obj, dict):
                raise RecordInvalid("", f"expected an object for {descriptor.full_name}")
            cls = self._class(descriptor)
            try:
                # Fast path: the message's constructor (upb, C) takes plain Python values.
                # Values in the proto3 JSON mapping only (int64 as a string, bytes as
                # base64, Timestamp as text...) make it raise, and json_format's parser,
                # ~5x slower, takes them and names the failing field.
                msg = cls(**obj)
            except (TypeError, ValueError, AttributeError, KeyError):
                msg = cls()
                try:
                    json_format.ParseDict(obj, msg)
                except json_format.ParseError as e:
                    raise RecordInvalid(_parse_error_path(str(e), descriptor), str(e)) from None
        missing = msg.FindInitializationErrors()
        if missing:
            raise RecordInvalid(missing[0], "required field is missing")
        body: bytes = msg.SerializeToString()
        prefix = self._prefixes.get(descriptor.full_name)
        if prefix is None:
            prefix = self._prefixes[descriptor.full_name] = _indexes(descriptor)
        return prefix + body

    def decode_payload(self, payload: memoryview) -> Any:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError

        pos, indexes = read_message_indexes(payload)
        descriptor = self._by_indexes(indexes)
        msg = self._class(descriptor)()
        try:
            msg.ParseFromString(bytes(payload[pos:]))
        except DecodeError as e:
            raise RecordInvalid("", f"Protobuf payload does not decode: {e}") from None
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    def _by_indexes(self, indexes: list[int]) -> Any:
        types = self.file.message_types_by_name
        level = [types[p.name] for p in self._ordered_top()]
        descriptor = None
        for i in indexes:
            if not 0 <= i < len(level):
                raise RecordInvalid("", f"message index {indexes} names no message of the schema")
            descriptor = level[i]
            level = list(descriptor.nested_types)
        return descriptor

    def _ordered_top(self) -> list[Any]:
        # message_types_by_name keeps declaration order (a dict built from the file proto).
        return list(self.file.message_types_by_name.values())

    # --- compatibility ----------------------------------------------------------------------

    def reader_incompatibilities(self, writer: Any) -> list[str]:
        from app.common.schemas._protobuf_compat import differences

        return differences(original=writer.file, update=self.file)


def _indexes(descriptor: Any) -> bytes:
    """Confluent's message-index array for ``descriptor``: the path of indexes from the
    file's top-level messages down; ``[0]`` is written as the single byte 0."""
    path: list[int] = []
    d = descriptor
    while d.containing_type is not None:
        path.append(list(d.containing_type.nested_types).index(d))
        d = d.containing_type
    path.append(list(d.file.message_types_by_name.values()).index(d))
    path.reverse()
    if path == [0]:
        return b"\x00"
    return b"".join(_zigzag_varint(n) for n in (len(path), *path))


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise RecordInvalid("", "truncated message-index array")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return pos, (value >> 1) ^ -(value & 1)
        shift += 7


def read_message_indexes(data: memoryview) -> tuple[int, list[int]]:
    pos, count = _read_varint(data, 0)
    if count == 0:
        return pos, [0]
    if count < 0 or count > 64:
        raise RecordInvalid("", f"message-index array of {count} entries")
    indexes = []
    for _ in range(count):
        pos, i = _read_varint(data, pos)
        indexes.append(i)
    return pos, indexes


def _parse_error_path(message: str, descriptor: Any) -> str:
    """The field path in json_format's message: nested ``Failed to parse X field:``
    prefixes, or ``... at "Msg.a.b"``, without the message's own name."""
    chain = re.findall(r"Failed to parse (\w+) field", message)
    found = re.search(r'at "([^"]+)"', message)
    if found:
        at = found.group(1)
        head = descriptor.name
        at = "" if at == head else at.removeprefix(head + ".")
        if at and (not chain or len(at.split(".")) > len(chain)):
            return at
    return ".".join(chain)
