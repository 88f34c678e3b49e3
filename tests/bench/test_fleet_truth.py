"""bench/fleet.py's check of HPA answers against the simulated fleet's ground truth (bench/fleet_cluster.py): the
figures the exporters publish are the truth function's, and each kind of wrong answer is caught, a right one not."""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet import Answer, AnswerChecker, Membership, answer_items, milli_units, timestamp_second
from fleet_cluster import GpuPod, Node, Snapshots, sample_second, utilization_tenths

from adapter.api.bodies import CustomItems, described_object, rfc3339
from adapter.quantity import canonical_quantity
from adapter.sources.metricsource import ServedValue
from toolkit.pods_contract import parse_node_pods

NAMESPACE, DEPLOYMENT = "team-01", "infer-001"
ASKED = 1_800_000_000.25  # the question's time; the answer came 10 ms later
SECOND = int(ASKED) - 1  # the sample second of the figures served


def test_the_simulated_exporters_publish_the_truth_function() -> None:
    """What a node's `/pods` document says (read by the adapter's own parser) is utilization_tenths of each pod for
    the sample second the document names."""
    node = Node(3, "gpu-0003", "127.1.0.4", phase=0.0)
    for k in range(10):
        pod = GpuPod(NAMESPACE, f"{DEPLOYMENT}-7c9f8-{k:06x}", f"uid-{k}", DEPLOYMENT, node=3, gpu=k % 8)
        node.pods[(pod.namespace, pod.name)] = pod
    snapshots = Snapshots(1.0, [node], seed=1)
    seconds = set()
    for now in (ASKED, ASKED + 0.999, ASKED + 7.5):
        snapshots.snapshot(node, now)
        document = parse_node_pods(node.document(None))
        assert len(document.pods) == 10
        for pod in document.pods:
            second = sample_second(pod.sampled_at.timestamp())
            seconds.add(second)
            published = pod.containers[0].devices[0].utilization_percent
            assert published == utilization_tenths(pod.namespace, pod.name, second) / 10
    assert seconds == {SECOND + 1, SECOND + 2, SECOND + 8}


@given(st.text(min_size=1, max_size=30), st.integers(min_value=0, max_value=2**40))
def test_the_truth_is_a_percent_to_a_tenth(name: str, second: int) -> None:
    tenths = utilization_tenths(NAMESPACE, name, second)
    assert 0 <= tenths <= 1000
    assert utilization_tenths(NAMESPACE, name, second) == tenths


def test_the_truth_changes_from_second_to_second_and_pod_to_pod() -> None:
    assert len({utilization_tenths(NAMESPACE, "a", s) for s in range(50)}) > 40
    assert len({utilization_tenths(NAMESPACE, f"p{k}", SECOND) for k in range(50)}) > 40


@given(st.integers(min_value=0, max_value=1000))
def test_served_quantities_read_back_in_milli_units(tenths: int) -> None:
    """The adapter's canonical quantity (its own formatter as the referee) reads back exactly."""
    assert milli_units(canonical_quantity(Decimal(tenths) / 10)) == tenths * 100


def test_what_is_not_a_quantity_in_milli_units() -> None:
    assert milli_units("1e3") == 1_000_000
    assert milli_units("37.5") == 37_500
    assert milli_units("5n") is None
    assert milli_units("abc") is None
    assert milli_units("12Q") is None


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_timestamps_read_back_as_their_second(unix: float) -> None:
    """The adapter's own timestamp writer as the referee."""
    assert timestamp_second(rfc3339(unix)) == math.floor(unix)


def test_a_timestamp_that_is_not_one() -> None:
    assert timestamp_second("yesterday") is None


# ---- the checker on hand-made answers --------------------------------------------------------------------------
def pod(k: int) -> str:
    return f"{DEPLOYMENT}-7c9f8-{k:06x}"


