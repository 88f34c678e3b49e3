"""The trust configuration kept current: `kube-system/extension-apiserver-authentication` re-read while the adapter
runs, and so are the CA files given by flag (`--client-ca-file`, `--requestheader-client-ca-file`), so a rotated or
removed requestheader (front-proxy) or client CA is used without a restart.

kube-apiserver's aggregated API servers do the same: kubernetes/apiserver
pkg/server/dynamiccertificates/configmap_cafile_content.go (the CA bundles of the ConfigMap),
pkg/server/dynamiccertificates/dynamic_cafile_content.go (a CA file given by flag, re-read when it changes, checked
every minute) and pkg/authentication/request/headerrequest/requestheader_controller.go (allowed names and headers)
follow them and re-check them every minute. This reads them every `period` seconds (one GET of one small object, when
a CA still comes from it, and the flag files through the bounded reader). Flags still win field by field; a ConfigMap
that cannot be read, or a bundle that cannot be used, keeps the configuration in use (logged once per problem,
counted in `failures`: adapter/auth/selfmetrics.py), as the upstream controllers keep their last good bundle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry

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
from adapter.auth.selfmetrics import trust_reload_collector
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
        current: AuthenticationConfig | None = None,
        period: float = DEFAULT_PERIOD,
        request_timeout: float = 5.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._periodic = Periodic(self.check, period, "trust-reload")
        self._api = api_client
        self._flags = flags
        self._apply = apply
        self._config = current
        self._timeout = request_timeout
        self.failures = 0  # re-reads that failed (the trust in use was kept)
        self._problem: str | None = None
        # the ConfigMap is read unless both CAs come from flags (then it could change nothing but headers, which the
        # flags would not override: as at start, it is not read at all)
        self._reads_configmap = flags.client_ca_file is None or flags.requestheader_client_ca_file is None
        self.reloads = 0  # configurations applied since start
        if registry is not None:
            registry.register(trust_reload_collector(self))

    async def start(self) -> None:
        await self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    def _read(self) -> AuthenticationConfig:
        """The configuration as it is now (blocking: in a thread)."""
        data = read_configmap(self._api, self._timeout) if self._reads_configmap else {}
        return apply_flags(config_from_configmap(data), self._flags)

    async def check(self) -> bool:
        """Read the trust sources once; True when a changed configuration was applied."""
        try:
            config = await asyncio.to_thread(self._read)
        except AuthConfigError as error:
            self._failed(f"{error}; keeping the trust configuration in use")
            return False
        except Exception as error:  # the API server unreachable, RBAC, a timeout: keep what works
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__
            self._failed(f"cannot read {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} ({problem}); keeping the trust in use")
            return False
        self._problem = None
        if config == self._config:
            return False
        self._apply(config)
        self._config = config
        self.reloads += 1
        log.info("the client certificate trust changed (%s): reloaded", self._sources())
        return True

    def _sources(self) -> str:
        flags = [
            f"{flag} {path}"
            for flag, path in (
                ("--client-ca-file", self._flags.client_ca_file),
                ("--requestheader-client-ca-file", self._flags.requestheader_client_ca_file),
            )
            if path is not None
        ]
        return ", ".join([*([f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"] if self._reads_configmap else []), *flags])

    def _failed(self, problem: str) -> None:
        self.failures += 1
        if problem != self._problem:
            log.warning("%s", problem)
        self._problem = problem
