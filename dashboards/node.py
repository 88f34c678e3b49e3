"""Node and GPU detail: every catalogue measurement of the chosen dialect, per GPU and MIG instance, in base units.

Built from exporter/catalogue/, one dashboard per dialect: the dcgm dialect's values are converted to base units in
the queries (MiB to bytes, % to ratios, mJ to joules) and its clock-event bitmask is split into one 0/1 series per
reason, so both dashboards read alike.
"""

from __future__ import annotations

from dashboards.grafana import Board, Query, Variable, job_variable, matcher
from exporter.catalogue import BY_KEY, CLOCK_EVENT_REASONS, MEASUREMENTS, PROM_INFO, Dialect, MetricType
from rules.dialect import Vocabulary
from rules.jobs import Jobs
from rules.units import BASE

SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Utilization", ("gpu_util", "mem_copy_util", "enc_util", "dec_util")),
    ("Activity (GPM: Hopper and newer, per GPU and MIG instance)", (
        "sm_active", "tensor_active", "dram_active", "gr_engine_active", "sm_occupancy", "fp64_active",
        "fp32_active", "fp16_active",
    )),
    ("Framebuffer memory (GPUs and MIG instances)", ("fb_used", "fb_free", "fb_reserved", "fb_total")),
    ("Power and temperature", (
        "power_usage", "power_limit", "power_management_limit", "total_energy", "gpu_temp", "memory_temp",
        "slowdown_temp", "shutdown_temp", "max_operating_temp",
    )),
    ("Clocks", ("sm_clock", "mem_clock", "pstate", "clock_event_reasons")),
    ("Clocks held down, by policy", (
        "power_violation", "thermal_violation", "sync_boost_violation", "board_limit_violation",
        "low_util_violation", "reliability_violation",
    )),
    ("Interconnect", (
        "pcie_tx", "pcie_rx", "pcie_replay", "nvlink_tx", "nvlink_rx", "nvlink_total", "nvlink_crc_flit_errors",
        "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors",
    )),
    ("Errors", (
        "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
        "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure",
        "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending", "last_xid", "xid_errors",
        "vgpu_license_status",
    )),
)  # fmt: skip

# counters charted as a per-second rate; the other counters are charted as their running total (a measurement whose
# native unit is already a rate, DCGM's NVLink bandwidth, is charted as it is)
RATE_KEYS = frozenset(
    {
        "total_energy",
        "pcie_replay",
        "nvlink_tx",
        "nvlink_rx",
        "power_violation",
        "thermal_violation",
        "sync_boost_violation",
        "board_limit_violation",
        "low_util_violation",
        "reliability_violation",
        "nvlink_crc_flit_errors",
        "nvlink_crc_data_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
    }
)

