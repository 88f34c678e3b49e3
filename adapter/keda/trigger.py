"""A ScaledObject trigger of gpu-pulse, from the `scalerMetadata` KEDA sends with every call.

    triggers:
      - type: external-push            # or external
        metadata:
          scalerAddress: gpu-pulse-adapter-keda.gpu-pulse.svc:9443
          metric: gpu_utilization      # required: a pod metric the adapter serves (custom.metrics.k8s.io)
          podSelector: app=llm         # required: a label selector over pods in the ScaledObject's namespace
          target: "60"                 # required: the per-pod target, > 0
          activationTarget: "5"        # optional, default 0: active while any selected pod's value exceeds it

or, for demand that exists with no pod (requests waiting at a gateway, the metrics file's `demand`):

        metadata:
          metric: inference_pending_requests   # a demand the adapter serves (external.metrics.k8s.io)
          selector: inference_pool=llm-inference   # instead of podSelector: picks the demand's series
          target: "4"                  # requests waiting per replica
          activationTarget: "0"        # active while more than this many wait (default 0: one request)

KEDA forwards every key of the trigger's `metadata` (pkg/scalers/external_scaler.go, parseExternalScalerMetadata), its
own among them (`scalerAddress`, `enableTLS`, `unsafeSsl`), and for a key `<k>FromEnv` the value of the environment
variable it names, under the key `<k>FromEnv` (left out when that variable is empty). So each key may also come as
`<key>FromEnv`; a key given both ways, and any key this module does not know, is refused: a misspelt
`activationTreshold` must not pass as "no activation target".

Numbers are Kubernetes quantities ("60", "0.5", "1e3", "40Gi", "500m"), read exactly.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from adapter.quantity import QuantityError, parse_quantity
from adapter.selectors import Selector, SelectorError, parse_selector

METRIC = "metric"
POD_SELECTOR = "podSelector"
SELECTOR = "selector"  # over a demand's series, instead of podSelector
TARGET = "target"
ACTIVATION_TARGET = "activationTarget"
OURS = (METRIC, POD_SELECTOR, SELECTOR, TARGET, ACTIVATION_TARGET)
# KEDA's own keys of an external trigger's metadata, which it passes on too (externalScalerMetadata's triggerMetadata
# fields in pkg/scalers/external_scaler.go; caCert, tlsClientCert and tlsClientKey are read from a
# TriggerAuthentication, but a user may have put them in the metadata as well)
KEDAS = ("scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsClientCert", "tlsClientKey")
FROM_ENV = "FromEnv"
MAX_VALUE_LENGTH = 1024  # a selector of a few dozen requirements; anything longer is not a trigger's
_SHOWN = 100  # characters of a key an error message repeats


class TriggerError(ValueError):
    """Metadata that does not make a trigger; `key` is the metadata key at fault, and the message names it."""

    def __init__(self, key: str, problem: str) -> None:
        shown = key if len(key) <= _SHOWN else key[:_SHOWN] + "..."
        super().__init__(f"scalerMetadata.{shown}: {problem}")
        self.key = key


@dataclass(frozen=True, slots=True)
class Trigger:
    """What one trigger asks: `metric` of the pods `selector` picks, against `target` per pod; active while some pod's
    value exceeds `activation_target`."""

    metric: str
    selector: Selector
    target: Decimal
    activation_target: Decimal = Decimal(0)
    of_demand: bool = False  # `selector` picks a demand's series (adapter/demand/), not pods

    def key(self, namespace: str) -> tuple[str, str, str, Decimal]:
        """What identifies the workload's activity: two ScaledObjects asking the same share it."""
        selector = f"demand:{self.selector}" if self.of_demand else str(self.selector)
        return (namespace, self.metric, selector, self.activation_target)


def parse_trigger(metadata: Mapping[str, str]) -> Trigger:
    """The trigger `metadata` describes; TriggerError naming the key when a key is missing, unknown or malformed."""
    given = _our_values(metadata)
    metric = _required(given, METRIC)
    if SELECTOR in given and POD_SELECTOR in given:
        raise TriggerError(
            given[SELECTOR][0], f"give {POD_SELECTOR} (pods) or {SELECTOR} (a demand's series), not both"
        )
    selector_key = SELECTOR if SELECTOR in given else POD_SELECTOR
    selector_text = _required(given, selector_key)
    try:
        selector = parse_selector(selector_text)
    except SelectorError as exc:
        raise TriggerError(given[selector_key][0], str(exc)) from None
    target = _number(given, TARGET, _required(given, TARGET))
    if target <= 0:
        raise TriggerError(given[TARGET][0], f"must be more than 0, got {given[TARGET][1]!r}")
    activation = Decimal(0)
    if ACTIVATION_TARGET in given:
        activation = _number(given, ACTIVATION_TARGET, given[ACTIVATION_TARGET][1])
        if activation < 0:
            raise TriggerError(given[ACTIVATION_TARGET][0], f"must be 0 or more, got {given[ACTIVATION_TARGET][1]!r}")
    return Trigger(metric, selector, target, activation, of_demand=selector_key == SELECTOR)


def parse_number(key: str, text: str) -> Decimal:
    """A number of the metadata: a Kubernetes quantity, exactly."""
    try:
        value = parse_quantity(text.strip())
    except QuantityError:
        raise TriggerError(key, f"must be a number such as 60, 0.5 or 40Gi, got {text!r}") from None
    if not math.isfinite(float(value)):  # KEDA reads the target as a double (targetSizeFloat): 1e400 would be inf
        raise TriggerError(key, f"must be at most {sys.float_info.max:.3g}, got {text[:_SHOWN]!r}")
    return value


def _number(given: Mapping[str, tuple[str, str]], key: str, text: str) -> Decimal:
    return parse_number(given[key][0], text)


def _our_values(metadata: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Our keys, each with the key it came as (`<key>` or `<key>FromEnv`) and its value; KEDA's keys are passed over,
    anything else refused."""
    values: dict[str, tuple[str, str]] = {}
    for raw_key, value in sorted(metadata.items()):  # a map's order is not the wire's: name the same key each time
        key = raw_key.removesuffix(FROM_ENV) if raw_key.endswith(FROM_ENV) else raw_key
        if key in KEDAS:
            continue
        if key not in OURS:
            known = ", ".join(OURS)
            raise TriggerError(raw_key, f"unknown key: gpu-pulse's triggers take {known} (and KEDA's own keys)")
        if key in values:
            raise TriggerError(key + FROM_ENV, f"given twice, as {key} and {key}{FROM_ENV}: keep one")
        if len(value) > MAX_VALUE_LENGTH:
            raise TriggerError(raw_key, f"longer than {MAX_VALUE_LENGTH} characters")
        values[key] = (raw_key, value)
    return values


def _required(given: Mapping[str, tuple[str, str]], key: str) -> str:
    raw_key, value = given.get(key, (key, ""))
    if not value.strip():
        raise TriggerError(raw_key, "required")
    return value.strip()
