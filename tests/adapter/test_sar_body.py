"""The SubjectAccessReview the adapter sends, held to the `kubernetes` client's own serialization of the same review
(authorization.k8s.io/v1 as its models write it), and the decision read from every shape of answer."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import (
    ApiClient,
    V1NonResourceAttributes,
    V1ResourceAttributes,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
)

from adapter.auth.identity import Decision, NonResourceAttributes, ResourceAttributes, UserInfo
from adapter.auth.sar import decision_of, review_body

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
users = st.builds(
    UserInfo,
    name=names,
    uid=names,
    groups=st.lists(names, max_size=3).map(tuple),
    extra=st.dictionaries(names, st.lists(names, max_size=2).map(tuple), max_size=2),
)
resources = st.builds(
    ResourceAttributes,
    verb=st.sampled_from(["get", "list", "watch"]),
    group=st.sampled_from(["custom.metrics.k8s.io", "external.metrics.k8s.io", ""]),
    resource=names,
    version=names,
    subresource=names,
    namespace=names,
    name=names,
)
paths = st.builds(NonResourceAttributes, path=names.map(lambda p: "/" + p), verb=st.sampled_from(["get", "post"]))


def _by_the_client(user: UserInfo, attributes: ResourceAttributes | NonResourceAttributes) -> dict[str, Any]:
    """The review as the `kubernetes` client serializes its models, empty fields left out (omitempty in Go)."""
    spec = V1SubjectAccessReviewSpec(
        user=user.name,
        uid=user.uid or None,
        groups=list(user.groups) or None,
        extra={k: list(v) for k, v in user.extra.items()} or None,
    )
    if isinstance(attributes, ResourceAttributes):
        spec.resource_attributes = V1ResourceAttributes(
            verb=attributes.verb,
            group=attributes.group,
            version=attributes.version,
            resource=attributes.resource,
            subresource=attributes.subresource,
            namespace=attributes.namespace,
            name=attributes.name,
        )
    else:
        spec.non_resource_attributes = V1NonResourceAttributes(path=attributes.path, verb=attributes.verb)
    body = V1SubjectAccessReview(api_version="authorization.k8s.io/v1", kind="SubjectAccessReview", spec=spec)
    serialized: dict[str, Any] = ApiClient().sanitize_for_serialization(body)
    found = serialized["spec"].get("resourceAttributes")
    if found is not None:
        serialized["spec"]["resourceAttributes"] = {k: v for k, v in found.items() if v != ""}
    return serialized


@given(users, st.one_of(resources, paths))
def test_the_review_is_what_the_kubernetes_client_would_send(
    user: UserInfo, attributes: ResourceAttributes | NonResourceAttributes
) -> None:
    assert review_body(user, attributes) == _by_the_client(user, attributes)


def test_the_decision_is_allowed_only_when_allowed_and_not_denied() -> None:
    assert decision_of({"status": {"allowed": True}}) == Decision(True, "")
    assert decision_of({"status": {"allowed": True, "denied": True, "reason": "r"}}) == Decision(False, "r")
    assert decision_of({"status": {"allowed": False, "evaluationError": "e"}}) == Decision(False, "e")
    assert decision_of({"status": {"allowed": "true"}}).allowed is False  # not a JSON true
    assert decision_of({"status": {}}) == Decision(False, "")
    assert decision_of({}) == Decision(False, "the SubjectAccessReview came back without a status")
    assert decision_of({"status": [1]}).allowed is False
    assert decision_of({"status": {"allowed": True, "reason": 7}}) == Decision(True, "")
