"""prometheus-adapter's rules read as prometheus-adapter reads them: the referee is its own test suite.

The cases and expected results are those of kubernetes-sigs/prometheus-adapter's tests (pkg/custom-provider/
series_registry_test.go with cmd/config-gen/utils/default.go's rules, pkg/naming/metrics_query_test.go,
pkg/naming/regex_matcher_test.go) and of its documentation (docs/config.md, docs/walkthrough.md), each cited beside it;
the rest hold what its Go code does (pkg/naming, pkg/config), cited the same way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.promadapter.config import (
    PromAdapterConfigError,
    RegexFilter,
    is_prometheus_adapter_config,
    load_document,
    parse_prom_adapter_config,
)
from adapter.promadapter.discovery import RuleDiscovery
from adapter.promadapter.durations import parse_go_duration
from adapter.promadapter.goregexp import GoRegexpError, compile_go, expand
from adapter.promadapter.gotemplate import TemplateError, parse_template
from adapter.promadapter.naming import MetricNamer, SeriesName, namers_from_config, re_matcher
from adapter.promadapter.query import MetricsQuery, QueryError, go_quote
from adapter.promadapter.registry import CustomMetricInfo, ExternalSeriesRegistry, SeriesRegistry
from adapter.promadapter.resources import ResourceConverter
from adapter.promadapter.restmapper import BUILT_IN, GroupResource, ResourceType, RestMapper
from adapter.promadapter.serving import served_quantity
from adapter.selectors import EVERYTHING, parse_selector
from adapter.settings import load_settings
from adapter.sources.metricsource import SourceUnavailableError
from toolkit.settings import SettingsError

# series_registry_test.go restMapper(): core Pod, Service, Node, PersistentVolume, Namespace; extensions/v1beta1
# Ingress and Deployment
UPSTREAM_TEST_MAPPER = RestMapper(
    [
        ResourceType("", "v1", "Pod", "pods", "pod", True),
        ResourceType("", "v1", "Service", "services", "service", True),
        ResourceType("extensions", "v1beta1", "Ingress", "ingresses", "ingress", True),
        ResourceType("extensions", "v1beta1", "Deployment", "deployments", "deployment", True),
        ResourceType("", "v1", "Node", "nodes", "node", False),
        ResourceType("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", False),
        ResourceType("", "v1", "Namespace", "namespaces", "namespace", False),
    ]
)

# cmd/config-gen/utils/default.go DefaultConfig(1*time.Minute, "kube_"), as series_registry_test.go builds it
_CONTAINER_SERIES = '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
_KUBE_SERIES = '{kube_namespace!="",__name__!~"^container_.*"}'
UPSTREAM_DEFAULT_CONFIG = f"""
rules:
- seriesQuery: '{_CONTAINER_SERIES}'
  resources:
    overrides:
      namespace: {{resource: namespace}}
      pod: {{resource: pod}}
  name: {{matches: ^container_(.*)_seconds_total$}}
  metricsQuery: sum(rate(<<.Series>>{{<<.LabelMatchers>>,container!="POD"}}[1m])) by (<<.GroupBy>>)
- seriesQuery: '{_CONTAINER_SERIES}'
  seriesFilters: [{{isNot: ^container_.*_seconds_total$}}]
  resources:
    overrides:
      namespace: {{resource: namespace}}
      pod: {{resource: pod}}
  name: {{matches: ^container_(.*)_total$}}
  metricsQuery: sum(rate(<<.Series>>{{<<.LabelMatchers>>,container!="POD"}}[1m])) by (<<.GroupBy>>)
- seriesQuery: '{_CONTAINER_SERIES}'
  seriesFilters: [{{isNot: ^container_.*_total$}}]
  resources:
    overrides:
      namespace: {{resource: namespace}}
      pod: {{resource: pod}}
  name: {{matches: ^container_(.*)$}}
  metricsQuery: sum(<<.Series>>{{<<.LabelMatchers>>,container!="POD"}}) by (<<.GroupBy>>)
- seriesQuery: '{_KUBE_SERIES}'
  seriesFilters: [{{isNot: .*_total$}}]
  resources: {{template: kube_<<.Resource>>}}
  metricsQuery: sum(<<.Series>>{{<<.LabelMatchers>>}}) by (<<.GroupBy>>)
