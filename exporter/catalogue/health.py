"""Catalogue rows of a GPU's health: ECC errors, remapped rows, retired pages, clock-policy violations, NVLink errors
and XIDs. Field ids: nvml.h (NVML_FI_*) for the source, dcgm_fields.h for `dcgm_fields`."""

from __future__ import annotations

from exporter.catalogue.model import Measurement, MetricType, Need
from exporter.catalogue.model import constant_labels as labels
from exporter.catalogue.model import rendering as r

G, C = MetricType.GAUGE, MetricType.COUNTER


def _ecc(key: str, nvml_id: int, dcgm_id: int, bits: str, counter: str, kind: str) -> Measurement:
    volatile = counter == "volatile"
    dcgm_name = f"DCGM_FI_DEV_ECC_{bits.upper()}_{'VOL' if volatile else 'AGG'}_TOTAL"
    word = "single-bit" if bits == "sbe" else "double-bit"
    if volatile:
        prom = r(
            "nvidia_gpu_ecc_errors_total",
            C,
            "ECC errors since the driver was loaded, by type.",
            const_labels=labels(type=kind),
        )
        # nvml.h, nvmlDeviceGetMemoryErrorCounter: on MIG-enabled GPUs "querying volatile errors using device handles
        # is currently not supported"
        needs = frozenset({Need.ECC, Need.NO_MIG})
    else:
        prom = r(
            "nvidia_gpu_ecc_aggregate_errors_total",
            C,
            "ECC errors over the GPU's lifetime (kept in its InfoROM across driver reloads and reboots), by type.",
            const_labels=labels(type=kind),
        )
        needs = frozenset({Need.ECC})
    help_ = f"Total number of {word} {'volatile' if volatile else 'persistent'} ECC errors."
    return Measurement(
        key,
        "count",
        f"nvmlDeviceGetFieldValues(NVML_FI_DEV_ECC_{bits.upper()}_{'VOL' if volatile else 'AGG'}_TOTAL={nvml_id})",
        r(dcgm_name, C, help_),
        prom,
        dcgm_fields=(dcgm_id,),
        needs=needs,
    )


ECC: tuple[Measurement, ...] = (
    _ecc("ecc_sbe_volatile", 3, 310, "sbe", "volatile", "correctable"),
    _ecc("ecc_dbe_volatile", 4, 311, "dbe", "volatile", "uncorrectable"),
    _ecc("ecc_sbe_aggregate", 5, 312, "sbe", "aggregate", "correctable"),
    _ecc("ecc_dbe_aggregate", 6, 313, "dbe", "aggregate", "uncorrectable"),
)

REMAPPED_ROWS: tuple[Measurement, ...] = (
    Measurement(
        "remapped_rows_correctable",
        "rows",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_COR=142)",
        r("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", C, "Number of remapped rows for correctable errors"),
        r(
            "nvidia_gpu_remapped_rows_total",
            C,
            "Memory rows remapped, by the kind of error that caused it.",
            const_labels=labels(type="correctable"),
        ),
        dcgm_fields=(394,),
        needs=frozenset({Need.ROW_REMAPPING}),
    ),
    Measurement(
        "remapped_rows_uncorrectable",
        "rows",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_UNC=143)",
        r("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", C, "Number of remapped rows for uncorrectable errors"),
        r(
            "nvidia_gpu_remapped_rows_total",
            C,
            "Memory rows remapped, by the kind of error that caused it.",
            const_labels=labels(type="uncorrectable"),
        ),
        dcgm_fields=(393,),
        needs=frozenset({Need.ROW_REMAPPING}),
    ),
    Measurement(
        "row_remap_pending",
        "bool",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_PENDING=144)",
        r("DCGM_FI_DEV_ROW_REMAP_PENDING", G, "Whether remapping of rows is pending (1) or not (0)."),
        r("nvidia_gpu_row_remap_pending", G, "1 while a row remap waits for the next GPU reset."),
        dcgm_fields=(396,),
        needs=frozenset({Need.ROW_REMAPPING}),
    ),
    Measurement(
        "row_remap_failure",
        "bool",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_REMAPPED_FAILURE=145)",
        r("DCGM_FI_DEV_ROW_REMAP_FAILURE", G, "Whether remapping of rows has failed"),
        r("nvidia_gpu_row_remap_failure", G, "1 once a row remap has failed: the GPU needs service."),
        dcgm_fields=(395,),
        needs=frozenset({Need.ROW_REMAPPING}),
    ),
)

RETIRED_PAGES: tuple[Measurement, ...] = (
    Measurement(
        "retired_pages_sbe",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_SBE=29)",
        r("DCGM_FI_DEV_RETIRED_SBE", C, "Total number of retired pages due to single-bit errors."),
        r(
            "nvidia_gpu_retired_pages_total",
            C,
            "Framebuffer pages retired (blacklisted) after ECC errors, by cause.",
            const_labels=labels(cause="multiple_single_bit_ecc"),
        ),
        dcgm_fields=(390,),
        needs=frozenset({Need.PAGE_RETIREMENT}),
        dcgm_computes="DCGM counts the pages of nvmlDeviceGetRetiredPages(cause multiple single-bit errors), the "
        "same count as this field.",
    ),
    Measurement(
        "retired_pages_dbe",
        "count",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_DBE=30)",
        r("DCGM_FI_DEV_RETIRED_DBE", C, "Total number of retired pages due to double-bit errors."),
        r(
            "nvidia_gpu_retired_pages_total",
            C,
            "Framebuffer pages retired (blacklisted) after ECC errors, by cause.",
            const_labels=labels(cause="double_bit_ecc"),
        ),
        dcgm_fields=(391,),
        needs=frozenset({Need.PAGE_RETIREMENT}),
    ),
    Measurement(
        "retired_pages_pending",
        "bool",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_RETIRED_PENDING=31)",
        r("DCGM_FI_DEV_RETIRED_PENDING", C, "Total number of pages pending retirement."),
        r("nvidia_gpu_retired_pages_pending", G, "1 while pages wait to be retired at the next driver reload."),
        dcgm_fields=(392,),
        needs=frozenset({Need.PAGE_RETIREMENT}),
    ),
)


