"""The `err_msg` of an XID on the dcgm dialect's `DCGM_FI_DEV_XID_ERRORS` series (dcgm-exporter 4.x adds `err_code` and
`err_msg` labels to it).

The names are NVIDIA's (the Xid catalogue of the GPU deployment documentation), for the XIDs gpu-pulse's rules classify
and the common ones around them; any other XID is "Unknown Error" here. dcgm-exporter names more of them, so on an
XID outside this table the two exporters' `err_msg` differ (docs/migration.md says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

UNKNOWN = "Unknown Error"

XID_NAMES: Mapping[int, str] = MappingProxyType(
    {
        0: "No Error",
        13: "Graphics Engine Exception",
        31: "GPU memory page fault",
        32: "Invalid or corrupted push buffer stream",
        38: "Driver firmware error",
        43: "GPU stopped processing",
        45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
        48: "Double Bit ECC Error",
        61: "Internal micro-controller breakpoint/warning",
        62: "Internal micro-controller halt",
        63: "ECC page retirement or row remapping recording event",
        64: "ECC page retirement or row remapper recording failure",
        68: "NVDEC0 Exception",
        69: "Graphics Engine class error",
        74: "NVLINK Error",
        79: "GPU has fallen off the bus",
        92: "High single-bit ECC error rate",
        94: "Contained ECC error",
        95: "Uncontained ECC error",
        119: "GSP RPC Timeout",
        120: "GSP Error",
    }
)


def xid_name(xid: int) -> str:
    return XID_NAMES.get(xid, UNKNOWN)
