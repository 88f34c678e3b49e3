"""The reader plan on plain data (no NVML, no simulator): which reads a GPU or MIG instance gets from the enabled
measurements and what discovery learnt of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.catalogue import FIELD_SETS
from exporter.nvml import NVML_MEASUREMENTS, enabled_measurements
from exporter.nvml.fields import FIELDS, MAX_LINKS
from exporter.nvml.gpm import METRICS, RATES
from exporter.nvml.reader_plan import DeviceTraits, ReaderPlan, gpu_plan, mig_plan

DEFAULT = enabled_measurements()
EVERY = enabled_measurements(FIELD_SETS["all"])  # --field-set all
GPM_KEYS = frozenset(METRICS)


def probe_names(plan: ReaderPlan) -> set[str]:
    return {probe.name for probe, _ in plan.probes}


def field_keys(plan: ReaderPlan) -> set[str]:
    return {key for key, _, _ in plan.fields}


def test_a_hopper_gpu_gets_gpm_and_its_pcie_throughput_from_gpm() -> None:
    plan = gpu_plan(DEFAULT, DeviceTraits(gpm=True, links=18))
    assert set(plan.gpm) == (GPM_KEYS | RATES.keys()) & DEFAULT
    assert plan.pcie == ()  # the mean over the interval, not NVML's 20 ms sample
    assert not GPM_KEYS & plan.cannot_give.keys()
    assert plan.processes


def test_a_gpu_without_gpm_reads_pcie_on_its_own_thread_and_says_why_activity_is_missing() -> None:
    plan = gpu_plan(DEFAULT, DeviceTraits(gpm=False))
    assert plan.gpm == ()
    assert {probe.name for probe, _ in plan.pcie} == {"pcie_tx_throughput", "pcie_rx_throughput"}
    assert not {"pcie_tx_throughput", "pcie_rx_throughput"} & probe_names(plan)
    assert {plan.cannot_give[key] for key in GPM_KEYS & DEFAULT} == {"gpm_needs_hopper"}


def test_a_mig_enabled_gpu_leaves_activity_and_processes_to_its_instances() -> None:
    plan = gpu_plan(DEFAULT, DeviceTraits(mig_enabled=True, gpm=True))
    assert plan.gpm == ()
    assert {plan.cannot_give[key] for key in GPM_KEYS & DEFAULT} == {"per_mig_instance"}
    assert not plan.processes
    assert plan.pcie  # without GPM on the GPU's own handle, PCIe throughput is NVML's sample


def test_what_a_device_refused_before_is_not_planned_again() -> None:
    plan = gpu_plan(DEFAULT, DeviceTraits(refused=frozenset({"power_usage", "memory_temp", "pcie_tx_throughput"})))
    assert "power_usage" not in probe_names(plan)
    assert "memory_temp" not in field_keys(plan)
    assert "pcie_tx_throughput" not in {probe.name for probe, _ in plan.pcie}
    assert "ecc_sbe_volatile" in field_keys(plan)


def test_board_constants_are_planned_once_and_the_vgpu_license_every_nth_cycle() -> None:
    plan = gpu_plan(EVERY, DeviceTraits(), constant_every=60)
    static = {probe.name for probe, _ in plan.probes if probe.static}
    assert static == {"slowdown_threshold", "shutdown_threshold", "gpu_max_threshold"}
    default = {probe.name for probe, _ in gpu_plan(DEFAULT, DeviceTraits()).probes if probe.static}
    assert default == {"slowdown_threshold", "shutdown_threshold"}  # the default set leaves the max operating out
    every = {probe.name: probe.every for probe, _ in plan.probes}
    assert every["vgpu_license"] == 60
    assert every["power_usage"] == 1


def test_per_link_figures_follow_the_gpus_links_and_the_missing_ones_say_so() -> None:
    enabled = DEFAULT | {"nvlink_bandwidth_l0", "nvlink_bandwidth_l5", "nvlink_link_tx"}
    plan = gpu_plan(enabled, DeviceTraits(links=4))
    links = {key for key in field_keys(plan) if ":" in key}
    assert links == {f"nvlink_link_{d}:{n}" for d in ("tx", "rx") for n in range(4)}
    assert plan.cannot_give["nvlink_bandwidth_l5"] == "not_supported"
    assert "nvlink_bandwidth_l0" not in plan.cannot_give
    pcie_board = gpu_plan(enabled, DeviceTraits(links=0))
    assert not any(":" in key for key in field_keys(pcie_board))
    assert pcie_board.cannot_give["nvlink_link_tx"] == "not_supported"


def test_missing_labels_and_unserved_fields_are_explained_before_anything_is_asked() -> None:
    traits = DeviceTraits(labels_missing=("serial",))
    plan = gpu_plan(DEFAULT, traits, unserved={"DCGM_FI_DEV_NVSWITCH_TEMP": "needs_nvswitch"})
    assert plan.cannot_give["serial"] == "not_supported"
    assert plan.cannot_give["DCGM_FI_DEV_NVSWITCH_TEMP"] == "needs_nvswitch"


def test_a_mig_instance_reads_its_memory_processes_and_gpm_through_its_parent() -> None:
    plan = mig_plan(DEFAULT, DeviceTraits(gpm=True))
    assert probe_names(plan) == {"memory"}
    assert plan.fields == () and plan.pcie == ()
    assert set(plan.gpm) == GPM_KEYS & DEFAULT
    assert plan.processes
    assert plan.cannot_give["gpu_util"] == plan.cannot_give["mem_copy_util"] == "not_per_mig_instance"
    assert {mig_plan(DEFAULT, DeviceTraits(gpm=False)).cannot_give[key] for key in GPM_KEYS & DEFAULT} == {
        "gpm_needs_hopper"
    }


@given(
    st.sets(st.sampled_from(sorted(NVML_MEASUREMENTS))),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2 * MAX_LINKS),
)
def test_a_plan_reads_only_what_is_enabled(keys: set[str], gpm: bool, mig_enabled: bool, links: int) -> None:
    enabled = frozenset(keys)
    plan = gpu_plan(enabled, DeviceTraits(mig_enabled=mig_enabled, gpm=gpm, links=links))
    probed = {key for probe, keep in (*plan.probes, *plan.pcie) for _, key in keep}
    assert probed <= enabled
    assert set(plan.gpm) <= enabled
    fields = {key.partition(":")[0] for key in field_keys(plan)}
    # NVLink tx/rx are read for their rate too, per-link counters for per-link figures
    assert fields <= enabled | {"nvlink_tx", "nvlink_rx", "nvlink_link_tx", "nvlink_link_rx"}
    assert fields <= FIELDS.keys() | {"nvlink_link_tx", "nvlink_link_rx"}
    # a measurement is read from one place only
    assert not probed & set(plan.gpm)
