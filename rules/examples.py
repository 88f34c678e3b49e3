"""The example cluster of the promtool tests: GPUs (whole, shared, MIG) on two nodes and the pods holding them."""

from __future__ import annotations

from rules.model import InputSeries, Sample
from rules.names import DEV_UP
from rules.series import PodEdge, PodKey, TestDevice, Values, plain_series, selector

NODE = "gpu-node-1"
MIG_NODE = "gpu-node-2"
GPU0 = TestDevice(node=NODE, gpu=0, uuid="GPU-a0000000-0000-0000-0000-000000000000")
GPU1 = TestDevice(
    node=NODE,
    gpu=1,
    uuid="GPU-a1000000-0000-0000-0000-000000000000",
    pci_bus_id="00000000:5D:00.0",
    pods=(PodKey("team-a", "infer-1", "server"), PodKey("team-b", "notebook-1", "notebook")),
)
A100 = "NVIDIA A100-SXM4-40GB"
MIG_PARENT = TestDevice(node=MIG_NODE, gpu=0, uuid="GPU-b0000000-0000-0000-0000-000000000000", model=A100)
MIG_3G = TestDevice(
    node=MIG_NODE,
    gpu=0,
    uuid=MIG_PARENT.uuid,
    model=A100,
    mig=(1, "3g.20gb"),
    pods=(PodKey("ml", "finetune-0", "trainer"),),
)
MIG_1G = TestDevice(node=MIG_NODE, gpu=0, uuid=MIG_PARENT.uuid, model=A100, mig=(9, "1g.5gb"))

GIB = 1024**3


def expect(record: str, labels: dict[str, str], value: float) -> Sample:
    return Sample(selector(record, labels), value)


def normalized_up(device: TestDevice, values: Values) -> InputSeries:
    """A `node_gpu:nvidia_gpu_up:max` input (node-level tests start from the normalized series)."""
    return normalized_input(DEV_UP, device, values)


def normalized_input(record: str, device: TestDevice, values: Values) -> InputSeries:
    return plain_series(record, device.normalized(), values)


TRAIN = PodKey("team-a", "train-0", "trainer")
INFER = PodKey("team-a", "infer-1", "server")
NOTEBOOK = PodKey("team-b", "notebook-1", "notebook")
FINETUNE = PodKey("ml", "finetune-0", "trainer")
TRAIN_ON_GPU0 = PodEdge(TRAIN, GPU0)
TRAIN_ON_GPU2 = PodEdge(TRAIN, TestDevice(node=NODE, gpu=2, uuid="GPU-a2000000-0000-0000-0000-000000000000"))
INFER_ON_SHARED = PodEdge(INFER, GPU1, share="process")
NOTEBOOK_ON_SHARED = PodEdge(NOTEBOOK, GPU1, share="process")
FINETUNE_ON_MIG = PodEdge(FINETUNE, MIG_3G, share="mig")


def pod_of(edge: PodEdge) -> dict[str, str]:
    return {"namespace": edge.pod.namespace, "pod": edge.pod.pod}


def in_namespace(namespace: str) -> dict[str, str]:
    return {"namespace": namespace}
