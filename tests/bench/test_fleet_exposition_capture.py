"""The fleet bench's template is what the real exporter serves: its default field set on the slot node (8 x H100,
a pod on each GPU), every family the bench's walk drives among them, and two nodes of the fleet rendered from it
parse as Prometheus' text format with twice its series."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_exposition import GPUS, NodeTemplate, capture, slot_pod
from fleet_prometheus import FAMILIES, FleetTargets, fleet


def test_the_template_is_the_exporters_default_exposition_with_a_pod_on_every_gpu() -> None:
    texts, seconds = capture(2, "--field-set", "default", "--dialect", "dcgm")
    assert seconds > 0.5
    served = sum(1 for line in texts[0].split("\n") if line and not line.startswith("#"))
    template = NodeTemplate.parse(texts, seconds)
    assert template.series == served
    names = {family.name for family in template.families}
    assert set(FAMILIES) <= names
    assert all(f'pod="{slot_pod(k)}"' in texts[0] for k in range(GPUS))
    assert any(line.rate > 0 for family in template.families for line in family.lines), "no counter grew"

    placements = fleet(pods=2 * GPUS, namespaces=2, namespace_pods=GPUS)
    body = FleetTargets(placements, template, shards=1).render(0, int(time.time()))
    series = {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert len(series) == 2 * served