- seriesQuery: '{_KUBE_SERIES}'
  seriesFilters: [{{isNot: .*_seconds_total}}]
  name: {{matches: ^(.*)_total$}}
  resources: {{template: kube_<<.Resource>>}}
  metricsQuery: sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>)
- seriesQuery: '{_KUBE_SERIES}'
  name: {{matches: ^(.*)_seconds_total$}}
  resources: {{template: kube_<<.Resource>>}}
  metricsQuery: sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>)
"""


def _series(name: str, *labels: str) -> SeriesName:
    return SeriesName(name, frozenset(labels))


# series_registry_test.go seriesRegistryTestSeries: one list per rule of the default configuration
UPSTREAM_TEST_SERIES = [
    [_series("container_some_time_seconds_total", "pod", "namespace", "container")],
    [_series("container_some_count_total", "pod", "namespace", "container")],
    [_series("container_some_usage", "pod", "namespace", "container")],
    [
        _series("node_gigawatts", "kube_node"),
        _series("service_proxy_packets", "kube_service", "kube_namespace"),
    ],
    [
        _series("ingress_hits_total", "kube_ingress", "kube_service", "kube_pod", "kube_namespace"),
        _series("volume_claims_total", "kube_persistentvolume"),
    ],
    [
        _series("work_queue_wait_seconds_total", "kube_deployment", "kube_namespace"),
        _series("node_fan_seconds_total", "kube_node"),
    ],
]


def _rules(text: str, mapper: RestMapper = UPSTREAM_TEST_MAPPER) -> list[MetricNamer]:
    config = parse_prom_adapter_config(load_document(text, "test"), "test")
    return namers_from_config(config.rules, mapper)


@pytest.fixture
def registry() -> SeriesRegistry:
    namers = _rules(UPSTREAM_DEFAULT_CONFIG)
    registry = SeriesRegistry(UPSTREAM_TEST_MAPPER)
    registry.set_series(UPSTREAM_TEST_SERIES, namers)
    return registry


def _info(group: str, resource: str, namespaced: bool, metric: str) -> CustomMetricInfo:
    return CustomMetricInfo(GroupResource(group, resource), namespaced, metric)


# series_registry_test.go "with the default configuration rules": (info, namespace, names, selector, query)
REGISTRY_CASES = [
    (_info("", "pods", True, "some_usage"), "somens", ["somepod1", "somepod2"], "",
     'sum(container_some_usage{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}) by (pod)'),
    (_info("", "pods", True, "some_count"), "somens", ["somepod1", "somepod2"], "",
     'sum(rate(container_some_count_total{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}[1m])) '
     "by (pod)"),
    (_info("", "pods", True, "some_time"), "somens", ["somepod1", "somepod2"], "",
     'sum(rate(container_some_time_seconds_total{namespace="somens",pod=~"somepod1|somepod2",container!="POD"}[1m])) '
     "by (pod)"),
    (_info("", "service", True, "ingress_hits"), "somens", ["somesvc"], "",
     'sum(rate(ingress_hits_total{kube_namespace="somens",kube_service="somesvc"}[1m])) by (kube_service)'),
    (_info("", "service", True, "ingress_hits"), "somens", ["somesvc"], "param1=value1",
     'sum(rate(ingress_hits_total{param1="value1",kube_namespace="somens",kube_service="somesvc"}[1m])) '
     "by (kube_service)"),
    (_info("extensions", "ingress", True, "ingress_hits"), "somens", ["someingress"], "",
     'sum(rate(ingress_hits_total{kube_namespace="somens",kube_ingress="someingress"}[1m])) by (kube_ingress)'),
    (_info("", "pod", True, "ingress_hits"), "somens", ["somepod"], "",
     'sum(rate(ingress_hits_total{kube_namespace="somens",kube_pod="somepod"}[1m])) by (kube_pod)'),
    (_info("", "service", True, "service_proxy_packets"), "somens", ["somesvc"], "",
     'sum(service_proxy_packets{kube_namespace="somens",kube_service="somesvc"}) by (kube_service)'),
    (_info("extensions", "deployment", True, "work_queue_wait"), "somens", ["somedep"], "",
     'sum(rate(work_queue_wait_seconds_total{kube_namespace="somens",kube_deployment="somedep"}[1m])) '
     "by (kube_deployment)"),
    (_info("", "node", False, "node_gigawatts"), "", ["somenode"], "",
     'sum(node_gigawatts{kube_node="somenode"}) by (kube_node)'),
    (_info("", "persistentvolume", False, "volume_claims"), "", ["somepv"], "",
     'sum(rate(volume_claims_total{kube_persistentvolume="somepv"}[1m])) by (kube_persistentvolume)'),
    (_info("", "node", False, "node_fan"), "", ["somenode"], "",
     'sum(rate(node_fan_seconds_total{kube_node="somenode"}[1m])) by (kube_node)'),
]  # fmt: skip


@pytest.mark.parametrize(("info", "namespace", "names", "selector", "expected"), REGISTRY_CASES)
def test_queries_of_the_default_rules_as_upstream_builds_them(
    registry: SeriesRegistry, info: CustomMetricInfo, namespace: str, names: Sequence[str], selector: str, expected: str
) -> None:
    built = registry.query_for_metric(info, namespace, parse_selector(selector) if selector else EVERYTHING, names)
    assert built is not None, f"metric {info} should be available"
    assert built.query == expected


def test_every_metric_the_default_rules_discover(registry: SeriesRegistry) -> None:
    # series_registry_test.go "should list all metrics"
    assert set(registry.list_all_metrics()) == {
        _info("", "pods", True, "some_count"),
        _info("", "namespaces", False, "some_count"),
        _info("", "pods", True, "some_time"),
        _info("", "namespaces", False, "some_time"),
        _info("", "pods", True, "some_usage"),
        _info("", "namespaces", False, "some_usage"),
        _info("", "services", True, "ingress_hits"),
        _info("extensions", "ingresses", True, "ingress_hits"),
        _info("", "pods", True, "ingress_hits"),
        _info("", "namespaces", False, "ingress_hits"),
        _info("", "services", True, "service_proxy_packets"),
        _info("", "namespaces", False, "service_proxy_packets"),
        _info("extensions", "deployments", True, "work_queue_wait"),
        _info("", "namespaces", False, "work_queue_wait"),
        _info("", "nodes", False, "node_gigawatts"),
        _info("", "persistentvolumes", False, "volume_claims"),
        _info("", "nodes", False, "node_fan"),
    }


def test_a_question_about_no_object_or_an_undiscovered_metric_finds_nothing(registry: SeriesRegistry) -> None:
    # series_registry.go QueryForMetric: "no resource names requested", "metric ... not registered"
    assert registry.query_for_metric(_info("", "pods", True, "some_usage"), "somens", EVERYTHING, []) is None
    assert registry.query_for_metric(_info("", "pods", True, "nothing"), "somens", EVERYTHING, ["a"]) is None
    # namespaced is part of the key: pods were discovered namespaced only
    assert registry.query_for_metric(_info("", "pods", False, "some_usage"), "", EVERYTHING, ["a"]) is None


class _LabelIsResource:
    """metrics_query_test.go resourceConverterMock: a resource's label is its resource name."""

    def label_for_resource(self, resource: GroupResource) -> str:
        return resource.resource


