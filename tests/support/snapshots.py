"""Hand-built snapshots for the exposition, loop and server tests (a Snapshot is plain data), and the real pipeline
on simulated GPUs for those that need it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

from exporter.catalogue import FIELD_SETS, MEASUREMENTS, Dialect
from exporter.exposition import ExpositionRenderer
from exporter.loop import PodsView, PollLoop
from exporter.nvml import CollectorSettings, NvmlCollector
from exporter.snapshot import (
    CollectorStatus,
    DeviceReading,
    GpuIdentity,
    MigIdentity,
    PodDeviceUse,
    PodRef,
    ShareMethod,
    Snapshot,
)
from simulation import Simulator, install
from tests.support.clocks import ManualClock

MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"

# A plausible native value (NVML unit) for every scalar catalogue measurement.
NATIVE: Mapping[str, float] = {
    "gpu_util": 87,
    "mem_copy_util": 41,
    "enc_util": 0,
    "dec_util": 3,
    "fb_used": 71234 * 1024 * 1024 + 123,
    "fb_free": 9000 * 1024 * 1024,
    "fb_reserved": 512 * 1024 * 1024,
    "fb_total": 81559 * 1024 * 1024,
    "gpu_temp": 64,
    "memory_temp": 71,
    "power_usage": 612345,
    "power_limit": 650500,  # enforced: an out-of-band cap below the board's limit
    "power_management_limit": 700000,
    "total_energy": 98765432101,
    "sm_clock": 1980,
    "mem_clock": 2619,
    "pstate": 0,
    "clock_event_reasons": 0x4 | 0x1,
    "pcie_tx": 1234,
    "pcie_rx": 567,
    "pcie_replay": 2,
    "ecc_sbe_volatile": 5,
    "ecc_dbe_volatile": 0,
    "remapped_rows_correctable": 1,
    "remapped_rows_uncorrectable": 0,
    "row_remap_pending": 0,
    "row_remap_failure": 0,
    "last_xid": 79,
    "nvlink_tx": 1000,
    "nvlink_rx": 2000,
    "nvlink_total": 3000,  # KiB/s: DCGM publishes 3 ("MiB/s": / 1000, truncated)
    "gr_engine_active": 91.5,
    "sm_active": 80.25,
    "sm_occupancy": 44.5,
    "tensor_active": 55.5,
    "dram_active": 33.0,
    "fp64_active": 0.0,
    "fp32_active": 25.5,
    "fp16_active": 7.25,
    "slowdown_temp": 89,
    "shutdown_temp": 92,
    "max_operating_temp": 87,
    "ecc_sbe_aggregate": 312,
    "ecc_dbe_aggregate": 1,
    "retired_pages_sbe": 2,
    "retired_pages_dbe": 0,
    "retired_pages_pending": 1,
    "power_violation": 1_500_000_000,
    "thermal_violation": 0,
    "sync_boost_violation": 0,
    "board_limit_violation": 0,
    "low_util_violation": 42_000_000_000,
    "reliability_violation": 0,
    "nvlink_crc_flit_errors": 3,
    "nvlink_crc_data_errors": 1,
    "nvlink_replay_errors": 3,
    "nvlink_recovery_errors": 0,
    "vgpu_license_status": 0,
    **{f"nvlink_bandwidth_l{link}": 2500.0 + link for link in range(18)},
}
VECTORS: Mapping[str, Mapping[str, float]] = {
    "xid_errors": {"79": 2, "13": 1},
    "nvlink_link_tx": {str(link): 100.0 * link for link in range(18)},
    "nvlink_link_rx": {str(link): 90.0 * link for link in range(18)},
}
MIG_KEYS = frozenset(m.key for m in MEASUREMENTS if m.mig)


def gpu(index: int, *, mig: bool = False, model: str = MODEL, uuid: str | None = None) -> GpuIdentity:
    return GpuIdentity(
        index=index,
        uuid=uuid or f"GPU-{index:08d}-aaaa-bbbb-cccc-dddddddddddd",
        model=model,
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        minor_number=index,
        serial=f"165432100{index}",
        driver_version=DRIVER,
        cuda_driver_version="12.4",
        vbios_version="96.00.89.00.01",
        mig_enabled=mig,
    )


def mig(parent: GpuIdentity, index: int, *, profile: str = "1g.10gb", gi: int | None = None) -> MigIdentity:
    return MigIdentity(
        parent=parent,
        index=index,
        uuid=f"MIG-{parent.index:02d}{index:02d}0000-1111-2222-3333-444444444444",
        gpu_instance_id=gi if gi is not None else 7 + index,
        compute_instance_id=0,
        profile=profile,
    )


def reading(identity: GpuIdentity | MigIdentity, *, up: bool = True, **values: float) -> DeviceReading:
    """A reading with the given native values, or with every value NVML gives for that kind of device."""
    if not values:
        values = dict(NATIVE) if isinstance(identity, GpuIdentity) else {k: NATIVE[k] for k in MIG_KEYS}
    vectors = dict(VECTORS) if isinstance(identity, GpuIdentity) else {}
    return DeviceReading(identity, up, values, vectors)


def pod(name: str, namespace: str = "ml", container: str = "main", **labels: str) -> PodRef:
    return PodRef(namespace=namespace, name=name, container=container, uid=f"uid-{name}", labels=labels)


def use(
    ref: PodRef, device: str, share: ShareMethod = ShareMethod.EXCLUSIVE, util: float | None = 50.0, sharing: int = 1
) -> PodDeviceUse:
    return PodDeviceUse(
        pod=ref,
        device_uuid=device,
        share=share,
        utilization_percent=util,
        memory_used_bytes=None if util is None else 1 << 30,
        power_milliwatts=None if util is None else 123456.0,
        energy_millijoules=None if util is None else 4567890.0,
        sharing_pods=sharing,
    )


def snapshot(
    devices: tuple[DeviceReading, ...],
    pods: tuple[PodDeviceUse, ...] = (),
    *,
    node: str = "gpu-node-1",
    taken_at: float = 1_790_000_000.25,
    kubelet_up: bool | None = None,
) -> Snapshot:
    return Snapshot(
        taken_at=taken_at,
        node=node,
        devices=devices,
        pods=pods,
        collectors=(CollectorStatus("nvml", True, 0.0123, 0.0), CollectorStatus("xid", False, 0.001, 3.0)),
        kubelet_up=kubelet_up,
        kubelet_mapping_age_seconds=None if kubelet_up is None else 2.5,
    )


def node_with_everything() -> Snapshot:
    """Two whole GPUs (one shared by two pods), a MIG GPU with two instances (one attributed), one lost GPU."""
    g0, g1, g2, g3 = gpu(0), gpu(1), gpu(2, mig=True), gpu(3)
    # one GPU with InfoROM versions (as nvidia-smi -q prints them for an H100 SXM) so its info series is checked too
    g0 = replace(g0, inforom_image_version="G520.0200.00.05", inforom_oem_version="2.1", inforom_ecc_version="7.16")
    m0, m1 = mig(g2, 0), mig(g2, 1, profile="3g.40gb")
    devices = (
        reading(g0),
        reading(g1),
        reading(g2, gpu_temp=50, power_usage=90000, fb_used=0, fb_total=81559 * 1024 * 1024),
        reading(m0),
        reading(m1),
        DeviceReading(g3, False, {"gpu_temp": 40}, errors={"GPU_IS_LOST": 1}),
    )
    a, b, c = pod("train-0", container="trainer"), pod("infer-a", "serve"), pod("infer-b", "serve")
    pods = (
        use(a, g0.uuid),
        use(b, g1.uuid, ShareMethod.PROCESS, util=30.0, sharing=2),
        use(c, g1.uuid, ShareMethod.UNATTRIBUTED, util=None, sharing=2),
        use(pod("mig-job", "research"), m0.uuid, ShareMethod.MIG, util=12.5),
    )
    return snapshot(devices, pods, kubelet_up=True)


@dataclass(frozen=True)
class SimulatedNode:
    simulator: Simulator
    collector: NvmlCollector
    loop: PollLoop
    clock: ManualClock | None


@contextmanager
def simulated_node(
    scenario: str = "h100x8",
    dialect: Dialect = Dialect.DCGM,
    *,
    interval: float = 1.0,
    node: str = "sim-node",
    pods_view: PodsView | None = None,
    clock: ManualClock | None = None,
) -> Iterator[SimulatedNode]:
    """The real pipeline on simulated GPUs: Simulator -> pynvml -> NvmlCollector -> PollLoop (not started)."""
    with install(Simulator(scenario)) as simulator:
        # every field (--field-set all): the tests over it check every measurement's path
        collector = NvmlCollector(settings=CollectorSettings(enabled=FIELD_SETS["all"], interval_seconds=interval))
        collector.start()
        try:
            renderer = ExpositionRenderer(dialect, interval_seconds=interval, version="test")
            extra = {} if clock is None else {"monotonic": clock}
            loop = PollLoop(collector, renderer, interval=interval, node=node, pods_view=pods_view, **extra)
            yield SimulatedNode(simulator, collector, loop, clock)
        finally:
            loop.stop()
            collector.close()