def _violation(key: str, nvml_id: int, dcgm_id: int, dcgm_word: str, policy: str, why: str) -> Measurement:
    return Measurement(
        key,
        "ns",
        f"nvmlDeviceGetFieldValues(NVML_FI_DEV_PERF_POLICY_{policy.upper()}={nvml_id})",
        r(f"DCGM_FI_DEV_{dcgm_word}_VIOLATION", C, f"Throttling duration due to {why} (in ns)."),
        r(
            "nvidia_gpu_violation_seconds_total",
            C,
            "Time the clocks were held below their target by a performance policy, by policy, in seconds.",
            1e-9,
            const_labels=labels(policy=policy),
        ),
        dcgm_fields=(dcgm_id,),
    )


# nvml.h: the perf-policy counters NVML_FI_DEV_PERF_POLICY_* (74-79), which replace nvmlDeviceGetViolationStatus
# (deprecated in 13.0); DCGM reads the same field ids for its *_VIOLATION fields (dcgm_fields.cpp), in ns.
VIOLATIONS: tuple[Measurement, ...] = (
    _violation("power_violation", 74, 240, "POWER", "power", "power constraints"),
    _violation("thermal_violation", 75, 241, "THERMAL", "thermal", "thermal constraints"),
    _violation("sync_boost_violation", 76, 242, "SYNC_BOOST", "sync_boost", "sync-boost constraints"),
    _violation("board_limit_violation", 77, 243, "BOARD_LIMIT", "board_limit", "board limit constraints"),
    _violation("low_util_violation", 78, 244, "LOW_UTIL", "low_utilization", "low utilization"),
    _violation("reliability_violation", 79, 245, "RELIABILITY", "reliability", "reliability constraints"),
)


def _nvlink_errors(key: str, nvml_id: int, dcgm_id: int, dcgm_word: str, kind: str, help_: str) -> Measurement:
    return Measurement(
        key,
        "count",
        f"nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_{dcgm_word}_ERROR_COUNT_TOTAL={nvml_id})",
        r(f"DCGM_FI_DEV_NVLINK_{dcgm_word}_ERROR_COUNT_TOTAL", C, help_),
        r(
            "nvidia_gpu_nvlink_errors_total",
            C,
            "NVLink errors since the driver was loaded, all links, by type.",
            const_labels=labels(type=kind),
        ),
        dcgm_fields=(dcgm_id,),
        needs=frozenset({Need.NVLINK}),
    )


NVLINK_ERRORS: tuple[Measurement, ...] = (
    _nvlink_errors(
        "nvlink_crc_flit_errors", 38, 409, "CRC_FLIT", "crc_flit", "Total number of NVLink flow-control CRC errors."
    ),
    _nvlink_errors(
        "nvlink_crc_data_errors", 45, 419, "CRC_DATA", "crc_data", "Total number of NVLink data CRC errors."
    ),
    _nvlink_errors("nvlink_replay_errors", 52, 429, "REPLAY", "replay", "Total number of NVLink retries."),
    _nvlink_errors(
        "nvlink_recovery_errors", 59, 439, "RECOVERY", "recovery", "Total number of NVLink recovery errors."
    ),
)

XID: tuple[Measurement, ...] = (
    Measurement(
        "last_xid",
        "xid",
        "nvmlEventSetWait_v2(nvmlEventTypeXidCriticalError)",
        r("DCGM_FI_DEV_XID_ERRORS", G, "Value of the last XID error encountered.", xid_labels=True),
        r("nvidia_gpu_last_xid", G, "The last XID error seen since the exporter started (0: none)."),
        dcgm_fields=(230,),
    ),
    Measurement(
        "xid_errors",
        "count",
        "nvmlEventSetWait_v2(nvmlEventTypeXidCriticalError)",
        vector=True,
        # not a dcgm-exporter field: DCGM_FI_DEV_XID_ERRORS holds the last XID only (one constant series per code), so
        # a repeated XID would go unseen; gpu-pulse also counts them in the dcgm dialect, for the XID alerts (rules/)
        dcgm=r(
            "gpu_pulse_xid_errors_total",
            C,
            "XID critical errors seen since the exporter started, by XID (DCGM_FI_DEV_XID_ERRORS: the last one).",
            vector_label="xid",
        ),
        prometheus=r(
            "nvidia_gpu_xid_errors_total",
            C,
            "XID critical errors seen since the exporter started.",
            vector_label="xid",
        ),
        dcgm_fields=(230,),
    ),
)