RESOURCE = GroupResource("group", "resource")

# metrics_query_test.go TestBuildSelector: (template, namespace, extra group-by, selector, names, expected)
BUILD_CASES = [
    ("series <<.Series>>", "", [], "", [], "series foo"),
    ("<<.LabelMatchers>>", "", [], "", ["bar", "baz"], 'resource=~"bar|baz"'),
    ("<<.LabelMatchers>>", "", [], "", ["bar"], 'resource="bar"'),
    ("<<.LabelMatchers>>", "", [], "metric1=value1", ["bar"], 'metric1="value1",resource="bar"'),
    ('<<index .LabelValuesByName "resource">>', "", [], "", ["bar"], "bar"),
    ('<<index .LabelValuesByName "resource">>', "", [], "", ["bar", "baz"], "bar|baz"),
    ('<<index .LabelValuesByName "namespaces">> <<index .LabelValuesByName "resource">>', "default", [], "",
     ["bar", "baz"], "default bar|baz"),
    ("<<.GroupBy>>", "", [], "", [], "resource"),
    ("<<.GroupBy>>", "", ["extra", "groups"], "", [], "resource,extra,groups"),
    ("<<.GroupBySlice>>", "", [], "", [], "[resource]"),
    ("<<.GroupBySlice>>", "", ["extra", "groups"], "", [], "[resource extra groups]"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "namespace", "extra", "selector", "names", "expected"), BUILD_CASES)
