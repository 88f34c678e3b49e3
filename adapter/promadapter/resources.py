"""Which Kubernetes resources a series describes, and which label names a resource: a rule's `resources` block.

Follows prometheus-adapter pkg/naming/resource_converter.go and lbl_res.go:

- `overrides` map a label to a group-resource, normalized by the RESTMapper when the rule is read (a resource the
  mapper does not know is refused there; here it is named at start-up and left out, restmapper.py says why);
- `template` (`<<.Resource>>`, `kube_<<.Resource>>`, `<<.Group>>_<<.Resource>>`) names a resource's label from its
  singular name and its group with `.` and `-` written `_`; read backwards, it is a regular expression: the template
  executed with `(?P<group>.+?)` and `(?P<resource>.+?)` (its text is not escaped, as upstream does not escape it),
  anchored, and a label it matches names the resource it captures if the mapper knows it (`job` names jobs.batch, and
  `instance` nothing);
- a series is namespaced when some label of it is not a namespace, node or persistent-volume label, unless that label
  looked like a resource the mapper does not know (`ResourcesForSeries`, which skips such labels before it decides).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from adapter.promadapter.gotemplate import Template, TemplateError, parse_template
from adapter.promadapter.restmapper import CLUSTER_SCOPED_RESOURCES, GroupResource, RestMapper

_GROUP_SANITIZER = str.maketrans({".": "_", "-": "_"})  # naming.GroupNameSanitizer


class ResourceMappingError(ValueError):
    """A `resources` block prometheus-adapter would refuse; the message is one line."""


class LabelError(Exception):
    """No label names the resource (prometheus-adapter answers such a question with an error)."""


@dataclass(frozen=True)
class UnknownOverride:
    """An override naming a resource the mapper does not know: left out, and named at start-up."""

    label: str
    resource: GroupResource


class ResourceConverter:
    """prometheus-adapter's resourceConverter for one rule."""

    def __init__(self, template: str, overrides: Mapping[str, GroupResource], mapper: RestMapper) -> None:
        self._mapper = mapper
        self._template: Template | None = None
        self._extractor: re.Pattern[str] | None = None
        self.unknown_overrides: tuple[UnknownOverride, ...] = ()
        if template:
            try:
                self._template = parse_template(template, ("Group", "Resource"))
            except TemplateError as exc:
                raise ResourceMappingError(f"unable to parse label template {template!r}: {exc}") from None
            pattern = self._template.execute({"Group": "(?P<group>.+?)", "Resource": "(?P<resource>.+?)"})
            if not pattern:
                raise ResourceMappingError(
                    f"unable to generate label format from template {template!r}: empty template"
                )
            try:
                self._extractor = re.compile(f"^{pattern}$")
            except re.error as exc:
                raise ResourceMappingError(
                    f"unable to generate label format from template {template!r}: {exc}"
                ) from None
            if "resource" not in self._extractor.groupindex:
                raise ResourceMappingError(
                    f"unable to generate label format from template {template!r}: must include at least "
                    "`{{.Resource}}` in the label template"
                )
        self._label_to_resource: dict[str, GroupResource] = {}
        self._resource_to_label: dict[GroupResource, str] = {}
        unknown = []
        for label, partial in overrides.items():
            resource = mapper.resource_for(partial)
            if resource is None:
                unknown.append(UnknownOverride(label, partial))
                continue
            self._label_to_resource[label] = resource
            self._resource_to_label[resource] = label
        self.unknown_overrides = tuple(unknown)
        self._from_template: dict[str, GroupResource | None] = {}

    def label_for_resource(self, resource: GroupResource) -> str:
        """The label naming `resource` (normalized); LabelError when none does."""
        label = self._resource_to_label.get(resource)
        if label is not None:
            return label
        if self._template is None:
            raise LabelError(
                f"unable to convert resource {resource} into label: no generic resource label form specified for this "
                "metric"
            )
        singular = self._mapper.singular(resource.resource)
        if singular is None:
            raise LabelError(f"unable to convert resource {resource} into label: unable to singularize it")
        label = self._template.execute({"Group": resource.group.translate(_GROUP_SANITIZER), "Resource": singular})
        if not label:
            raise LabelError(
                f"unable to convert resource {resource} into label: empty label produced by label template"
            )
        return label

    def _resource_from_template(self, label: str) -> GroupResource | None:
        if label in self._from_template:
            return self._from_template[label]
        found = None
        match = self._extractor.match(label) if self._extractor is not None else None
        if match is not None:
            group = match.group("group") if "group" in self._extractor.groupindex else ""  # type: ignore[union-attr]
            found = self._mapper.resource_for(GroupResource(group or "", match.group("resource")))
        if len(self._from_template) < 4096:
            self._from_template[label] = found
        return found

    def resources_for_series(self, labels: Collection[str]) -> tuple[list[GroupResource], bool]:
        """The resources a series with these label names describes, and whether it is namespaced."""
        resources: list[GroupResource] = []
        namespaced = False
        for label in labels:
            resource = self._label_to_resource.get(label)
            if resource is None and self._extractor is not None and self._extractor.match(label) is not None:
                resource = self._resource_from_template(label)
                if resource is None:
                    continue  # looked like a resource the mapper does not know: skipped before `namespaced`
            if resource is not None:
                resources.append(resource)
            if resource not in CLUSTER_SCOPED_RESOURCES:
                namespaced = True
        return resources, namespaced