def membership() -> Membership:
    """Deployment infer-001 with pods 0-3 since long ago; pod 4 deleted 10 s before the question, pod 5 deleted 1 s
    before it, pod 6 created 1 s before it, pod 7 created 30 s after; another Deployment's pod 8."""
    long_ago = ASKED - 600
    entries: list[tuple[float, str, str, str, str, int]] = [
        (long_ago, "add", NAMESPACE, pod(k), DEPLOYMENT, k) for k in range(6)
    ]
    entries += [
        (long_ago, "add", NAMESPACE, "infer-002-7c9f8-000008", "infer-002", 8),
        (ASKED - 10, "delete", NAMESPACE, pod(4), DEPLOYMENT, 4),
        (ASKED - 1, "delete", NAMESPACE, pod(5), DEPLOYMENT, 5),
        (ASKED - 1, "add", NAMESPACE, pod(6), DEPLOYMENT, 6),
        (ASKED + 30, "add", NAMESPACE, pod(7), DEPLOYMENT, 7),
    ]
    known = Membership()
    known.replay(entries, until=ASKED + 60)
    return known


def item(name: str, second: int = SECOND, tenths: int | None = None, value_second: int | None = None) -> str:
    """One item as the adapter renders it; its value the truth of `value_second` (default: the sample second)."""
    if tenths is None:
        tenths = utilization_tenths(NAMESPACE, name, second if value_second is None else value_second)
    served = ServedValue(Decimal(tenths) / 10, second + 0.7, 1)
    items = CustomItems("v1beta2", "gpu_utilization", None)
    items.add(described_object("Pod", "/v1", NAMESPACE, name), served)
    answer: dict[str, list[object]] = json.loads(items.text())
    return json.dumps(answer["items"][0])


def check(*texts: str, grace: float = 2.0) -> tuple[AnswerChecker, Answer]:
    items = [json.loads(text) for text in texts]
    answer = Answer(6, 0.01, 200, len(items), [], 0, ASKED, ASKED + 0.01, (NAMESPACE, DEPLOYMENT))
    checker = AnswerChecker(membership(), grace)
    checker.check(answer, items)
    return checker, answer


RIGHT = [item(pod(k)) for k in range(4)]


def test_a_right_answer_is_right() -> None:
    checker, answer = check(*RIGHT)
    assert (answer.wrong, answer.missing, checker.wrong_answers, dict(checker.wrong)) == (0, 0, 0, {})
    assert (checker.answers, checker.items) == (1, 4)


def test_pods_within_the_grace_count_either_way() -> None:
    """Pod 5 deleted and pod 6 created a second before the question: with or without them, the answer is right."""
    for texts in (RIGHT, [*RIGHT, item(pod(5)), item(pod(6))]):
        _, answer = check(*texts)
        assert (answer.wrong, answer.missing) == (0, 0)


def test_a_figure_of_the_neighbouring_second_is_right() -> None:
    """The adapter places the exporter's sample time on its own clock: the stamp may be a second off the figure's."""
    for value_second in (SECOND - 1, SECOND + 1):
        _, answer = check(item(pod(0), value_second=value_second), *RIGHT[1:])
        assert answer.wrong == 0


def wrong_kinds(*texts: str, grace: float = 2.0) -> dict[str, int]:
    checker, answer = check(*texts, grace=grace)
    assert checker.wrong_answers == 1
    assert answer.wrong == sum(checker.wrong.values())
    assert all(checker.examples[kind] for kind in checker.wrong)
    return dict(checker.wrong)


