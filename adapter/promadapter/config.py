"""prometheus-adapter's configuration file, read as prometheus-adapter reads it (pkg/config/config.go, loader.go).

The file is `MetricsDiscoveryConfig`: `rules` (custom metrics), `externalRules` (external metrics) and `resourceRules`
(metrics.k8s.io, which gpu-pulse does not serve: named at start-up, never silently dropped). prometheus-adapter decodes
it with yaml.UnmarshalStrict, so an unknown or repeated key is an error; so it is here, in one line naming the rule and
the field. A rule: `seriesQuery`, `seriesFilters` (each `is` or `isNot`), `resources` (`template`, `overrides` of
label -> {group, resource}, `namespaced`), `name` (`matches`, `as`), `metricsQuery`.

`is_prometheus_adapter_config` tells the two formats `--config` takes apart by their keys: gpu-pulse's has `metrics`
and `external`, prometheus-adapter's `rules`, `externalRules` and `resourceRules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from adapter.promadapter.restmapper import GroupResource

OWN_KEYS = frozenset({"rules", "externalRules", "resourceRules"})
GPU_PULSE_KEYS = frozenset({"metrics", "external"})
_RULE_KEYS = ("seriesQuery", "seriesFilters", "resources", "name", "metricsQuery")
_RESOURCES_KEYS = ("template", "overrides", "namespaced")


class PromAdapterConfigError(ValueError):
    """A configuration prometheus-adapter would refuse; the message is one line naming the rule and the field."""


@dataclass(frozen=True)
class RegexFilter:
    is_: str = ""
    is_not: str = ""


@dataclass(frozen=True)
class ResourceMapping:
    template: str = ""
    overrides: Mapping[str, GroupResource] = field(default_factory=dict)
    namespaced: bool | None = None


@dataclass(frozen=True)
class NameMapping:
    matches: str = ""
    as_: str = ""


@dataclass(frozen=True)
class DiscoveryRule:
    """One entry of `rules` or `externalRules`; `where` says which (`rules[2]`), for messages."""

    where: str
    series_query: str = ""
    series_filters: tuple[RegexFilter, ...] = ()
    resources: ResourceMapping = ResourceMapping()
    name: NameMapping = NameMapping()
    metrics_query: str = ""


@dataclass(frozen=True)
class PromAdapterConfig:
    rules: tuple[DiscoveryRule, ...] = ()
    external_rules: tuple[DiscoveryRule, ...] = ()
    resource_rules: bool = False  # present: metrics.k8s.io, which gpu-pulse leaves to metrics-server

    def not_served(self) -> list[str]:
        """What the file asks for that gpu-pulse does not serve, one phrase each (said at start-up)."""
        return (
            ["resourceRules (metrics.k8s.io: keep metrics-server or prometheus-adapter for it)"]
            if self.resource_rules
            else []
        )


def is_prometheus_adapter_config(document: object) -> bool:
    """Whether a parsed `--config` document is prometheus-adapter's (its keys), not gpu-pulse's."""
    if not isinstance(document, dict):
        return False
    keys = set(document)
    return bool(keys & OWN_KEYS) and not keys & GPU_PULSE_KEYS


class _Reader:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, where: str, problem: str) -> PromAdapterConfigError:
        return PromAdapterConfigError(f"{self.origin}: {where}: {problem}")

    def mapping(self, value: object, where: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in keys:
                raise self.fail(
                    where, f"field {key!r} not found in prometheus-adapter's format (it reads {', '.join(keys)})"
                )
        return value

    def text(self, value: object, where: str) -> str:
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(where, f"expected a string, got {_kind(value)}")
        return str(value)

    def rule(self, value: object, where: str) -> DiscoveryRule:
        body = self.mapping(value, where, _RULE_KEYS)
        filters = body.get("seriesFilters")
        if filters is not None and not isinstance(filters, list):
            raise self.fail(f"{where}.seriesFilters", f"expected a list, got {_kind(filters)}")
        series_filters = []
        for index, item in enumerate(filters or ()):
            spot = f"{where}.seriesFilters[{index}]"
            entry = self.mapping(item, spot, ("is", "isNot"))
            series_filters.append(
                RegexFilter(self.text(entry.get("is"), f"{spot}.is"), self.text(entry.get("isNot"), f"{spot}.isNot"))
            )
        resources = self.mapping(body.get("resources"), f"{where}.resources", _RESOURCES_KEYS)
        overrides_body = resources.get("overrides")
        if overrides_body is not None and not isinstance(overrides_body, dict):
            raise self.fail(f"{where}.resources.overrides", f"expected a mapping, got {_kind(overrides_body)}")
        overrides = {}
        for label, target in (overrides_body or {}).items():
            spot = f"{where}.resources.overrides.{label}"
            entry = self.mapping(target, spot, ("group", "resource"))
            overrides[str(label)] = GroupResource(
                self.text(entry.get("group"), f"{spot}.group"), self.text(entry.get("resource"), f"{spot}.resource")
            )
        namespaced = resources.get("namespaced")
        if namespaced is not None and not isinstance(namespaced, bool):
            raise self.fail(f"{where}.resources.namespaced", f"expected true or false, got {namespaced!r}")
        name = self.mapping(body.get("name"), f"{where}.name", ("matches", "as"))
        return DiscoveryRule(
            where=where,
            series_query=self.text(body.get("seriesQuery"), f"{where}.seriesQuery"),
            series_filters=tuple(series_filters),
            resources=ResourceMapping(
                self.text(resources.get("template"), f"{where}.resources.template"), overrides, namespaced
            ),
            name=NameMapping(
                self.text(name.get("matches"), f"{where}.name.matches"), self.text(name.get("as"), f"{where}.name.as")
            ),
            metrics_query=self.text(body.get("metricsQuery"), f"{where}.metricsQuery"),
        )

    def rules(self, value: object, where: str) -> tuple[DiscoveryRule, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of rules, got {_kind(value)}")
        return tuple(self.rule(item, f"{where}[{index}]") for index, item in enumerate(value))


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", bool: "a boolean"}.get(type(value), type(value).__name__)


class _StrictLoader(yaml.SafeLoader):
    """yaml.v2's UnmarshalStrict refuses a key repeated in one mapping; PyYAML keeps the last one silently."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} already set in map", mark)
        seen.add(key)
    return dict(loader.construct_pairs(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_document(text: str, origin: str) -> object:
    """The YAML document of a `--config` file (PromAdapterConfigError with one line when it is not YAML)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except RecursionError:
        raise PromAdapterConfigError(f"{origin}: nested too deep to be a configuration") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PromAdapterConfigError(f"{origin}:{where} not valid YAML: {problem}") from None


def parse_prom_adapter_config(document: object, origin: str) -> PromAdapterConfig:
    """prometheus-adapter's configuration from a parsed document; PromAdapterConfigError names the rule and field."""
    reader = _Reader(origin)
    body = reader.mapping(document, "top level", ("rules", "resourceRules", "externalRules"))
    return PromAdapterConfig(
        rules=reader.rules(body.get("rules"), "rules"),
        external_rules=reader.rules(body.get("externalRules"), "externalRules"),
        resource_rules=body.get("resourceRules") is not None,
    )
