"""The small wire formats besides quantities and selectors: request paths, timestamps, float figures, configuration."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from urllib.parse import quote

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from adapter.api.bodies import CustomItems, described_object, rfc3339
from adapter.api.paths import parse_custom_path, parse_external_path, request_attributes
from adapter.metrics_config import Figure, MetricsConfig, MetricsConfigError, Percentile, parse_metrics_config
from adapter.quantity import canonical_quantity, decimal_from_float, parse_quantity
from adapter.sources.metricsource import ServedValue
from adapter.status import ApiError
from toolkit.pods import Pod

names = st.from_regex(r"\A[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?\Z")
metric_names = st.from_regex(r"\A[a-z_][a-z0-9_]{0,30}\Z")
resources = st.sampled_from(["pods", "deployments.apps", "statefulsets.apps", "widgets.example.com"])
GROUP = "/apis/custom.metrics.k8s.io/v1beta2"


@given(names, resources, st.one_of(names, st.just("*")), metric_names, st.booleans())
def test_namespaced_paths_parse_back(namespace: str, resource: str, name: str, metric: str, encode: bool) -> None:
    shown = quote(name, safe="") if encode else name  # `*` may come as %2A
    path = parse_custom_path(f"{GROUP}/namespaces/{namespace}/{resource}/{shown}/{metric}", "v1beta2")
    assert (path.namespace, path.resource, path.name, path.metric) == (namespace, resource, name, metric)
    assert path.wildcard == (name == "*")


@given(st.sampled_from(["namespaces", "nodes"]), st.one_of(names, st.just("*")), metric_names)
def test_cluster_scoped_paths_parse_back(resource: str, name: str, metric: str) -> None:
    path = parse_custom_path(f"{GROUP}/{resource}/{name}/{metric}", "v1beta2")
    assert (path.namespace, path.resource, path.name, path.metric) == (None, resource, name, metric)


@given(names, metric_names)
def test_namespace_metric_and_external_paths_parse_back(namespace: str, metric: str) -> None:
    path = parse_custom_path(f"{GROUP}/namespaces/{namespace}/metrics/{metric}", "v1beta2")
    assert path.namespace_metric and (path.namespace, path.name, path.metric) == (namespace, namespace, metric)
    external = parse_external_path(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}", "v1beta1")
    assert (external.namespace, external.metric) == (namespace, metric)


@pytest.mark.parametrize("rest", ["", "/namespaces", "/namespaces/ml", "/pods/x", "/a/b/c/d/e/f", "/namespaces/ml/x/y"])
def test_malformed_paths_are_client_errors(rest: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_custom_path(f"{GROUP}{rest}", "v1beta2")
    assert caught.value.code in (400, 404)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        (
            "GET",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization",
            ("get", "custom.metrics.k8s.io", "v1beta2", "pods", "gpu_utilization", "ml", "*"),
        ),
        (
            "GET",
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/%2A/gpu_utilization",
            ("get", "custom.metrics.k8s.io", "v1beta1", "pods", "gpu_utilization", "ml", "*"),
        ),
        (
            "GET",
            "/apis/custom.metrics.k8s.io/v1beta2/nodes/n1/gpu_power_watts",
            ("get", "custom.metrics.k8s.io", "v1beta2", "nodes", "gpu_power_watts", "", "n1"),
        ),
        (
            "GET",
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/metrics/gpu_utilization",
            ("get", "custom.metrics.k8s.io", "v1beta2", "metrics", "", "ml", "gpu_utilization"),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/namespace_gpu_utilization",
            ("list", "external.metrics.k8s.io", "v1beta1", "namespace_gpu_utilization", "", "ml", ""),
        ),
    ],
)
def test_authorization_attributes_follow_kube_apiserver(method: str, path: str, expected: tuple[str, ...]) -> None:
    attributes = request_attributes(method, path)
    assert attributes is not None
    got = (
        attributes.verb,
        attributes.group,
        attributes.version,
        attributes.resource,
        attributes.subresource,
        attributes.namespace,
        attributes.name,
    )
    assert got == expected


@pytest.mark.parametrize("path", ["/apis", "/apis/custom.metrics.k8s.io/v1beta2", "/openapi/v2", "/healthz"])
def test_discovery_and_other_paths_are_non_resource_requests(path: str) -> None:
    assert request_attributes("GET", path) is None


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_timestamps_are_utc_whole_seconds_never_later_than_the_sample(at: float) -> None:
    text = rfc3339(at)
    back = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    assert back <= at < back + 1


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6, min_value=-1e9, max_value=1e9))
def test_float_figures_recover_their_decimal(value: Decimal) -> None:
    # a decimal of at most 15 significant digits survives the exporter's JSON float and the conversion back
    assert decimal_from_float(float(value)) == value


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_float_figures_stay_within_float_precision(number: float) -> None:
    value = decimal_from_float(number)
    assert abs(float(value) - number) <= abs(number) * 1e-14
    assert "e" not in canonical_quantity(value)  # always a suffix form in this range


def test_float_noise_does_not_reach_the_wire() -> None:
    assert canonical_quantity(decimal_from_float(0.1 + 0.2)) == "300m"
    assert canonical_quantity(decimal_from_float(0.605 * 100)) == "60500m"
    assert canonical_quantity(decimal_from_float(80.00000000000001)) == "80"


# every figure without a percentile (device figures and the engine's), and the latencies with one; saturation has a
# block of its own and no prometheus block (tests/adapter/test_saturation.py)
figures = st.sampled_from([str(f) for f in Figure if not f.is_latency and f is not Figure.SATURATION])
plain_figures = st.fixed_dictionaries({"figure": figures})
latency_figures = st.fixed_dictionaries(
    {
        "figure": st.sampled_from([str(f) for f in Figure if f.is_latency]),
        "percentile": st.sampled_from([str(p) for p in Percentile]),
    }
)
definitions = st.tuples(
    st.fixed_dictionaries(
        {"name": metric_names, "combine": st.sampled_from(["mean", "max", "sum"])},
        optional={
            "unit": st.sampled_from(["percent", "bytes", "watts"]),
            "scale": st.integers(1, 1000),
            "window_seconds": st.integers(1, 3600),
            "description": st.text(max_size=20),
            "prometheus": st.fixed_dictionaries(
                {
                    "query": st.just("x{$namespace_matcher}"),
                    "sample_time_query": st.just("timestamp(x{$namespace_matcher})"),
                }
            ),
        },
    ),
    st.one_of(plain_figures, latency_figures),
).map(lambda parts: parts[0] | parts[1])


@given(st.lists(definitions, max_size=4, unique_by=lambda d: d["name"]), st.lists(definitions, max_size=2))
def test_any_valid_configuration_parses_to_what_it_says(
    metrics: list[dict[str, object]], external: list[dict[str, object]]
) -> None:
    external = list({d["name"]: d for d in external}.values())
    config = parse_metrics_config(yaml.safe_dump({"metrics": metrics, "external": external}))
    assert MetricsConfig.model_validate(config.model_dump()) == config
    assert [m.name for m in config.metrics] == [d["name"] for d in metrics]
    for definition, parsed in zip(metrics, config.metrics, strict=True):
        assert parsed.figure == definition["figure"]
        assert parsed.percentile == definition.get("percentile")
        assert parsed.scale == Decimal(str(definition.get("scale", 1)))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("metrics: [{name: x, figure: power_watts}]", "metrics[0].combine: Field required"),
        ("metrics: [{name: '1x', figure: power_watts, combine: sum}]", "metrics[0].name: must start with a letter"),
        ("metrics: [{name: x, figure: power_watts, combine: median}]", "metrics[0].combine: Input should be"),
        ("external: [{name: x, figure: power_watts, combine: sum, window_seconds: 0}]", "external[0].window_seconds"),
        (
            "metrics: [{name: x, figure: power_watts, combine: sum, prometheus: {query: 'up{pod=~\"$pods\"}', "
            "sample_time_query: 'timestamp(up{$namespace_matcher})'}}]",
            "metrics[0].prometheus.query: must select by namespace with $namespace_matcher",
        ),
        ("metrics: {name: x}", "metrics: Input should be a valid"),
        ("metrics: [\n  {name: x", "line"),
    ],
)
def test_configuration_errors_name_the_field(text: str, words: str) -> None:
    with pytest.raises(MetricsConfigError) as caught:
        parse_metrics_config(text, "metrics.yaml")
    message = str(caught.value)
    assert message.startswith("metrics.yaml")
    assert words in message
    assert "\n" not in message


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@given(
    st.sampled_from(["v1beta1", "v1beta2"]),
    texts,
    st.lists(
        st.tuples(texts, st.one_of(st.none(), texts), st.decimals(places=3, min_value=-1e6, max_value=1e6)), max_size=5
    ),
    st.one_of(st.none(), st.just({"matchLabels": {"gpu": "1"}})),
    st.floats(min_value=1e9, max_value=3e9),
)
def test_rendered_items_are_the_json_the_types_describe(
    version: str,
    metric: str,
    objects: list[tuple[str, str | None, Decimal]],
    selector: dict[str, object] | None,
    sampled_at: float,
) -> None:
    items = CustomItems(version, metric, selector)
    for name, namespace, value in objects:
        items.add(described_object("Pod", "/v1", namespace, name), ServedValue(value, sampled_at, 60))
    body = json.loads(items.text())
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == f"custom.metrics.k8s.io/{version}"
    assert body["metadata"] == {}
    assert len(body["items"]) == len(objects)
    for item, (name, namespace, value) in zip(body["items"], objects, strict=True):
        reference = {"kind": "Pod", "name": name, "apiVersion": "/v1"}
        if namespace is not None:
            reference["namespace"] = namespace
        expected: dict[str, object] = {"describedObject": reference, "timestamp": rfc3339(sampled_at)}
        if version == "v1beta1":
            expected |= {"metricName": metric, "window": 60, "selector": selector}
        else:
            expected |= {"metric": {"name": metric, "selector": selector}, "windowSeconds": 60}
        assert {k: v for k, v in item.items() if k != "value"} == expected
        assert parse_quantity(item["value"]) == parse_quantity(canonical_quantity(value))


def test_served_values_are_rounded_to_the_milli_unit_the_hpa_reads() -> None:
    from adapter.api.bodies import quantity

    assert quantity(Decimal("82.849271278")) == "82849m"  # a window mean, not "82849271278n"
    assert quantity(Decimal("0.0005")) == "1m"  # half up
    assert quantity(Decimal("-0.0005")) == "-1m"
    assert quantity(Decimal("85.3")) == "85300m"
    assert quantity(Decimal(64 * 2**30)) == "68719476736"  # whole numbers stay exact


@given(st.one_of(st.floats(), st.integers(min_value=0, max_value=2**63)))
def test_a_figures_cached_decimal_is_the_one_worked_out_afresh(number: float | int) -> None:
    """`exact` keeps decimals in plain dicts: asked twice, it gives what decimal_from_float gives, digit for digit, and
    an integer and the float of the same value (one key to a dict) each get their own. Zero is the one exception to
    the digits: 0.0 and -0.0 are one key (as they were to the lru_cache before), so either may give "-0"; both are 0."""
    from adapter.quantity import QuantityError
    from adapter.sources.device_figures import exact

    try:
        afresh: Decimal | None = decimal_from_float(number)
    except QuantityError:
        afresh = None
    for _ in range(2):
        found = exact(number)
        assert (found is None) == (afresh is None)
        assert found == afresh
        assert str(found) == str(afresh) or (found is not None and found.is_zero())
    if isinstance(number, int) and number < 2**53:
        assert str(exact(float(number))) == str(decimal_from_float(float(number)))
        assert str(exact(number)) == str(number)


@given(st.decimals(allow_nan=False, allow_infinity=False, min_value=-(10**15), max_value=10**15, places=12))
def test_a_cached_quantity_is_the_one_worked_out_afresh(value: Decimal) -> None:
    """`quantity` keeps its texts in a dict by decimal: equal decimals of other exponents (85.3, 85.30) share one entry,
    so they must share one text, and a second answer must be the first."""
    from adapter.api.bodies import _quantity, quantity

    assert quantity(value) == _quantity(value)
    assert quantity(value) == _quantity(value)
    assert quantity(value.normalize()) == _quantity(value)
    assert quantity(value.quantize(Decimal("1e-12"))) == _quantity(value)


@given(st.lists(st.booleans(), min_size=4, max_size=4), names, metric_names)
def test_routing_and_authorization_read_the_same_path(encode: list[bool], namespace: str, metric: str) -> None:
    """However the segments are percent-encoded, the handler's path and the authorized attributes name one thing."""
    segments = ["custom.metrics.k8s.io", "v1beta2", "namespaces", namespace]
    shown = [
        ("".join(f"%{ord(c):02X}" for c in part) if flag else part) for part, flag in zip(segments, encode, strict=True)
    ]
    raw = "/apis/" + "/".join(shown) + f"/pods/*/{metric}"
    path = parse_custom_path(raw, "v1beta2")
    attributes = request_attributes("GET", raw)
    assert attributes is not None
    assert (attributes.group, attributes.version, attributes.namespace) == (
        "custom.metrics.k8s.io",
        "v1beta2",
        namespace,
    )
    assert (path.namespace, path.resource, path.metric) == (attributes.namespace, attributes.resource, metric)


