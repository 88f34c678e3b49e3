"""The trust configuration kept current: `kube-system/extension-apiserver-authentication` re-read while the adapter
runs, so a rotated requestheader (front-proxy) or client CA is used without a restart.

kube-apiserver's aggregated API servers do the same: kubernetes/apiserver
pkg/server/dynamiccertificates/configmap_cafile_content.go (the CA bundles) and
pkg/authentication/request/headerrequest/requestheader_controller.go (allowed names and headers) follow the
ConfigMap with an informer and re-check it every minute. This polls it every `period` seconds (one GET of one small
object). Flags still win field by field; a ConfigMap that cannot be read or holds an unusable bundle keeps the
configuration in use (logged once per problem, counted through `on_error`), as the upstream controllers keep their
last good bundle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kubernetes.client import ApiClient

from adapter.auth.config import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    AuthConfigError,
    AuthenticationConfig,
    AuthenticationFlags,
    apply_flags,
    config_from_configmap,
    read_configmap,
)
from toolkit.periodic import Periodic

log = logging.getLogger(__name__)

DEFAULT_PERIOD = 10.0


class TrustReloader:
    """Polls the ConfigMap; calls `apply(config)` whenever the configuration it describes changes."""

    def __init__(
        self,
        api_client: ApiClient,
        flags: AuthenticationFlags,
        apply: Callable[[AuthenticationConfig], None],
        *,
        current: Mapping[str, str] | None = None,
        period: float = DEFAULT_PERIOD,
        request_timeout: float = 5.0,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self._periodic = Periodic(self.check, period, "trust-reload")
        self._api = api_client
        self._flags = flags
        self._apply = apply
        self._data: Mapping[str, str] | None = dict(current) if current is not None else None
        self._timeout = request_timeout
        self._on_error = on_error
        self._problem: str | None = None
        self.reloads = 0  # configurations applied since start

    async def start(self) -> None:
        await self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def check(self) -> bool:
        """Read the ConfigMap once; True when a changed configuration was applied."""
        try:
            data = await asyncio.to_thread(read_configmap, self._api, self._timeout)
            if data == self._data:
                self._problem = None
                return False
            config = apply_flags(config_from_configmap(data), self._flags)
        except AuthConfigError as error:
            self._failed(f"{error}; keeping the trust configuration in use")
            return False
        except Exception as error:  # the API server unreachable, RBAC, a timeout: keep what works
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            self._failed(f"cannot read {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} ({problem}); keeping the trust in use")
            return False
        self._apply(config)
        self._data = data
        self._problem = None
        self.reloads += 1
        log.info("%s/%s changed: client certificate trust reloaded", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
        return True

    def _failed(self, problem: str) -> None:
        if self._on_error is not None:
            self._on_error()
        if problem != self._problem:
            log.warning("%s", problem)
        self._problem = problem