def test_build(template: str, namespace: str, extra: list[str], selector: str, names: list[str], expected: str) -> None:
    query = MetricsQuery(template, _LabelIsResource())
    built = query.build("foo", RESOURCE, namespace, extra, parse_selector(selector) if selector else EVERYTHING, names)
    assert built.query == expected


# metrics_query_test.go TestBuildExternalSelector:
# (template, namespaced, namespace, group-by, group-by slice, selector, expected)
EXTERNAL_CASES = [
    ("series <<.Series>>", True, "", "", [], "", "series foo"),
    ("<<.GroupBy>>", True, "", "foo", [], "", "foo"),
    ("<<.GroupBySlice>>", True, "", "", ["foo", "bar"], "", "[foo bar]"),
    ('<<index .LabelValuesByName "namespaces">> <<.GroupBySlice>>', True, "default", "", ["foo", "bar"], "",
     "default [foo bar]"),
    ('<<index .LabelValuesByName "namespaces">> <<.GroupBySlice>>', False, "default", "", ["foo", "bar"], "",
     " [foo bar]"),
    ("<<.LabelMatchers>>", True, "", "", [], "foo=bar", 'foo="bar"'),
    ("<<.LabelMatchers>>", True, "default", "", [], "foo=bar", 'foo="bar",namespaces="default"'),
    ("<<.LabelMatchers>>", True, "", "", [], "foo=bar,qux in (bar,baz)", 'foo="bar",qux=~"bar|baz"'),
    ("<<.LabelValuesByName>>", True, "", "", [], "foo=bar", "map[foo:bar]"),
    ("<<.LabelValuesByName>>", True, "", "", [], "foo in (bar,baz)", "map[foo:bar|baz]"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "namespaced", "namespace", "group_by", "group_slice", "selector", "expected"),
                         EXTERNAL_CASES)  # fmt: skip
def test_build_external(
    template: str, namespaced: bool, namespace: str, group_by: str, group_slice: list[str], selector: str, expected: str
) -> None:
    query = MetricsQuery(template, _LabelIsResource(), namespaced)
    selected = parse_selector(selector) if selector else EVERYTHING
    assert query.build_external("foo", namespace, group_by, group_slice, selected).query == expected


@pytest.mark.parametrize(
    ("selector", "matchers"),
    [
        # metrics_query.go selectMatcher / selectTargetValue, operator by operator
        ("a=x", 'a="x"'),
        ("a==x", 'a="x"'),
        ("a!=x", 'a!="x"'),
        ("a in (x)", 'a=~"x"'),
        ("a in (y,x)", 'a=~"x|y"'),
        ("a notin (x)", 'a!~"x"'),
        ("a notin (x,y)", 'a!~"x|y"'),
        ("a", 'a!=""'),
        ("!a", 'a=""'),
        ("b=1,a=2", 'a="2",b="1"'),  # labels.Parse sorts requirements by key
    ],
)
def test_a_metric_selector_becomes_label_matchers(selector: str, matchers: str) -> None:
    query = MetricsQuery("<<.LabelMatchers>>", _LabelIsResource(), False)
    assert query.build_external("s", "", "", [], parse_selector(selector)).query == matchers


@pytest.mark.parametrize("selector", ["a>1", "a<1"])
def test_greater_and_less_have_no_promql_matcher(selector: str) -> None:
    # metrics_query.go operatorIsSupported: ErrUnsupportedOperator
    query = MetricsQuery("<<.LabelMatchers>>", _LabelIsResource(), False)
    with pytest.raises(QueryError, match="operator not supported by prometheus"):
        query.build_external("s", "", "", [], parse_selector(selector))


def test_regex_filters() -> None:
    # regex_matcher_test.go TestReMatcherIs, TestReMatcherIsNot, TestEnforcesIsOrIsNotButNotBoth
    matcher = re_matcher(RegexFilter(is_="my_.*"))
    assert matcher.matches("my_label") and not matcher.matches("your_label")
    matcher = re_matcher(RegexFilter(is_not="my_.*"))
    assert not matcher.matches("my_label") and matcher.matches("your_label")
    with pytest.raises(ValueError, match="cannot have both"):
        re_matcher(RegexFilter(is_="my_.*", is_not="your_.*"))
    with pytest.raises(ValueError, match="must have either"):
        re_matcher(RegexFilter())


