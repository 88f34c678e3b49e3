"""Request middlewares: every failure becomes a `Status`, and every request is timed by group, version and code."""

from __future__ import annotations

import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from adapter.api.paths import SERVED
from adapter.api.selfmetrics import AdapterMetrics
from adapter.sources.metricsource import SourceError, SourceUnavailableError
from adapter.status import REASONS, ApiError, status_response

log = logging.getLogger(__name__)


@web.middleware
async def status_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """ApiError, source failures, aiohttp's own HTTP errors and anything unexpected, answered as `Status` objects."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except SourceUnavailableError as exc:
        return status_response(503, "ServiceUnavailable", f"the metrics source is unavailable: {exc}")
    except SourceError as exc:
        log.error("metrics source error on %s: %s", request.path, exc)
        return status_response(500, "InternalError", f"the metrics source failed: {exc}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            message = f"the server could not find the requested resource {request.path}"
        elif exc.status == 405:
            message = f"the server does not allow method {request.method} on {request.path}; use GET"
        else:
            message = exc.text or exc.reason
        return status_response(exc.status, REASONS.get(exc.status, exc.reason.replace(" ", "")), message)
    except Exception:
        log.exception("internal error answering %s %s", request.method, request.path_qs)
        return status_response(500, "InternalError", "an internal error occurred; the adapter's log has the details")


def instrument(metrics: AdapterMetrics) -> Middleware:
    """Time each request into gpu_pulse_adapter_request_duration_seconds{group, version, code}."""

    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            parts = request.path.split("/")
            group, version = ("", "")
            if len(parts) > 3 and parts[1] == "apis":  # only served group-versions: labels stay bounded
                served = parts[3] in SERVED.get(parts[2], ())
                group, version = (parts[2], parts[3]) if served else ("other", "other")
            metrics.requests.labels(group, version, str(code)).observe(time.perf_counter() - started)

    return timed
