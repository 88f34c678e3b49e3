"""The Kubernetes API test server: HTTP(S) in-process, controlled from Python (see the package docstring)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
from aiohttp import web

from simulation.kubeapi import discovery
from simulation.kubeapi.aggregator import (
    ANONYMOUS_USER,
    AUTHENTICATED_GROUP,
    UNAUTHENTICATED_GROUP,
    AggregatedApi,
    aggregated,
    certificate_user,
    proxy,
)
from simulation.kubeapi.objects import (
    KINDS,
    JsonObject,
    Kind,
    deployment_object,
    pod_object,
    replica_set_object,
    status_object,
)
from simulation.kubeapi.requestinfo import access_attributes, forbidden_message
from simulation.kubeapi.reviews import (
    AccessGrant,
    AuthorizationPolicy,
    TokenUser,
    json_body,
    policy_of,
    review_reply,
    reviewed_audiences,
)
from simulation.kubeapi.selectors import SelectorError, field_predicate, label_predicate
from simulation.kubeapi.store import Clock, ExpiredError, Store, translate
from simulation.kubeapi.tables import table, wants_table
from simulation.kubeapi.versions import GROUP as RESOURCE_GROUP
from simulation.kubeapi.versions import SINCE as RESOURCE_VERSIONS
from simulation.kubeapi.versions import resource_slice_as

_HISTORY_LIMIT: Final = 100_000
_DEFAULT_WATCH_SECONDS: Final = 1800


class KubeApiServer:
    """The Kubernetes API test server. `await start()` returns its URL; every control method is thread-safe.

    `authorization` decides SubjectAccessReviews: a callable over the SAR `spec`, or a table of `AccessGrant`s
    (allow when one matches); None allows everything. `client_token`, when set, is the bearer token every request
    to this server must carry (as a real API server requires credentials of its clients). `resource_api_versions` are
    the versions of resource.k8s.io served (versions.py `served_versions` gives those of a Kubernetes release).
    """

    def __init__(
        self,
        *,
        authorization: AuthorizationPolicy | Iterable[AccessGrant] | None = None,
        client_token: str | None = None,
        bookmark_interval: float = 1.0,
        history_limit: int = _HISTORY_LIMIT,
        clock: Clock = lambda: datetime.now(UTC),
        resource_api_versions: Iterable[str] = ("v1",),
    ) -> None:
        self._resource_versions = tuple(resource_api_versions)
        unknown = [v for v in self._resource_versions if v not in RESOURCE_VERSIONS]
        if unknown:
            raise ValueError(f"resource.k8s.io has no version {unknown[0]!r} (known: {', '.join(RESOURCE_VERSIONS)})")
        self._store = Store(clock=clock, history_limit=history_limit)
        self._tokens: dict[str, TokenUser] = {}
        self._policy: AuthorizationPolicy = policy_of(authorization)
        self._client_token = client_token
        self._bookmark_interval = bookmark_interval
        self._counts: Counter[tuple[str, str]] = Counter()
        self._control = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._watch_generation = 0
        self._forbidden: frozenset[str] = frozenset()
        self._runner: web.AppRunner | None = None
        self._aggregated: dict[str, AggregatedApi] = {}
        self._proxy_session: aiohttp.ClientSession | None = None
        self.url = ""

    # -- lifecycle --

    async def start(self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None) -> str:
        """Serve on host:port (0 picks a free port; pass an earlier port to restart in place). Returns the URL."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        app = web.Application(middlewares=[self._aggregator, self._credentials])
        app.router.add_get("/version", discovery.version)
        app.router.add_get("/api", discovery.api_versions)
        app.router.add_get("/apis", self._api_groups)
        app.router.add_get("/api/v1", discovery.resource_list)
        app.router.add_get("/apis/{group}/{version}", discovery.resource_list)
        for prefix in ("/api/v1", "/apis/apps/v1", "/apis/autoscaling/v2"):
            app.router.add_get(prefix + "/{resource}", self._collection)
            app.router.add_get(prefix + "/{resource}/{name}", self._object)  # cluster-scoped: nodes
            app.router.add_get(prefix + "/namespaces/{namespace}/{resource}", self._collection)
            app.router.add_get(prefix + "/namespaces/{namespace}/{resource}/{name}", self._object)
        for version in self._resource_versions:
            app.router.add_get(f"/apis/{RESOURCE_GROUP}/{version}/{{resource}}", self._collection)
            app.router.add_get(f"/apis/{RESOURCE_GROUP}/{version}/{{resource}}/{{name}}", self._object)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", self._access_review)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"{'https' if ssl_context else 'http'}://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        """Stop serving; open watches end. The stored objects and history survive a later `start()`."""
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._proxy_session is not None:
            await self._proxy_session.close()
            self._proxy_session = None

    def aggregate(self, api: AggregatedApi) -> None:
        """Serve `/apis/<api.group>/...` by proxying to the APIService (see aggregator.py), and list the group."""
        with self._control:
            self._aggregated[api.group] = api

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    # -- control: objects --

    def put_object(self, resource: str, obj: Mapping[str, Any]) -> JsonObject:
        """Create or replace an object ("pods", "replicasets", "configmaps"); returns it as stored."""
        if resource not in KINDS:
            raise ValueError(f"unknown resource {resource!r}; known: {', '.join(KINDS)}")
        stored = self._store.put(resource, obj)
        self._notify()
        return stored

    def delete_object(self, resource: str, namespace: str, name: str) -> bool:
        deleted = self._store.delete(resource, namespace, name)
        if deleted:
            self._notify()
        return deleted

    def put_pod(self, namespace: str, name: str, **fields: Any) -> JsonObject:
        """Create or replace a pod built by `pod_object(namespace, name, **fields)`."""
        return self.put_object("pods", pod_object(namespace, name, **fields))

    def delete_pod(self, namespace: str, name: str) -> bool:
        return self.delete_object("pods", namespace, name)

    def put_resource_slice(self, obj: Mapping[str, Any]) -> JsonObject:
        """Create or replace a ResourceSlice (cluster-scoped), e.g. one of `simulation.dra.resource_slices_of`."""
        return self.put_object("resourceslices", obj)

    def put_deployment(self, namespace: str, name: str, **fields: Any) -> JsonObject:
        return self.put_object("deployments", deployment_object(namespace, name, **fields))

    def put_replica_set(self, namespace: str, name: str, **fields: Any) -> JsonObject:
        return self.put_object("replicasets", replica_set_object(namespace, name, **fields))

    def delete_replica_set(self, namespace: str, name: str) -> bool:
        return self.delete_object("replicasets", namespace, name)

    def get_object(self, resource: str, namespace: str, name: str) -> JsonObject | None:
        found = self._store.get(resource, namespace, name)
        return copy.deepcopy(found) if found is not None else None

    def set_authentication_configmap(self, data: Mapping[str, str]) -> JsonObject:
        """Publish `kube-system/extension-apiserver-authentication` with the given data keys."""
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": dict(data),
        }
        return self.put_object("configmaps", obj)

    @property
    def resource_version(self) -> int:
        return self._store.rv

    def compact(self) -> None:
        """Forget history up to now: a watch or continue token from an older resourceVersion gets 410 Gone."""
        self._store.compact()

    def close_watches(self) -> None:
        """End every open watch stream (as an API server does when its watch times out or it restarts)."""
        with self._control:
            self._watch_generation += 1
        self._notify()

    # -- control: authentication and authorization --

    def set_token(self, token: str, user: TokenUser) -> None:
        with self._control:
            self._tokens[token] = user

    def set_authorization(self, policy: AuthorizationPolicy | Iterable[AccessGrant] | None) -> None:
        with self._control:
            self._policy = policy_of(policy)

    def set_forbidden(self, resources: Iterable[str]) -> None:
        """Answer 403 to every list, watch and get of these resources (RBAC that does not grant them)."""
        with self._control:
            self._forbidden = frozenset(resources)

    # -- control: observation --

    def request_count(self, verb: str, resource: str) -> int:
        """How many requests of `verb` (list, watch, get, create) on `resource` this server has answered."""
        with self._control:
            return self._counts[(verb, resource)]

    def _count(self, verb: str, resource: str) -> None:
        with self._control:
            self._counts[(verb, resource)] += 1

    def _notify(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with suppress(RuntimeError):  # the loop stopped between the check and the call
            loop.call_soon_threadsafe(self._wake_watchers)

    def _wake_watchers(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = asyncio.Event()

    # -- HTTP --

    @web.middleware
    async def _aggregator(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        with self._control:
            api = aggregated(self._aggregated, request.path)
        if api is None:
            response: web.StreamResponse = await handler(request)
            return response
        if self._proxy_session is None:
            self._proxy_session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        caller = self._caller(request)
        if caller is None:
            return _status(401, "Unauthorized", "Unauthorized")
        user, groups = caller
        # kube-apiserver authorizes the request before its aggregator proxies it
        attributes = access_attributes(request.method, request.path, request.query)
        with self._control:
            policy = self._policy
        if not policy({"user": user, "groups": groups, **attributes}):
            return _status(403, "Forbidden", forbidden_message(user, attributes))
        return await proxy(api, request, self._proxy_session, user, groups)

    def _caller(self, request: web.Request) -> tuple[str, list[str]] | None:
        """Who sent the request, as kube-apiserver's authenticators find it: the client certificate's user, else the
        user of a bearer token this server issued for its own audience, either with `system:authenticated`; no
        credential at all is the anonymous user; None for a token it does not accept (401)."""
        found = certificate_user(request)
        authorization = request.headers.get("Authorization", "")
        if found is None and authorization:
            scheme, _, token = authorization.partition(" ")
            with self._control:
                user = self._tokens.get(token) if scheme.lower() == "bearer" else None
            if user is None or not reviewed_audiences(user, ()):
                return None
            found = (user.username, list(user.groups))
        if found is None:
            return ANONYMOUS_USER, [UNAUTHENTICATED_GROUP]
        name, groups = found
        return name, [*groups, *([] if AUTHENTICATED_GROUP in groups else [AUTHENTICATED_GROUP])]

    async def _api_groups(self, request: web.Request) -> web.Response:
        with self._control:
            extra = [api.group_entry() for api in self._aggregated.values()]
        return discovery.api_group_list(extra)

    @web.middleware
    async def _credentials(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if self._client_token is not None:
            if request.headers.get("Authorization", "") != f"Bearer {self._client_token}":
                return _status(401, "Unauthorized", "Unauthorized")
        try:
            response: web.StreamResponse = await handler(request)
        except SelectorError as e:
            return _status(400, "BadRequest", str(e))
        return response

    def _kind_of(self, request: web.Request) -> tuple[Kind, str] | None:
        """The kind a request names, and the group version it asks for it in."""
        kind = KINDS.get(request.match_info["resource"])
        if kind is None or ("namespace" in request.match_info and not kind.namespaced):
            return None
        if request.path.startswith(kind.prefix + "/"):
            return kind, kind.group_version
        if kind.group_version.startswith(RESOURCE_GROUP + "/"):  # another served version of resource.k8s.io
            version = request.path.removeprefix(f"/apis/{RESOURCE_GROUP}/").partition("/")[0]
            if version in self._resource_versions:
                return kind, f"{RESOURCE_GROUP}/{version}"
        return None

    @staticmethod
    def _present(kind: Kind, group_version: str, obj: JsonObject) -> JsonObject:
        """A stored object as the requested version writes it."""
        if group_version == kind.group_version:
            return obj
        return resource_slice_as(obj, group_version.rpartition("/")[2])

    def _refused(self, kind: Kind) -> web.Response | None:
        with self._control:
            forbidden = kind.resource in self._forbidden
        if not forbidden:
            return None
        group = kind.group_version.rpartition("/")[0]
        message = (
            f'{kind.resource} is forbidden: User "system:serviceaccount:gpu-pulse:adapter" cannot list resource '
            f'"{kind.resource}" in API group "{group}" at the cluster scope'
        )
        return _status(403, "Forbidden", message)

    async def _object(self, request: web.Request) -> web.Response:
        found = self._kind_of(request)
        if found is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        kind, group_version = found
        self._count("get", kind.resource)
        if refused := self._refused(kind):
            return refused
        ns, name = request.match_info.get("namespace", ""), request.match_info["name"]
        obj = self._store.get(kind.resource, ns, name)
        if obj is None:
            return _status(404, "NotFound", f'{kind.resource} "{name}" not found')
        shown = self._present(kind, group_version, obj)
        if wants_table(request.headers.get("Accept", "")):  # kubectl get <kind> <name>
            metadata = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return web.json_response(self._table(kind, [shown], metadata, request.query))
        return web.json_response(shown)

    def _table(
        self, kind: Kind, objects: list[JsonObject], metadata: JsonObject, query: Mapping[str, str]
    ) -> JsonObject:
        return table(
            kind.resource,
            objects,
            self._store.clock(),
            metadata=metadata,
            include_object=query.get("includeObject", ""),
        )

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        found = self._kind_of(request)
        if found is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        kind, group_version = found
        if refused := self._refused(kind):
            self._count("list", kind.resource)
            return refused
        query = request.query
        namespace = request.match_info.get("namespace")
        labels = label_predicate(query.get("labelSelector"))
        fields = field_predicate(query.get("fieldSelector"), kind.fields)

        def selected(obj: Mapping[str, Any]) -> bool:
            meta = obj["metadata"]
            in_namespace = namespace is None or meta.get("namespace") == namespace
            return in_namespace and labels(meta.get("labels") or {}) and fields(obj)

        if query.get("watch", "").lower() in ("1", "true"):
            self._count("watch", kind.resource)
            return await self._watch(request, kind, group_version, selected)
        self._count("list", kind.resource)
        return self._list(kind, group_version, query, selected, as_table=wants_table(request.headers.get("Accept", "")))

    def _list(
        self,
        kind: Kind,
        group_version: str,
        query: Mapping[str, str],
        selected: Callable[[Mapping[str, Any]], bool],
        *,
        as_table: bool = False,
    ) -> web.Response:
        rv, objects = self._store.snapshot(kind.resource)
        start: tuple[str, str] | None = None
        if token := query.get("continue"):
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                rv, start = int(decoded["rv"]), (str(decoded["start"][0]), str(decoded["start"][1]))
            except (ValueError, KeyError, TypeError, IndexError, binascii.Error):
                return _status(400, "BadRequest", "continue key is not valid")
            if rv < self._store.compacted_rv:
                return _status(
                    410, "Expired", "The provided continue parameter is too old to display a consistent list"
                )
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            return _status(400, "BadRequest", "limit must be an integer")
        items: list[JsonObject] = []
        next_token = ""
        for obj in objects:
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if start is not None and key <= start:
                continue
            if not selected(obj):
                continue
            if limit and len(items) == limit:
                last = items[-1]["metadata"]
                cont = {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}
                next_token = base64.urlsafe_b64encode(json.dumps(cont).encode()).decode()
                break
            items.append(obj)
        metadata: JsonObject = {"resourceVersion": str(rv)}
        if next_token:
            metadata["continue"] = next_token
        items = [self._present(kind, group_version, item) for item in items]
        if as_table:
            return web.json_response(self._table(kind, items, metadata, query))
        body = {"kind": kind.kind + "List", "apiVersion": group_version, "metadata": metadata, "items": items}
        return web.Response(body=json.dumps(body).encode(), content_type="application/json")

    async def _watch(
        self, request: web.Request, kind: Kind, group_version: str, selected: Callable[[Mapping[str, Any]], bool]
    ) -> web.StreamResponse:
        query = request.query
        try:
            timeout = float(query.get("timeoutSeconds") or _DEFAULT_WATCH_SECONDS)
            since = query.get("resourceVersion") or "0"
            cursor = int(since)
        except ValueError:
            return _status(400, "BadRequest", "resourceVersion and timeoutSeconds must be integers")
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("1", "true")
        if since != "0":
            try:
                self._store.events_after(cursor, kind.resource)
            except ExpiredError as e:
                return _status(410, "Expired", str(e))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with self._control:
            generation = self._watch_generation

        async def send(event_type: str, obj: JsonObject) -> None:
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                obj = self._present(kind, group_version, obj)
            await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

        try:
            if since == "0":  # start with the current state, as synthetic ADDED events
                cursor, objects = self._store.snapshot(kind.resource)
                for obj in objects:
                    if selected(obj):
                        await send("ADDED", obj)
            last_sent = cursor
            next_bookmark = loop.time() + self._bookmark_interval
            while self._watch_generation == generation and self._runner is not None:
                wake = self._wake
                assert wake is not None
                try:
                    now_rv, events = self._store.events_after(cursor, kind.resource)
                except ExpiredError as e:
                    await send("ERROR", status_object(410, "Expired", str(e)))
                    break
                for event in events:
                    translated = translate(event, selected)
                    if translated is not None:
                        await send(*translated)
                        last_sent = event.rv
                cursor = now_rv
                now = loop.time()
                if bookmarks and now >= next_bookmark:
                    if cursor > last_sent:
                        meta = {"resourceVersion": str(cursor)}
                        await send("BOOKMARK", {"kind": kind.kind, "apiVersion": group_version, "metadata": meta})
                        last_sent = cursor
                    next_bookmark = now + self._bookmark_interval
                if now >= deadline:
                    break
                wait = min(deadline, next_bookmark) - now if bookmarks else deadline - now
                with suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), max(wait, 0.001))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping
        return response

    async def _token_review(self, request: web.Request) -> web.Response:
        self._count("create", "tokenreviews")
        review = await json_body(request)
        if review is None:
            return _status(400, "BadRequest", "the request body is not a TokenReview")
        spec = review.get("spec") or {}
        with self._control:
            user = self._tokens.get(str(spec.get("token", "")))
        audiences = reviewed_audiences(user, spec.get("audiences") or ()) if user is not None else ()
        status: JsonObject = {"authenticated": bool(audiences)}
        if user is not None and audiences:
            status["user"] = {
                "username": user.username,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": {k: list(v) for k, v in user.extra.items()},
            }
            status["audiences"] = list(audiences)
        elif user is not None:
            status["error"] = "token audiences are invalid for the target audiences"
        else:
            status["error"] = "invalid bearer token"
        return web.json_response(review_reply(review, "authentication.k8s.io/v1", "TokenReview", status))

    async def _access_review(self, request: web.Request) -> web.Response:
        self._count("create", "subjectaccessreviews")
        review = await json_body(request)
        if review is None:
            return _status(400, "BadRequest", "the request body is not a SubjectAccessReview")
        spec = review.get("spec") or {}
        with self._control:
            policy = self._policy
        allowed = bool(policy(spec))
        status: JsonObject = {"allowed": allowed}
        if not allowed:
            status["reason"] = "no rule of the test server's policy allows this"
        return web.json_response(review_reply(review, "authorization.k8s.io/v1", "SubjectAccessReview", status))


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_object(code, reason, message), status=code)