def test_each_kind_of_wrong_item_is_caught() -> None:
    right = utilization_tenths(NAMESPACE, pod(0), SECOND)
    assert wrong_kinds(*RIGHT, item("infer-002-7c9f8-000008")) == {"foreign pod": 1}
    assert wrong_kinds(*RIGHT, item("web-000-7c9f8-000001")) == {"foreign pod": 1}
    assert wrong_kinds(*RIGHT, item(pod(4))) == {"deleted pod": 1}
    assert wrong_kinds(*RIGHT, item(pod(7))) == {"unborn pod": 1}
    assert wrong_kinds(*RIGHT, RIGHT[2]) == {"duplicate": 1}
    assert wrong_kinds(item(pod(0), tenths=(right + 1) % 1001), *RIGHT[1:]) == {"wrong value": 1}
    assert wrong_kinds(item(pod(0), value_second=SECOND - 2), *RIGHT[1:]) == {"wrong value": 1}
    assert wrong_kinds(item(pod(0), second=SECOND - 6), *RIGHT[1:]) == {"stale": 1}
    assert wrong_kinds(item(pod(0), second=SECOND + 2), *RIGHT[1:]) == {"future": 1}
    undated = json.dumps({**json.loads(RIGHT[0]), "timestamp": "yesterday"})
    assert wrong_kinds(undated, *RIGHT[1:]) == {"bad timestamp": 1}
    assert wrong_kinds(item(pod(5)), *RIGHT, grace=0.5) == {"deleted pod": 1}


def test_an_item_as_old_as_the_max_age_allows_is_right() -> None:
    """Stamped 5 s before the second of the question: sampled up to 5 s before the adapter answered."""
    _, answer = check(item(pod(0), second=SECOND - 4), *RIGHT[1:])
    assert answer.wrong == 0


def test_pods_left_out_are_missing_unless_their_figures_could_not_be_fresh() -> None:
    checker, answer = check(*RIGHT[:2])
    assert (answer.wrong, answer.missing, checker.answers_missing) == (0, 2, 1)
    checker = AnswerChecker(membership(), 2.0)
    checker.exporter_down[2].append((ASKED - 20, ASKED - 3))  # pod 2's exporter restarted a while ago
    answer = Answer(6, 0.01, 200, 2, [], 0, ASKED, ASKED + 0.01, (NAMESPACE, DEPLOYMENT))
    checker.check(answer, [json.loads(text) for text in RIGHT[:2]])
    assert answer.missing == 1


def test_an_answer_s_body_is_parsed_after_the_measurement_with_its_ages() -> None:
    """The HPAs' client keeps bodies; `answer_items` parses one later and sets the item count and the figures' ages."""
    body = ('{"kind":"MetricValueList","items":[' + ",".join(RIGHT[:2]) + "]}").encode()
    answer = Answer(6, 0.01, 200, 0, [], 0, ASKED, ASKED + 0.01, (NAMESPACE, DEPLOYMENT))
    items = answer_items(answer, body)
    assert items == [json.loads(text) for text in RIGHT[:2]]
    assert answer.items == 2
    assert answer.ages == [ASKED + 0.01 - timestamp_second(item["timestamp"]) for item in items]


@pytest.mark.parametrize("body", [b"<html>", b'{"kind":"Status"}', b'{"items":{}}', b'{"items":[{"value":"1"}]}'])
def test_a_body_that_is_not_a_metric_value_list_fails_the_answer(body: bytes) -> None:
    answer = Answer(6, 0.01, 200, 0, [], 0, ASKED, ASKED + 0.01, (NAMESPACE, DEPLOYMENT))
    assert answer_items(answer, body) is None
    assert answer.status == 0 and answer.failure.startswith("200 with a body that is not a MetricValueList")


def test_a_failed_answer_is_explained_only_when_every_pod_s_exporter_was_restarting() -> None:
    """Pods 0-3 and 6 are the Deployment's at the question (5 deleted within the grace counts too): a failure is put
    down to restarting exporters only when all of their nodes' exporters were restarting."""
    checker = AnswerChecker(membership(), 2.0)
    answer = Answer(6, 0.01, 503, 0, [], 0, ASKED, ASKED + 0.01, (NAMESPACE, DEPLOYMENT))
    for node in (0, 1, 2, 3, 5):
        checker.exporter_down[node].append((ASKED - 5, ASKED + 30))
    assert not checker.all_exporters_down(answer)
    checker.exporter_down[6].append((ASKED - 40, ASKED - 5))  # over before the question
    assert not checker.all_exporters_down(answer)
    checker.exporter_down[6].append((ASKED - 1, ASKED + 30))
    assert checker.all_exporters_down(answer)
