"""NVLink throughput as DCGM publishes it: a rate between two readings of NVML's cumulative counters.

DCGM (dcgmlib/src/DcgmCacheManager.cpp, ReadAndCacheNvLinkBandwidth, DCGM 4.5.3) reads the rx and tx data counters
of a link, or of all links (KiB, nvml.h NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_*), adds them, and publishes 0 when the sum
is 0 or there is no earlier reading, else (sum - earlier sum) / seconds between the two readings' timestamps / 1000,
truncated. The catalogue's dcgm renderings (scale 0.001, integer) do the / 1000 and the truncation; this keeps the
earlier readings and gives the KiB/s.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.nvml.fields import LINK_RATE_PREFIX, MAX_LINKS, NVLINK_TOTAL, link_entry


class NvlinkRates:
    """The DCGM-style rates of one GPU's NVLink counters; only its reader's thread calls `add`."""

    __slots__ = ("_earlier", "_keys")

    def __init__(self, keys: frozenset[str]) -> None:
        # rate key -> the counter entries it adds up
        self._keys: dict[str, tuple[str, str]] = {}
        if NVLINK_TOTAL in keys:
            self._keys[NVLINK_TOTAL] = ("nvlink_tx", "nvlink_rx")
        for link in range(MAX_LINKS):
            key = f"{LINK_RATE_PREFIX}{link}"
            if key in keys:
                self._keys[key] = (link_entry("tx", link), link_entry("rx", link))
        self._earlier: dict[str, tuple[float, int]] = {}  # rate key -> (sum in KiB, timestamp in µs)

    def add(self, counted: Mapping[str, float], stamps: Mapping[str, int], now_us: int, into: dict[str, float]) -> None:
        """Put the rate of every key whose two counters were read this cycle into `into`, in KiB/s. A counter NVML
        gave no timestamp for is taken as read at `now_us` (DCGM takes the time of day then too)."""
        for key, (tx, rx) in self._keys.items():
            if tx not in counted or rx not in counted:
                continue
            total = counted[tx] + counted[rx]
            stamp = max(stamps.get(tx, 0), stamps.get(rx, 0)) or now_us
            earlier = self._earlier.get(key)
            self._earlier[key] = (total, stamp)
            if total == 0 or earlier is None or stamp == earlier[1]:
                into[key] = 0.0
                continue
            into[key] = (total - earlier[0]) / ((stamp - earlier[1]) / 1e6)