# Go's regexp.Expand documentation (go/src/regexp/regexp.go): "In the template, a variable is denoted by a substring
# of the form $name or ${name} ... $1x is equivalent to ${1x}, not ${1}x, and, $10 is equivalent to ${10}, not
# ${1}0 ... To insert a literal $ in the output, use $$"
@pytest.mark.parametrize(
    ("pattern", "template", "expected"),
    [
        (r"^(.*)_total$", "$1", "http_requests"),
        (r"^(.*)_total$", "$0", "http_requests_total"),
        (r"^(.*)_total$", "${1}_per_second", "http_requests_per_second"),
        (r"^(.*)_total$", "$1_per_second", ""),  # the name is "1_per_second": no such group
        (r"^(?P<what>.*)_total$", "${what}x", "http_requestsx"),
        (r"^(?P<what>.*)_total$", "$what", "http_requests"),
        (r"^(.*)_total$", "$$1", "$1"),
        (r"^(.*)_total$", "cost$", "cost$"),  # a $ that starts no name stays
        (r"^(.*)_total$", "${1", "${1"),  # an unclosed brace: the $ stays
        (r"^(.*)_total$", "$01", ""),  # a leading zero is a name, not a number
        (r"^(.*)_total$", "$2", ""),  # past the groups: empty
    ],
)
def test_name_as_expands_as_go_does(pattern: str, template: str, expected: str) -> None:
    match = compile_go(pattern).search("http_requests_total")
    assert match is not None
    assert expand(template, match) == expected


@pytest.mark.parametrize("pattern", [r"(?=a)", r"(?!a)b", r"(?<=a)b", r"(a)\1", r"(?P<x>a)(?P=x)"])
def test_patterns_go_refuses_are_refused(pattern: str) -> None:
    with pytest.raises(GoRegexpError, match="invalid or unsupported Perl syntax"):
        compile_go(pattern)


def test_name_defaults() -> None:
    # metric_namer.go NamersFromConfig: `as` defaults to $0 without a capture group, $1 with one; an empty `matches`
    # is `.*`; several groups need an `as`
    def named(matches: str, as_: str = "") -> str | None:
        text = f"rules: [{{seriesQuery: x, name: {{matches: '{matches}', as: '{as_}'}}, metricsQuery: q}}]"
        return _rules(text)[0].metric_name("http_requests_total")

    assert named("") == "http_requests_total"
    assert named("^http_(.*)") == "requests_total"
    assert named("^http_.*_total$") == "http_requests_total"
    assert named("^(http)_(.*)_total$", "${2}_of_$1") == "requests_of_http"
    assert named("^nothing$") is None
    with pytest.raises(PromAdapterConfigError, match=r"rules\[0\]\.name\.as: must specify an 'as' value"):
        named("^(http)_(.*)$")


# the walkthrough's rule (docs/walkthrough.md, "Configuring the adapter") and the chart's default rules
# (prometheus-community/helm-charts charts/prometheus-adapter/templates/configmap.yaml, rules.default: true)
WALKTHROUGH_RULE = """
rules:
- seriesQuery: '{namespace!="",__name__!~"^container_.*"}'
  resources:
    template: "<<.Resource>>"
  name:
    matches: "^(.*)_total"
    as: ""
  metricsQuery: |
    sum by (<<.GroupBy>>) (
      irate (
        <<.Series>>{<<.LabelMatchers>>}[1m]
      )
    )
"""


def test_the_walkthrough_rule_on_a_scraped_application() -> None:
    # the sample app's series as Prometheus scrapes it: the scrape adds job and instance; the kubernetes_sd relabelling
    # of the walkthrough adds namespace, pod and service. With the template <<.Resource>> every label that names a
    # resource the cluster has is one (resource_converter.go): `job` names jobs.batch and `service` services, `instance`
    # nothing
    namers = _rules(WALKTHROUGH_RULE, RestMapper())
    registry = SeriesRegistry(RestMapper())
    series = _series("http_requests_total", "namespace", "pod", "service", "job", "instance")
    registry.set_series([namers[0].filter_series([series])], namers)
    assert {info.resource_name for info in registry.list_all_metrics()} == {
        "pods/http_requests",
        "namespaces/http_requests",
        "services/http_requests",
        "jobs.batch/http_requests",
    }
    built = registry.query_for_metric(
        _info("", "pods", True, "http_requests"), "default", EVERYTHING, ["sample-app-1", "sample-app-2"]
    )
    assert built is not None
    assert built.query == (
        "sum by (pod) (\n  irate (\n    http_requests_total"
        '{namespace="default",pod=~"sample-app-1|sample-app-2"}[1m]\n  )\n)\n'
    )
    assert built.timestamps() == (
        'max by (pod) (timestamp(http_requests_total{namespace="default",pod=~"sample-app-1|sample-app-2"}))'
    )