def test_an_encoded_slash_never_names_another_group_or_version() -> None:
    with pytest.raises(ApiError) as caught:
        parse_custom_path("/apis/custom.metrics.k8s.io%2Fv1beta2/namespaces/ml/pods/*/m", "v1beta2")
    assert caught.value.code == 404


def test_every_problem_of_a_configuration_is_named_on_its_one_line() -> None:
    text = "metrics:\n  - {name: a, figure: power_watts, bogus: 1}\n  - {name: b, combine: median}\nexternal: 3\n"
    with pytest.raises(MetricsConfigError) as caught:
        parse_metrics_config(text, "metrics.yaml")
    message = str(caught.value)
    assert "\n" not in message and "more problem" not in message
    for words in (
        "metrics[0].combine: Field required",
        "metrics[0].bogus: Extra inputs are not permitted",
        "metrics[1].figure: Field required",
        "metrics[1].combine: Input should be",
        "external: Input should be a valid tuple (got 3)",
    ):
        assert words in message, message


@given(
    st.sampled_from(["v1beta1", "v1beta2"]),
    metric_names,
    st.lists(
        st.tuples(
            names,
            names,
            st.one_of(st.none(), st.decimals(min_value=0, max_value=10**6, places=4)),
            st.floats(min_value=1e9, max_value=2e9),
        ),
        max_size=20,
    ),
)
def test_pods_added_at_once_render_as_added_one_by_one(
    version: str, metric: str, pods: list[tuple[str, str, Decimal | None, float]]
) -> None:
    """`add_pods`, the HPA question's loop, writes the same items as `add` does pod by pod, leaves out the pods
    without a value, and gives the oldest sample time among those it wrote."""
    listed = [Pod(namespace=namespace, name=name, uid="", node="n", phase="Running") for name, namespace, _, _ in pods]
    values = [None if value is None else ServedValue(value, at, 30) for _, _, value, at in pods]
    at_once, one_by_one = CustomItems(version, metric, None), CustomItems(version, metric, None)
    oldest = at_once.add_pods("Pod", "/v1", listed, values)
    for pod, served in zip(listed, values, strict=True):
        if served is not None:
            one_by_one.add(described_object("Pod", "/v1", pod.namespace, pod.name), served)
    assert at_once.text() == one_by_one.text()
    assert oldest == min((served.sampled_at for served in values if served is not None), default=math.inf)
