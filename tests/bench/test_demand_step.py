"""bench/demand_step.py: its emulation of KEDA's Prometheus trigger polls as kedacore/keda
pkg/scalers/prometheus_scaler.go does (ExecutePromQuery, GetMetricsAndActivity), and counts only polls begun after
the step."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from demand_step import PROMQL, KedaPrometheusPoll


def answering(results: list[list[dict[str, Any]]], asked: list[dict[str, str]]) -> web.Application:
    """A Prometheus query API answering each instant query with the next of `results` (a vector)."""

    async def query(request: web.Request) -> web.Response:
        asked.append(dict(request.query))
        data = {"resultType": "vector", "result": results.pop(0)}
        return web.json_response({"status": "success", "data": data})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


def series(value: str) -> dict[str, Any]:
    return {"metric": {}, "value": [time.time(), value]}


async def test_each_poll_is_the_instant_query_keda_sends_and_reads_as_keda_does(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    asked: list[dict[str, str]] = []
    server = await aiohttp_server(answering([[], [series("3")], [series("1"), series("2")]], asked))
    async with aiohttp.ClientSession() as session:
        poll = KedaPrometheusPoll(session, str(server.make_url("")).rstrip("/"), 30.0, 0.0)
        assert await poll.value() == 0, "an empty result is 0 with ignoreNullValues, KEDA's default"
        assert await poll.value() == 3
        with pytest.raises(RuntimeError, match="more than one"):
            await poll.value()
    assert all(a["query"] == PROMQL for a in asked)
    # time.Now().UTC().Format(time.RFC3339): whole seconds, so the query may evaluate up to a second before the poll
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", a["time"]) for a in asked), asked


async def test_a_poll_under_way_at_the_step_does_not_count_even_if_it_answers_after() -> None:
    async with aiohttp.ClientSession() as session:
        poll = KedaPrometheusPoll(session, "http://unused", 30.0, 0.0)
        step = 100.0
        poll.started.append(step - 0.5)
        poll.polls.record(1.0, at=step + 0.2)  # begun before the step: it may have read demand from before it
        poll.started.append(step + 29.5)
        poll.polls.record(0.0, at=step + 29.6)  # begun after, but reads nothing yet (Prometheus has not scraped)
        poll.started.append(step + 59.5)
        poll.polls.record(2.0, at=step + 59.6)
        assert await poll.first_active_after(step) == step + 59.6


async def test_a_prometheus_that_fails_stops_the_bench_with_its_reason_rather_than_a_timeout(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"status": "error", "error": "query timed out"}, status=503)

    app = web.Application()
    app.router.add_get("/api/v1/query", broken)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        poll = KedaPrometheusPoll(session, str(server.make_url("")).rstrip("/"), 30.0, 0.0)
        await poll.run()  # returns at the first failed poll
        with pytest.raises(RuntimeError, match="query timed out"):
            await poll.first_active_after(0.0)
