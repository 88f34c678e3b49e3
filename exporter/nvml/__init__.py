"""NVML collection: every catalogue measurement NVML gives without DCGM, read through pynvml.

`NvmlCollector` implements `exporter.collection.DeviceCollector`; `enabled_measurements` turns the CLI's selection of
catalogue keys into the set the collector reads.
"""

from exporter.nvml.collector import NvmlCollector
from exporter.nvml.coverage import NVML_MEASUREMENTS, enabled_measurements
from exporter.nvml.errors import NvmlUnavailable

__all__ = ["NVML_MEASUREMENTS", "NvmlCollector", "NvmlUnavailable", "enabled_measurements"]
