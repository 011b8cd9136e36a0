"""A client of Confluent's Schema Registry REST API: Logbus's own (``/schema-registry`` on
every broker) or any other that speaks it. Blocking (:class:`SchemaRegistryClient`) and
asyncio (:class:`AsyncSchemaRegistryClient`), with confluent-kafka's method names.

Written once: every method is a flow (a generator, :mod:`app.client._drive`) that yields
the :class:`~app.client._http.Call` it needs and consults the caches; the two facades only
run the calls (``httpx.Client`` or ``httpx.AsyncClient``). What is cached: a schema by id
(ids are never reused: forever), the id of a (subject, schema) registered or looked up,
and a (subject, version number) (a version's schema never changes). ``latest`` is never
cached here (the serializers' ``use.latest.version`` keeps its own, short-lived).

Errors: Confluent's error bodies (``{"error_code": 40401, "message": ...}``) become the
classes of :mod:`app.common.schema_errors` by their Confluent code (``SubjectNotFound``,
``IncompatibleSchema``, ``InvalidSchema``...; ``exc.confluent_code`` has the code); a
Logbus error body (503 while the registry starts) becomes its class as for every SDK call;
an unreachable registry is ``BrokerUnavailable``.

Concurrency: a client may be shared by threads (blocking) or tasks (asyncio); the caches
are dicts written whole per entry (a race fetches twice, never corrupts).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson

from app.client import _http
from app.client._drive import drive_async, drive_sync
from app.client.auth import Auth, authorization
from app.client.errors import error_from_body
from app.common import schema_errors
from app.common.errors import LogbusError
from app.common.schema_errors import InvalidSchema

T = TypeVar("T")
Flow = Generator[_http.Call[Any], Any, T]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class SchemaReference:
    """A schema's reference to another: how the schema names it (an Avro full name, a
    .proto import path, a JSON Schema ``$ref``), and the subject and version that hold it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """A schema as registered: its text, type (AVRO, JSON, PROTOBUF) and references."""

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type.upper() != "AVRO":
            out["schemaType"] = self.schema_type.upper()
        if self.references:
            out["references"] = [
                {"name": r.name, "subject": r.subject, "version": r.version}
                for r in self.references
            ]
        return out


@dataclass(frozen=True)
class RegisteredSchema:
    """A version of a subject: its schema's id, the schema, the subject, the version."""

    schema_id: int
    schema: Schema
    subject: str
    version: int


@dataclass(frozen=True)
class CompatibilityResult:
    """``is_compatible``, and the registry's reasons when it is not (``verbose``)."""

    is_compatible: bool
    messages: tuple[str, ...] = field(default=())


def _schema_of(body: dict[str, Any]) -> Schema:
    refs = tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in body.get("references") or ()
    )
    return Schema(str(body["schema"]), str(body.get("schemaType") or "AVRO"), refs)


def _registered_of(body: dict[str, Any]) -> RegisteredSchema:
    return RegisteredSchema(
        int(body["id"]), _schema_of(body), str(body["subject"]), int(body["version"])
    )


def _by_confluent_code() -> dict[int, type[LogbusError]]:
    """The error classes by Confluent code (the first class naming a code wins:
    InvalidSchema for 42201, declared first in the tree's order below)."""
    found: dict[int, type[LogbusError]] = {42201: InvalidSchema}
    for value in vars(schema_errors).values():
        if isinstance(value, type) and issubclass(value, LogbusError):
            code = vars(value).get("confluent_code")
            if isinstance(code, int):
                found.setdefault(code, value)
    return found


_BY_CODE = _by_confluent_code()