TITLES = {
    "gpu_util": ("GPU utilization", "Fraction of the sample period a kernel ran on the GPU."),
    "mem_copy_util": ("Memory copy utilization", "Fraction of the sample period device memory was read or written."),
    "enc_util": ("Encoder utilization", "Video encoder busy fraction."),
    "dec_util": ("Decoder utilization", "Video decoder busy fraction."),
    "sm_active": ("SM active", "Fraction of cycles an SM had at least one warp assigned (GPM)."),
    "tensor_active": ("Tensor pipe active", "Fraction of cycles a tensor pipe was active (GPM)."),
    "dram_active": ("DRAM active", "Fraction of cycles the memory interface was busy (GPM)."),
    "gr_engine_active": ("Graphics engine active", "Fraction of time the graphics/compute engine was active (GPM)."),
    "fb_used": ("Memory used", "Framebuffer bytes allocated, per GPU and per MIG instance."),
    "fb_free": ("Memory free", "Framebuffer bytes free."),
    "fb_reserved": ("Memory reserved", "Framebuffer bytes the driver reserves."),
    "fb_total": ("Memory total", "Framebuffer size."),
    "power_usage": (
        "Power draw",
        "Power draw in watts: a 1 s average on Ampere and newer except A100, instantaneous on A100 and older.",
    ),
    "power_limit": ("Power limit", "Enforced power limit: the lowest of every limiter, an out-of-band cap among them."),
    "power_management_limit": (
        "Power management limit",
        "The power limit set on the board; above the enforced one when a cap is set elsewhere.",
    ),
    "total_energy": ("Energy use", "Rate of the energy counter: average power over the interval."),
    "gpu_temp": ("GPU temperature", "GPU die temperature."),
    "memory_temp": ("Memory temperature", "HBM temperature."),
    "sm_clock": ("SM clock", "SM clock frequency."),
    "mem_clock": ("Memory clock", "Memory clock frequency."),
    "pstate": ("Performance state", "P-state: 0 is the highest performance, 15 the lowest."),
    "clock_event_reasons": ("Clock event reasons", "1 while a reason holds the clocks down (throttling)."),
    "pcie_tx": ("PCIe transmit", "PCIe transmit throughput (20 ms samples)."),
    "pcie_rx": ("PCIe receive", "PCIe receive throughput (20 ms samples)."),
    "pcie_replay": ("PCIe replays", "Link-level PCIe retries per second."),
    "nvlink_tx": ("NVLink transmit", "NVLink data transmitted per second."),
    "nvlink_rx": ("NVLink receive", "NVLink data received per second."),
    "nvlink_total": (
        "NVLink traffic (DCGM's rate)",
        "NVLink data per second, all links and directions, as DCGM computes it between two readings.",
    ),
    "sm_occupancy": ("SM occupancy", "Warps resident on an SM as a fraction of the maximum (GPM)."),
    "fp64_active": ("FP64 pipe active", "Fraction of time the SMs did non-tensor FP64 math (GPM)."),
    "fp32_active": ("FP32 pipe active", "Fraction of time the SMs did non-tensor FP32 math (GPM)."),
    "fp16_active": ("FP16 pipe active", "Fraction of time the SMs did non-tensor FP16 math (GPM)."),
    "slowdown_temp": ("Slowdown temperature", "The board's hardware slowdown threshold."),
    "shutdown_temp": ("Shutdown temperature", "The board's shutdown threshold."),
    "max_operating_temp": ("Max operating temperature", "Above it the GPU may be throttled below base clock."),
    "power_violation": ("Held down by power", "Fraction of time the power policy held the clocks down."),
    "thermal_violation": ("Held down by temperature", "Fraction of time the thermal policy held the clocks down."),
    "sync_boost_violation": ("Held down by sync boost", "Fraction of time sync boost held the clocks down."),
    "board_limit_violation": ("Held down by the board limit", "Fraction of time the board limit held the clocks."),
    "low_util_violation": ("Lowered for low utilization", "Fraction of time the clocks were lowered for low use."),
    "reliability_violation": ("Held down for reliability", "Fraction of time the reliability policy held clocks."),
    "nvlink_crc_flit_errors": ("NVLink flow-control CRC errors", "Flit CRC errors per second, all links."),
    "nvlink_crc_data_errors": ("NVLink data CRC errors", "Data CRC errors per second, all links."),
    "nvlink_replay_errors": ("NVLink replays", "Link-level retries per second, all links."),
    "nvlink_recovery_errors": ("NVLink recoveries", "Link recoveries per second, all links."),
    "ecc_sbe_aggregate": ("Correctable ECC errors, lifetime", "Single-bit ECC errors over the GPU's lifetime."),
    "ecc_dbe_aggregate": ("Uncorrectable ECC errors, lifetime", "Double-bit ECC errors over the GPU's lifetime."),
    "retired_pages_sbe": ("Pages retired (single-bit)", "Pages retired after single-bit errors (Volta, Turing)."),
    "retired_pages_dbe": ("Pages retired (double-bit)", "Pages retired after double-bit errors (Volta, Turing)."),
    "retired_pages_pending": ("Page retirement pending", "1 while pages wait to be retired (Volta, Turing)."),
    "vgpu_license_status": ("vGPU licensed", "1 while the vGPU license is active; 0 on bare metal."),
    "ecc_sbe_volatile": ("Correctable ECC errors", "Single-bit ECC errors since the driver was loaded."),
    "ecc_dbe_volatile": ("Uncorrectable ECC errors", "Double-bit ECC errors since the driver was loaded."),
    "remapped_rows_correctable": ("Rows remapped (correctable)", "Rows remapped after correctable errors."),
    "remapped_rows_uncorrectable": ("Rows remapped (uncorrectable)", "Rows remapped after uncorrectable errors."),
    "row_remap_pending": ("Row remap pending", "1 while a remap waits for the next GPU reset."),
    "row_remap_failure": ("Row remap failure", "1 once a row remap failed: the GPU needs service."),
    "last_xid": ("Last XID", "The last XID error seen since the exporter started (0: none)."),
    "xid_errors": ("XID errors", "XID errors since the exporter started, by XID."),
}