def test_external_rules_are_named_by_the_last_series_and_namespaced_unless_told() -> None:
    text = """
externalRules:
- seriesQuery: '{__name__="queue_depth"}'
  resources: {overrides: {namespace: {resource: namespace}}}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
- seriesQuery: '{__name__="queue_depth"}'
  resources: {namespaced: false}
  name: {matches: ^queue_(.*)$, as: "cluster_$1"}
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>})
"""
    config = parse_prom_adapter_config(load_document(text, "test"), "test")
    namers = namers_from_config(config.external_rules, RestMapper())
    registry = ExternalSeriesRegistry()
    series = [_series("queue_depth", "namespace", "queue")]
    registry.set_series([series, series], namers)
    assert registry.list_all_metrics() == ["cluster_depth", "queue_depth"]
    selected = parse_selector("queue=orders")
    namespaced = registry.query_for_metric("shop", "queue_depth", selected)
    assert namespaced is not None
    assert namespaced.query == 'sum(queue_depth{queue="orders",namespace="shop"}) by ()'
    cluster = registry.query_for_metric("shop", "cluster_depth", selected)
    assert cluster is not None
    assert cluster.query == 'sum(queue_depth{queue="orders"})'
    assert cluster.timestamps() == 'max(timestamp(queue_depth{queue="orders"}))'


def test_resource_templates_read_backwards() -> None:
    # lbl_res.go: the template executed with regular-expression groups and anchored; resource_converter.go: the
    # label of a resource from its singular and its group with . and - as _
    converter = ResourceConverter("kube_<<.Group>>_<<.Resource>>", {}, RestMapper())
    assert converter.label_for_resource(GroupResource("apps", "deployments")) == "kube_apps_deployment"
    assert (
        converter.label_for_resource(GroupResource("networking.k8s.io", "ingresses"))
        == "kube_networking_k8s_io_ingress"
    )
    resources, namespaced = converter.resources_for_series({"kube_apps_deployment", "kube__namespace", "other"})
    assert set(resources) == {GroupResource("apps", "deployments")}  # "" group: `(?P<group>.+?)` needs a character
    assert namespaced


def test_series_namespaced_unless_every_label_is_cluster_scoped_or_unknown() -> None:
    # resource_converter.go ResourcesForSeries: a label that does not look like a resource makes the series
    # namespaced; one that looks like a resource the mapper does not know is skipped first
    overrides_only = ResourceConverter("", {"node": GroupResource("", "node")}, RestMapper())
    assert overrides_only.resources_for_series({"node"}) == ([GroupResource("", "nodes")], False)
    assert overrides_only.resources_for_series({"node", "instance"}) == ([GroupResource("", "nodes")], True)
    templated = ResourceConverter("<<.Resource>>", {}, RestMapper())
    assert templated.resources_for_series({"node", "instance"}) == ([GroupResource("", "nodes")], False)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rules: [{seriesQuery: x, metricQuery: y}]", r"rules\[0\]: field 'metricQuery' not found"),
        ("rules: [{seriesQuery: x, seriesQuery: y}]", "already set in map"),
        ("rules: [{seriesQuery: x, seriesFilters: [{is: a, isNot: b}]}]",
         r"rules\[0\]\.seriesFilters\[0\]: cannot have both"),
        ("rules: [{seriesQuery: x, seriesFilters: [{}]}]", r"rules\[0\]\.seriesFilters\[0\]: must have either"),
        ("rules: [{seriesQuery: x, name: {matches: '(?=a)'}}]", r"rules\[0\]\.name\.matches: unable to compile"),
        ("rules: [{seriesQuery: x, metricsQuery: '<<.Series'}]", r"rules\[0\]\.metricsQuery: .*unclosed action"),
        ("externalRules: [{seriesQuery: x, metricsQuery: '<<if .Series>>x<<end>>'}]",
         r"externalRules\[0\]\.metricsQuery: .*<<if \.Series>> is not an action gpu-pulse reads"),
        ("rules: [{seriesQuery: x, metricsQuery: '<<.Serie>>'}]", r"<<\.Serie>> reads no field there is"),
        ("rules: [{seriesQuery: x, resources: {template: '<<.Group>>'}}]",
         r"rules\[0\]\.resources: .*must include at least"),
        ("rules: [{seriesQuery: x, resources: {namespaced: maybe}}]",
         r"rules\[0\]\.resources\.namespaced: expected true"),
        ("rules: {seriesQuery: x}", "rules: expected a list of rules"),
        ("rulez: []", "top level: field 'rulez' not found"),
    ],
)  # fmt: skip
def test_a_configuration_prometheus_adapter_refuses_is_refused_in_one_line(text: str, problem: str) -> None:
    with pytest.raises(PromAdapterConfigError, match=problem) as caught:
        config = parse_prom_adapter_config(load_document(text, "--config x.yaml"), "--config x.yaml")
        namers_from_config([*config.rules, *config.external_rules], RestMapper(), "--config x.yaml")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("--config x.yaml")


