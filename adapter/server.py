"""Serving the adapter over TLS: its application on the listen address, behind the connection guard, and KEDA's
scaler beside it, until stopped.

`Adapter.from_settings` builds the parts (adapter/parts.py) and the application over them (adapter/application.py), as
the CLI does; a test may hand `Adapter` an application built from parts of its own.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from kubernetes.client import ApiClient

from adapter.application import serving_app
from adapter.parts import build_parts
from adapter.settings import AdapterSettings
from toolkit.connections import ConnectionGuard
from toolkit.serving import start_server
from toolkit.settings import ListenAddress

if TYPE_CHECKING:
    from adapter.keda.serving import ExternalScalerServer
    from adapter.promadapter.serving import RuleMetrics

log = logging.getLogger(__name__)


@dataclass
class Adapter:
    """What `gpu-pulse-adapter` runs: the application, where and how it is served, and KEDA's scaler."""

    app: web.Application
    ssl_context: ssl.SSLContext
    listen: ListenAddress
    api: ApiClient
    connections: ConnectionGuard
    keda: ExternalScalerServer | None = None  # KEDA's external scaler (--keda-listen)
    rules: RuleMetrics | None = None  # prometheus-adapter's rules (--config in its format)

    @classmethod
    async def from_settings(cls, settings: AdapterSettings) -> Adapter:
        """Build everything; raises ValueError subclasses with one line when the configuration cannot work."""
        parts = await build_parts(settings)
        return cls(
            app=serving_app(parts),
            ssl_context=parts.ssl_context,
            listen=settings.listen,
            api=parts.api,
            connections=parts.connections,
            keda=parts.keda,
            rules=parts.rules,
        )

    async def serve(self, stop: asyncio.Event, on_serving: Sequence[Callable[[str], None]] = ()) -> None:
        """Serve until `stop` is set, then shut down gracefully (open requests get a few seconds). Raises
        toolkit.serving.ListenError when the address cannot be served."""
        try:
            server = await start_server(
                self.app, self.listen, ssl_context=self.ssl_context, access_log=False, connections=self.connections
            )
            try:
                log.info("serving custom.metrics.k8s.io and external.metrics.k8s.io on %s", server.url)
                if self.keda is not None:  # after the HTTP server's start: the pod cache and the source run
                    await self.keda.start()
                    tls = "TLS" if self.keda.tls else "plaintext"
                    log.info("serving KEDA's external scaler (externalscaler.ExternalScaler) on %s, %s",
                             self.keda.address, tls)  # fmt: skip
                for callback in on_serving:
                    callback(server.url)
                await stop.wait()
                log.info("stopping")
            finally:
                if self.keda is not None:
                    await self.keda.stop()
                await server.stop()
        finally:
            self.api.close()  # type: ignore[no-untyped-call]