# Static limits drawn as dashed lines on the panel of what they bound, not as panels of their own: the power limit on
# power draw, the slowdown, shutdown and max operating temperatures on the GPU temperature, the size on memory used.
LIMITS: dict[str, tuple[str, ...]] = {
    "power_usage": ("power_limit",),
    "gpu_temp": ("max_operating_temp", "slowdown_temp", "shutdown_temp"),
    "fb_used": ("fb_total",),
}
BOUND_BY = {limit: bounded for bounded, limits in LIMITS.items() for limit in limits}


def covered_keys(dialect: Dialect) -> frozenset[str]:
    return frozenset(k for _, keys in SECTIONS for k in keys if BY_KEY[k].rendering(dialect) is not None)


# the measurements the node dashboard charts: the exporter's default set (the per-link NVLink figures, asked for
# with --collectors, would be 18 panels or a label per link; they are left to ad-hoc queries)
CHARTED = frozenset(m.key for m in MEASUREMENTS if m.default)


class NodeBoard:
    def __init__(self, dialect: Dialect, jobs: Jobs) -> None:
        self.dialect = dialect
        self.vocab = Vocabulary.of(dialect)
        v = self.vocab
        up = v.up
        self.device_filter = matcher(job="job", cluster="cluster", **{v.node: "node"}, gpu="gpu")
        self.target_filter = matcher(job="job", cluster="cluster", node="node")
        suffix = "" if dialect is Dialect.PROMETHEUS else " (dcgm dialect)"
        self.board = Board(
            uid=f"gpu-pulse-node-{dialect}",
            title=f"GPU node and device detail{suffix}",
            description=(
                f"Every measurement of the gpu-pulse exporter ({dialect} dialect) for the GPUs and MIG instances of "
                "the chosen nodes, in base units."
            ),
            tags=("gpu", "node", str(dialect)),
            variables=(
                Variable("cluster", "Cluster", f"label_values({up}, cluster)"),
                job_variable(jobs.exporter, "gpu_pulse_snapshot_timestamp_seconds", "exporters"),
                Variable(
                    "node",
                    "Node",
                    f'label_values({up}{{job=~"$job", cluster=~"$cluster"}}, {v.node})',
                    multi=False,
                    include_all=False,
                    description="The node whose GPUs are shown: one at a time (the board draws every measurement of "
                    "each GPU); the cluster and namespace boards compare nodes.",
                ),
                Variable(
                    "gpu",
                    "GPU",
                    f'label_values({up}{{job=~"$job", cluster=~"$cluster", {v.node}=~"$node"}}, gpu)',
                ),
            ),
        )

    def selector(self, key: str, extra: str = "") -> str:
        rendering = self.vocab.rendering(key)
        const = "".join(f', {k}="{val}"' for k, val in rendering.const_labels.items())
        return f"{rendering.name}{self.device_filter[:-1]}{const}{extra}}}"

    def legend(self) -> str:
        v = self.vocab
        return f"{{{{{v.node}}}}} GPU {{{{gpu}}}} {{{{{v.mig_profile}}}}} {{{{{v.gpu_instance}}}}}"

    def measurement(self, key: str) -> None:
        if key in BOUND_BY and self.vocab.rendering(BOUND_BY[key]) is not None:
            return  # a dashed line on the panel of what it bounds
        measurement = BY_KEY[key]
        rendering = self.vocab.rendering(key)
        title, description = TITLES[key]
        base = BASE[measurement.unit]
        rate = rendering.type is MetricType.COUNTER and key in RATE_KEYS
        legend = self.legend()
        queries: tuple[Query, ...]
        if rendering.bits is not None and self.dialect is Dialect.PROMETHEUS:
            queries = (Query(self.selector(key), f"{legend} {{{{{rendering.bit_label}}}}}"),)
        elif key == "clock_event_reasons":
            queries = tuple(
                Query(f"floor({self.selector(key)} / {bit}) % 2", f"{legend} {reason}")
                for reason, bit in CLOCK_EVENT_REASONS.items()
            )
        elif rendering.vector_label is not None:
            queries = (Query(self.selector(key), f"{legend} XID {{{{{rendering.vector_label}}}}}"),)
        elif rate:
            expr = self.vocab.to_base_unit(key, f"rate({self.selector(key)}[$__rate_interval])")
            queries = (Query(expr, legend + self._const_legend(key)),)
        else:
            expr = self.vocab.to_base_unit(key, self.selector(key))
            queries = (Query(expr, legend + self._const_legend(key)),)
        if rendering.type is MetricType.COUNTER and not rate and not measurement.unit.endswith("/s"):
            description += " Running total."
        unit = base.grafana_rate if rate else base.grafana
        limits = [k for k in LIMITS.get(key, ()) if self.vocab.rendering(k) is not None]
        for limit in limits:
            queries += (Query(self.vocab.to_base_unit(limit, self.selector(limit)), f"{legend} {TITLES[limit][0]}"),)
        if limits:
            description += f" Dashed: {', '.join(TITLES[k][0].lower() for k in limits)}."
        self.board.timeseries(
            title,
            description,
            unit,
            *queries,
            width=8,
            max_value=1 if unit == "percentunit" else None,
            limits=len(limits),
        )

    def _const_legend(self, key: str) -> str:
        return "".join(f" {v}" for v in self.vocab.rendering(key).const_labels.values())

    def build(self) -> Board:
        v = self.vocab
        b = self.board
        b.row("GPUs")
        if self.dialect is Dialect.PROMETHEUS:
            identity = Query(f"{PROM_INFO}{self.device_filter}")
        else:
            identity = Query(f"{v.up}{self.device_filter}")
        b.table(
            "GPUs and MIG instances",
            "Identity of each GPU and MIG instance: model, PCI bus, driver.",
            "none",
            identity,
            height=7,
        )
        b.timeseries(
            "GPU answers NVML",
            "1 while the GPU answers NVML, 0 once it is lost (its other series then stop).",
            "bool",
            Query(f"{v.up}{self.device_filter}", f"{{{{{v.node}}}}} GPU {{{{gpu}}}}"),
        )
        b.timeseries(
            "MIG instances: memory used",
            "Framebuffer use of each MIG instance against its size.",
            "bytes",
            Query(
                self.vocab.to_base_unit("fb_used", self.selector("fb_used", f', {v.gpu_instance}!=""')),
                f"GPU {{{{gpu}}}} {{{{{v.mig_profile}}}}} {{{{{v.gpu_instance}}}}} used",
            ),
            Query(
                self.vocab.to_base_unit("fb_total", self.selector("fb_total", f', {v.gpu_instance}!=""')),
                f"GPU {{{{gpu}}}} {{{{{v.mig_profile}}}}} {{{{{v.gpu_instance}}}}} size",
            ),
        )
        for title, keys in SECTIONS:
            present = [k for k in keys if BY_KEY[k].rendering(self.dialect) is not None]
            if not present:
                continue
            b.row(title)
            for key in present:
                self.measurement(key)
        b.row("Exporter")
        t = self.target_filter
        b.timeseries(
            "Collector duration",
            "Seconds each collector took in the last poll cycle.",
            "s",
            Query(f"gpu_pulse_collector_duration_seconds{t}", "{{node}} {{collector}}"),
        )
        b.timeseries(
            "Snapshot age at scrape",
            "How old the served snapshot was when Prometheus scraped it (should stay below the poll interval).",
            "s",
            Query(
                f"timestamp(gpu_pulse_snapshot_timestamp_seconds{t}) - gpu_pulse_snapshot_timestamp_seconds{t}",
                "{{node}}",
            ),
        )
        b.timeseries(
            "Collector errors",
            "Errors per second of each collector (the exporter's log says which).",
            "cps",
            Query(f"rate(gpu_pulse_collector_errors_total{t}[$__rate_interval])", "{{node}} {{collector}}"),
        )
        return b


def node_board(dialect: Dialect, jobs: Jobs) -> Board:
    return NodeBoard(dialect, jobs).build()