def test_resource_rules_are_named_as_not_served() -> None:
    config = parse_prom_adapter_config(load_document("resourceRules: {cpu: {containerQuery: x}}\nrules: []", "f"), "f")
    assert config.not_served() == ["resourceRules (metrics.k8s.io: keep metrics-server or prometheus-adapter for it)"]


def test_the_two_formats_are_told_apart_by_their_keys() -> None:
    assert is_prometheus_adapter_config({"rules": []})
    assert is_prometheus_adapter_config({"externalRules": [], "resourceRules": {}})
    assert not is_prometheus_adapter_config({"metrics": []})
    assert not is_prometheus_adapter_config({"rules": [], "metrics": []})
    assert not is_prometheus_adapter_config(["rules"])


def test_the_built_in_mapper_normalizes_as_discovery_does() -> None:
    mapper = RestMapper()
    assert mapper.resource_for(GroupResource("", "pod")) == GroupResource("", "pods")
    assert mapper.resource_for(GroupResource("", "Deployment")) == GroupResource("apps", "deployments")
    assert mapper.resource_for(GroupResource("", "events")) == GroupResource("", "events")  # core before events.k8s.io
    assert mapper.resource_for(GroupResource("events.k8s.io", "event")) == GroupResource("events.k8s.io", "events")
    assert mapper.resource_for(GroupResource("", "instance")) is None
    assert mapper.singular("jobs") == "job"
    kinds = [(t.group, t.plural) for t in BUILT_IN]
    assert len(kinds) == len(set(kinds))


@given(st.text())
def test_go_quote_is_a_literal_promql_and_python_read_back(text: str) -> None:
    # Go's strconv.Quote escapes are Python's and PromQL's (\a \b \f \n \r \t \v \xNN \uNNNN \UNNNNNNNN \" \\)
    assert ast.literal_eval(go_quote(text)) == text


@given(st.text(alphabet=st.characters(blacklist_characters="<>")))
def test_a_template_without_actions_is_its_text(text: str) -> None:
    assert parse_template(text, ("Series",)).execute({"Series": "s"}) == text


@given(st.lists(st.sampled_from(["<<.Series>>", "<< .GroupBy >>", "a", " ", "{", "}", ",", "<<- .Series>>",
                                 "<<.Series ->>", "<</* c */>>"])))  # fmt: skip
def test_templates_render_as_go_would(pieces: list[str]) -> None:
    text = "".join(pieces)
    rendered = parse_template(text, ("Series", "GroupBy")).execute({"Series": "S", "GroupBy": "G"})
    # a reference rendering: trim markers eat the whitespace beside them, comments vanish
    reference = text
    reference = re.sub(r"\s*<<- ", "<<", reference)
    reference = re.sub(r" ->>\s*", ">>", reference)
    reference = reference.replace("<</* c */>>", "").replace("<< .GroupBy >>", "G")
    reference = reference.replace("<<.Series>>", "S").replace("<<.Series>>", "S")
    assert rendered == reference


def test_templates_refuse_what_they_do_not_read() -> None:
    with pytest.raises(TemplateError):
        parse_template("<<range .GroupBySlice>><<.>><<end>>", ("GroupBySlice",))


