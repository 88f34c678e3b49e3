"""The `demand` section of the metrics configuration: which endpoint to read, which metric of it, and where to serve it.

    demand:
      - name: inference_pending_requests      # the External metric (several entries may share it: one per gateway)
        namespace: demo                       # served only in this namespace (the workload's, whose HPA asks)
        url: http://llm-epp.demo.svc:9090/metrics
        preset: gateway-api-inference-extension   # or llm-d, or give `metric` yourself
        matchers: {inference_pool: llm-inference} # only series with these labels count
        labels: {service: llm-inference}          # added to every series, for selectors to name

A query's `labelSelector` picks series by their labels (and `labels`); the value is the sum of the picked series.

The presets name the endpoint picker's flow-control queue, the requests the gateway holds for a pool:
- `gateway-api-inference-extension`: `inference_extension_flow_control_queue_size`, a gauge labelled `fairness_id`,
  `priority`, `inference_pool`, `model_name`, `target_model_name` (kubernetes-sigs/gateway-api-inference-extension
  release-1.3, pkg/epp/metrics/metrics.go flowControlQueueSize; site-src/guides/metrics-and-observability.md, "Flow
  Control Metrics"); the EPP serves /metrics on port 9090 and asks for a token allowed `get` on the nonResourceURL
  /metrics (same guide, "Scrape Metrics").
- `llm-d`: `llm_d_epp_flow_control_queue_size`, llm-d's EPP's name for the same gauge, which still serves the old name
  marked deprecated; the first of the two the endpoint serves is read, never both (they mirror each other), as
  llm-d-workload-variant-autoscaler's scale-from-zero engine reads them (targetEPPMetricNames).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from adapter.selectors import key_problem, value_problem

GIE_QUEUE = "inference_extension_flow_control_queue_size"
LLM_D_QUEUE = "llm_d_epp_flow_control_queue_size"
PRESETS: dict[str, tuple[str, ...]] = {
    "gateway-api-inference-extension": (GIE_QUEUE,),
    "llm-d": (LLM_D_QUEUE, GIE_QUEUE),
}
_NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_METRIC_NAME_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"


class DemandDefinition(BaseModel):
    """One gateway's demand, served as the External metric `name` in `namespace`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$", description="the External metric clients ask for")
    description: str = ""
    namespace: str = Field(pattern=_NAMESPACE_PATTERN, description="the namespace whose External metrics serve it")
    url: str = Field(description="the Prometheus-format endpoint (http or https), read directly")
    preset: Literal["gateway-api-inference-extension", "llm-d"] | None = None
    metric: tuple[Annotated[str, Field(pattern=_METRIC_NAME_PATTERN)], ...] = Field(
        (), description="the metric names to read, in preference order: the first the endpoint serves is read"
    )
    matchers: dict[str, str] = Field(default_factory=dict, description="labels a series must have to count")
    labels: dict[str, str] = Field(default_factory=dict, description="labels added to every series, for selectors")
    refresh_seconds: Annotated[float, Field(ge=0.1, le=60)] = Field(
        0.5, description="a reading is reused this long, by every asker; reads happen only while someone asks"
    )
    timeout_seconds: Annotated[float, Field(gt=0, le=30)] = Field(2.0, description="deadline of one whole read")
    max_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = Field(
        4 * 1024 * 1024, description="largest body read (after decompression)"
    )
    bearer_token_file: Path | None = Field(None, description="a token sent as Authorization: Bearer, re-read")
    ca_file: Path | None = Field(None, description="CA bundle that verifies an https endpoint (default: system's)")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value) > 2048 or any(c.isspace() for c in value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("labels")
    @classmethod
    def _selectable(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():  # a label selector must be able to name them
            problem = key_problem(key) or value_problem(text)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("matchers")
    @classmethod
    def _prometheus_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not re.match(_LABEL_NAME_PATTERN, key) or len(text) > 1024:
                raise ValueError(f"{key[:100]!r}: not a Prometheus label name (or its value is over 1024 characters)")
        return value

    @model_validator(mode="after")
    def _metric_named(self) -> DemandDefinition:
        if self.preset is not None and self.metric:
            raise ValueError("give a preset or metric names, not both")
        if self.preset is None and not self.metric:
            raise ValueError("say which metric to read: metric: [name, ...] or a preset")
        return self

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metric names read, in preference order."""
        return PRESETS[self.preset] if self.preset is not None else self.metric