def registry_error(status: int, body: bytes) -> LogbusError:
    """The exception for a registry's error answer (Confluent's body, or Logbus's)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error_code"), int):
        code = int(data["error_code"])
        cls = (
            _BY_CODE.get(code)
            or _BY_CODE.get(status * 100 + 1)
            or schema_errors.SchemaRegistryError
        )
        exc = cls.__new__(cls)
        # The registry's own message, verbatim; the class's __init__ would rebuild one.
        LogbusError.__init__(exc, str(data.get("message", "")), confluent_code=code, status=status)
        return exc
    return error_from_body(status, body)


def _subject(subject: str) -> str:
    return quote(subject, safe="")


def _call(
    method: str,
    path: str,
    parse: Callable[[Any], T],
    *,
    json: Any = None,
    params: dict[str, str | int] | None = None,
) -> _http.Call[T]:
    return _http.Call(
        method,
        path,
        parse,
        params=params or {},
        json=json,
        content_type=CONTENT_TYPE,
        errors=registry_error,
    )


class RegistryCore:
    """The flows of every registry method, and the caches; no I/O (see the module)."""

    def __init__(self, cache_capacity: int = 1000) -> None:
        self.cache_capacity = cache_capacity
        self._by_id: dict[int, Schema] = {}
        self._ids: dict[tuple[str, Schema, bool], RegisteredSchema | int] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}

    def _remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        if len(cache) >= self.cache_capacity:
            cache.clear()  # a working set of schemas is small; a clear is rare and cheap
        cache[key] = value

    # -- schemas and versions ------------------------------------------------------------

    def register_schema_flow(self, subject: str, schema: Schema, normalize: bool) -> Flow[int]:
        key = (subject, schema, normalize)
        found = self._ids.get(key)
        if found is not None:
            return found if isinstance(found, int) else found.schema_id
        params: dict[str, str | int] = {"normalize": "true"} if normalize else {}
        schema_id: int = yield _call(
            "POST",
            f"/subjects/{_subject(subject)}/versions",
            lambda b: int(b["id"]),
            json=schema.body(),
            params=params,
        )
        # Not cached by id: get_schema gives the registry's canonical text, not ours.
        self._remember(self._ids, key, schema_id)
        return schema_id

    def get_schema_flow(self, schema_id: int) -> Flow[Schema]:
        found = self._by_id.get(schema_id)
        if found is not None:
            return found
        schema: Schema = yield _call("GET", f"/schemas/ids/{int(schema_id)}", _schema_of)
        self._remember(self._by_id, schema_id, schema)
        return schema

    def lookup_schema_flow(
        self, subject: str, schema: Schema, normalize: bool
    ) -> Flow[RegisteredSchema]:
        key = (subject, schema, normalize)
        found = self._ids.get(key)
        if isinstance(found, RegisteredSchema):
            return found
        params: dict[str, str | int] = {"normalize": "true"} if normalize else {}
        registered: RegisteredSchema = yield _call(
            "POST",
            f"/subjects/{_subject(subject)}",
            _registered_of,
            json=schema.body(),
            params=params,
        )
        self._remember(self._ids, key, registered)
        self._remember(self._by_id, registered.schema_id, registered.schema)
        return registered

    def get_version_flow(self, subject: str, version: int | str) -> Flow[RegisteredSchema]:
        """``version``: a number (cached) or ``"latest"`` (always asked)."""
        if isinstance(version, int):
            found = self._versions.get((subject, version))
            if found is not None:
                return found
        registered: RegisteredSchema = yield _call(
            "GET",
            f"/subjects/{_subject(subject)}/versions/{quote(str(version), safe='')}",
            _registered_of,
        )
        self._remember(self._versions, (subject, registered.version), registered)
        self._remember(self._by_id, registered.schema_id, registered.schema)
        return registered

    def resolve_references_flow(self, schema: Schema) -> Flow[tuple[Any, ...]]:
        """``schema``'s references as :class:`app.common.schemas.ResolvedReference` trees
        (what ``app.common.schemas.parse`` takes), each version fetched once (cached)."""
        from app.common.schemas import ResolvedReference

        out = []
        for ref in schema.references:
            version = yield from self.get_version_flow(ref.subject, ref.version)
            children = yield from self.resolve_references_flow(version.schema)
            out.append(
                ResolvedReference(
                    ref.name,
                    ref.subject,
                    ref.version,
                    version.schema.schema_type.upper(),
                    version.schema.schema_str,
                    children,
                )
            )
        return tuple(out)

    # -- listings and deletes (never cached) ---------------------------------------------------

    @staticmethod
    def get_subjects_call(prefix: str = "", deleted: bool = False) -> _http.Call[list[str]]:
        params: dict[str, str | int] = {}
        if prefix:
            params["subjectPrefix"] = prefix
        if deleted:
            params["deleted"] = "true"
        return _call("GET", "/subjects", lambda b: [str(s) for s in b], params=params)

    @staticmethod
    def get_versions_call(subject: str, deleted: bool = False) -> _http.Call[list[int]]:
        params: dict[str, str | int] = {"deleted": "true"} if deleted else {}
        return _call(
            "GET",
            f"/subjects/{_subject(subject)}/versions",
            lambda b: [int(v) for v in b],
            params=params,
        )

    def delete_subject_flow(self, subject: str, permanent: bool) -> Flow[list[int]]:
        params: dict[str, str | int] = {"permanent": "true"} if permanent else {}
        versions: list[int] = yield _call(
            "DELETE", f"/subjects/{_subject(subject)}", lambda b: [int(v) for v in b], params=params
        )
        self._forget(subject)
        return versions

    def delete_version_flow(self, subject: str, version: int | str, permanent: bool) -> Flow[int]:
        params: dict[str, str | int] = {"permanent": "true"} if permanent else {}
        deleted: int = yield _call(
            "DELETE",
            f"/subjects/{_subject(subject)}/versions/{quote(str(version), safe='')}",
            int,
            params=params,
        )
        self._forget(subject)
        return deleted

    def _forget(self, subject: str) -> None:
        """A delete changes what lookups answer: drop the subject's cached ids and versions
        (schemas by id stay: ids are never reused)."""
        for key in [k for k in self._ids if k[0] == subject]:
            self._ids.pop(key, None)
        for vkey in [k for k in self._versions if k[0] == subject]:
            self._versions.pop(vkey, None)

    # -- compatibility, config, mode -------------------------------------------------------------

    @staticmethod
    def compatibility_call(
        subject: str, schema: Schema, version: int | str | None
    ) -> _http.Call[CompatibilityResult]:
        """``version`` None: against every version (Confluent's ``/versions`` path)."""
        path = f"/compatibility/subjects/{_subject(subject)}/versions"
        if version is not None:
            path += f"/{quote(str(version), safe='')}"
        return _call(
            "POST",
            path,
            lambda b: CompatibilityResult(
                bool(b["is_compatible"]), tuple(str(m) for m in b.get("messages") or ())
            ),
            json=schema.body(),
            params={"verbose": "true"},
        )

    @staticmethod
    def get_config_call(subject: str | None, default_to_global: bool) -> _http.Call[str]:
        path = "/config" if subject is None else f"/config/{_subject(subject)}"
        params: dict[str, str | int] = {"defaultToGlobal": "true"} if default_to_global else {}
        return _call("GET", path, lambda b: str(b["compatibilityLevel"]), params=params)

    @staticmethod
    def set_config_call(subject: str | None, level: str) -> _http.Call[str]:
        path = "/config" if subject is None else f"/config/{_subject(subject)}"
        return _call(
            "PUT", path, lambda b: str(b["compatibility"]), json={"compatibility": level.upper()}
        )

    @staticmethod
    def delete_config_call(subject: str) -> _http.Call[str]:
        return _call(
            "DELETE", f"/config/{_subject(subject)}", lambda b: str(b["compatibilityLevel"])
        )

    @staticmethod
    def get_mode_call(subject: str | None) -> _http.Call[str]:
        path = "/mode" if subject is None else f"/mode/{_subject(subject)}"
        return _call("GET", path, lambda b: str(b["mode"]))

    @staticmethod
    def set_mode_call(subject: str | None, mode: str) -> _http.Call[str]:
        path = "/mode" if subject is None else f"/mode/{_subject(subject)}"
        return _call("PUT", path, lambda b: str(b["mode"]), json={"mode": mode.upper()})


def _one(call: _http.Call[T]) -> Flow[T]:
    result: T = yield call
    return result


def _options(conf: dict[str, Any] | str) -> tuple[str, int, Auth, int]:
    """(url, timeout ms, auth, cache capacity) from confluent-kafka's config dict (``url``,
    ``basic.auth.user.info`` "user:password") or a plain URL."""
    from app.client.auth import BasicAuth

    if isinstance(conf, str):
        conf = {"url": conf}
    conf = dict(conf)
    url = conf.pop("url", None)
    if not isinstance(url, str) or not url:
        raise ValueError("the registry's config needs a url, e.g. http://HOST:PORT/schema-registry")
    auth = conf.pop("auth", None)
    user_info = conf.pop("basic.auth.user.info", None)
    if user_info is not None:
        user, _, password = str(user_info).partition(":")
        auth = BasicAuth(user, password)
    timeout_ms = int(conf.pop("timeout.ms", conf.pop("request_timeout_ms", 30_000)))
    capacity = int(conf.pop("cache.capacity", 1000))
    if conf:
        raise ValueError(f"unknown registry config: {', '.join(sorted(conf))}")
    return url.rstrip("/"), timeout_ms, auth, capacity


class _Methods(RegistryCore):
    """The public methods, each a flow handed to the facade's ``_run``."""

    def _run(self, flow: Flow[T]) -> Any:
        raise NotImplementedError

    def register_schema(self, subject: str, schema: Schema, normalize_schemas: bool = False) -> Any:
        """Register ``schema`` under ``subject`` (a new version, or the existing one's id);
        its id. 409 ``IncompatibleSchema`` under the subject's compatibility level."""
        return self._run(self.register_schema_flow(subject, schema, normalize_schemas))

    def get_schema(self, schema_id: int) -> Any:
        """The schema with this id (cached forever: ids are never reused)."""
        return self._run(self.get_schema_flow(schema_id))

    def lookup_schema(self, subject: str, schema: Schema, normalize_schemas: bool = False) -> Any:
        """The version of ``subject`` that holds ``schema``; 40403 ``SchemaNotFound`` if none."""
        return self._run(self.lookup_schema_flow(subject, schema, normalize_schemas))

    def get_latest_version(self, subject: str) -> Any:
        return self._run(self.get_version_flow(subject, "latest"))

    def get_version(self, subject: str, version: int | str) -> Any:
        return self._run(self.get_version_flow(subject, version))

    def get_subjects(self, prefix: str = "", deleted: bool = False) -> Any:
        return self._run(_one(self.get_subjects_call(prefix, deleted)))

    def get_versions(self, subject: str, deleted: bool = False) -> Any:
        return self._run(_one(self.get_versions_call(subject, deleted)))

    def delete_subject(self, subject: str, permanent: bool = False) -> Any:
        """Soft-delete (``permanent``: hard-delete a soft-deleted) subject; its versions."""
        return self._run(self.delete_subject_flow(subject, permanent))

    def delete_version(self, subject: str, version: int | str, permanent: bool = False) -> Any:
        return self._run(self.delete_version_flow(subject, version, permanent))

    def check_compatibility(
        self, subject: str, schema: Schema, version: int | str | None = "latest"
    ) -> Any:
        """A :class:`CompatibilityResult` for ``schema`` against ``version`` of ``subject``
        (None: every version), with the registry's reasons."""
        return self._run(_one(self.compatibility_call(subject, schema, version)))

    def get_compatibility(self, subject: str | None = None, default_to_global: bool = False) -> Any:
        """The subject's level (None: the global one); 40408 when the subject has none of
        its own (``default_to_global``: the global level then)."""
        return self._run(_one(self.get_config_call(subject, default_to_global)))

    def set_compatibility(self, subject: str | None = None, level: str = "BACKWARD") -> Any:
        return self._run(_one(self.set_config_call(subject, level)))

    def delete_compatibility(self, subject: str) -> Any:
        return self._run(_one(self.delete_config_call(subject)))

    def get_mode(self, subject: str | None = None) -> Any:
        return self._run(_one(self.get_mode_call(subject)))

    def set_mode(self, subject: str | None, mode: str) -> Any:
        return self._run(_one(self.set_mode_call(subject, mode)))


class SchemaRegistryClient(_Methods):
    """Blocking client. ``conf``: a URL, or confluent-kafka's dict (``url``,
    ``basic.auth.user.info``, ``timeout.ms``, ``cache.capacity``) plus ``auth`` (an
    :mod:`app.client.auth` object). Use as a context manager or ``close()`` it."""

    def __init__(self, conf: dict[str, Any] | str) -> None:
        url, timeout_ms, auth, capacity = _options(conf)
        super().__init__(capacity)
        self.url = url
        self._client = _http.sync_client(url, timeout_ms, 16, authorization(auth))

    def _run(self, flow: Flow[T]) -> T:
        return drive_sync(flow, lambda call: _http.run_sync(self._client, call))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SchemaRegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSchemaRegistryClient(_Methods):
    """The asyncio client: the same methods, each awaited (``await client.get_schema(1)``)."""

    def __init__(
        self, conf: dict[str, Any] | str, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        url, timeout_ms, auth, capacity = _options(conf)
        super().__init__(capacity)
        self.url = url
        self._client = _http.async_client(
            url, timeout_ms, 16, transport, authorization=authorization(auth)
        )

    def _run(self, flow: Flow[T]) -> Any:
        return drive_async(flow, lambda call: _http.run_async(self._client, call))

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncSchemaRegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