@pytest.mark.parametrize(
    ("text", "seconds"), [("1m", 60), ("30s", 30), ("1h30m", 5400), ("1.5m", 90), ("500ms", 0.5), ("90", 90)]
)
def test_durations_as_prometheus_adapter_flags_take_them(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == seconds


@pytest.mark.parametrize(
    ("value", "served"),
    [
        (1.9999, Decimal("1.999")),  # int64(value*1000.0) truncates toward zero
        (-1.9999, Decimal("-1.999")),
        (0.1, Decimal("0.1")),
        (float("nan"), Decimal(0)),  # provider.go metricFor: NaN is served as 0
        (float("inf"), None),
        (1e300, None),
    ],
)
def test_values_as_prometheus_adapter_serves_them(value: float, served: Decimal | None) -> None:
    assert served_quantity(value) == served


class _ScriptedApi:
    """A Prometheus API whose series answers a test sets (None: the call fails)."""

    def __init__(self) -> None:
        self.answer: list[SeriesName] | None = []
        self.asked: list[tuple[str, float]] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def series(self, selector: str, start: float) -> list[SeriesName]:
        self.asked.append((selector, start))
        if self.answer is None:
            raise SourceUnavailableError("prometheus is down")
        return self.answer


async def test_a_failed_relist_keeps_what_was_found_and_selectors_are_asked_once() -> None:
    # provider.go updateMetrics: "don't do duplicate queries when it's just the matchers that change", an error
    # returns before SetSeries; start is now - max age
    namers = _rules(UPSTREAM_DEFAULT_CONFIG)
    api = _ScriptedApi()
    discovery = RuleDiscovery(
        api,  # type: ignore[arg-type]
        SeriesRegistry(UPSTREAM_TEST_MAPPER),
        namers,
        ExternalSeriesRegistry(),
        [],
        interval=60,
        max_age=120,
        clock=lambda: 1000.0,
    )
    api.answer = None
    assert not discovery.ready()
    await discovery.relist()
    assert discovery.ready(), "a Prometheus that is down keeps the rules' metrics out, not the replica"
    assert discovery.custom.list_all_metrics() == []
    api.asked.clear()
    api.answer = [_series("container_some_usage", "pod", "namespace", "container")]
    await discovery.relist()
    assert sorted(api.asked) == [(_CONTAINER_SERIES, 880.0), (_KUBE_SERIES, 880.0)]
    found = discovery.custom.list_all_metrics()
    assert [i.resource_name for i in found] == ["namespaces/some_usage", "pods/some_usage"]
    api.answer = None
    await discovery.relist()
    assert discovery.custom.list_all_metrics() == found
    assert discovery.relists["custom", "error"] == 2 and discovery.relists["custom", "ok"] == 1


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.sampled_from(["<<.Series>>", "(", "$1"])
)
_KEYS = st.sampled_from(
    ["rules", "externalRules", "resourceRules", "seriesQuery", "seriesFilters", "resources", "name", "metricsQuery",
     "is", "isNot", "template", "overrides", "namespaced", "matches", "as", "group", "resource", "pod", "x"]
)  # fmt: skip
_DOCUMENTS = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12
)


@given(_DOCUMENTS)
def test_any_document_is_read_or_refused_in_one_line(document: object) -> None:
    try:
        config = parse_prom_adapter_config(document, "f")
        namers_from_config([*config.rules, *config.external_rules], RestMapper(), "f")
    except PromAdapterConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("f: ")


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["h", "m", "s", "ms"])), min_size=1, max_size=4))
def test_go_durations_add_their_parts(parts: list[tuple[int, str]]) -> None:
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    text = "".join(f"{number}{suffix}" for number, suffix in parts)
    assert parse_go_duration(text) == pytest.approx(sum(number * unit[suffix] for number, suffix in parts))


def test_relist_flags_as_prometheus_adapter_takes_them() -> None:
    settings = load_settings(["--metrics-relist-interval=1m"], {})
    assert settings.metrics_relist_interval == 60 and settings.metrics_max_age is None
    assert load_settings([], {}).metrics_relist_interval == 600  # adapter.go: MetricsRelistInterval 10 * time.Minute
    # adapter.go makeProvider: "max age must not be less than relist interval"
    with pytest.raises(SettingsError, match="--metrics-max-age must not be less than --metrics-relist-interval"):
        load_settings(["--metrics-relist-interval=5m", "--metrics-max-age=1m"], {})
    with pytest.raises(SettingsError, match="metrics-relist-interval"):
        load_settings(["--metrics-relist-interval=soon"], {})
