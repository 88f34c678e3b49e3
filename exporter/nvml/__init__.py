"""NVML collection: every catalogue measurement NVML gives without DCGM, read through pynvml.

`NvmlCollector` implements `exporter.collection.DeviceCollector`, told what to read by `CollectorSettings`;
`enabled_measurements` turns the CLI's selection of catalogue keys into the set the collector reads.
"""

from exporter.nvml.collector import NvmlCollector
from exporter.nvml.collector_settings import CollectorSettings
from exporter.nvml.coverage import NVML_MEASUREMENTS, enabled_measurements

__all__ = ["NVML_MEASUREMENTS", "CollectorSettings", "NvmlCollector", "enabled_measurements"]
