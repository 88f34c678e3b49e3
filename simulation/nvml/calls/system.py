"""NVML calls about the library and the system, and the ones that hand out device handles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, set_pointer, target, write_string

PlainCall = Callable[..., Any]


class SystemCalls:
    """nvmlInit*, nvmlShutdown, nvmlErrorString, nvmlSystem*, nvmlDeviceGetCount/GetHandleBy*."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.init_error: int | None = None  # set: nvmlInit fails with this code, like a host without a driver

    @property
    def init_count(self) -> int:
        return self.node.lifecycle.init_count

    def before_init(self) -> dict[str, PlainCall]:
        """Calls that work before nvmlInit."""
        return {
            "nvmlInitWithFlags": self.init_with_flags,
            "nvmlInit_v2": self.init,
            "nvmlShutdown": self.shutdown,
            "nvmlErrorString": self.error_string,
        }

    def after_init(self) -> dict[str, PlainCall]:
        return {
            "nvmlSystemGetDriverVersion": self.driver_version,
            "nvmlSystemGetNVMLVersion": self.nvml_version,
            "nvmlSystemGetCudaDriverVersion": self.cuda_driver_version,
            "nvmlSystemGetCudaDriverVersion_v2": self.cuda_driver_version,
            "nvmlSystemGetProcessName": self.process_name,
            "nvmlDeviceGetCount_v2": self.device_count,
            "nvmlDeviceGetHandleByIndex_v2": self.handle_by_index,
            "nvmlDeviceGetHandleByUUID": self.handle_by_uuid,
            "nvmlDeviceGetHandleByPciBusId_v2": self.handle_by_pci_bus_id,
        }

    # --- library ---------------------------------------------------------------------------------------------

    def init_with_flags(self, flags: Any) -> int:
        del flags
        return self.init()

    def init(self) -> int:
        """nvml.h (nvmlInit_v2): DRIVER_NOT_LOADED "if NVIDIA driver is not running"; LIB_RM_VERSION_MISMATCH when
        the kernel module is not the library's version (simulation/lifecycle.py)."""
        if self.init_error is not None:
            return self.init_error
        node = self.node
        with node.lock:
            node.advance()  # a driver loaded on the timeline by now
            code = node.lifecycle.init_status()
            if code != cabi.SUCCESS:
                return code
            node.lifecycle.opened()
        return cabi.SUCCESS

    def shutdown(self) -> int:
        node = self.node
        with node.lock:
            if node.lifecycle.init_count == 0:
                return cabi.UNINITIALIZED
            node.maintenance.released(node.lifecycle.closed())
        return cabi.SUCCESS

    @staticmethod
    def error_string(code: Any) -> bytes:
        return cabi.ERROR_STRINGS.get(as_int(code), b"Unknown Error")

    # --- system ----------------------------------------------------------------------------------------------

    def driver_version(self, buf: Any, length: Any) -> int:
        return write_string(buf, length, self.node.scenario.driver_version)

    def nvml_version(self, buf: Any, length: Any) -> int:
        return write_string(buf, length, self.node.scenario.nvml_version)

    def cuda_driver_version(self, out: Any) -> int:
        target(out).value = self.node.scenario.cuda_driver_version
        return cabi.SUCCESS

    def process_name(self, pid: Any, buf: Any, length: Any) -> int:
        wanted = as_int(pid)
        for gpu in self.node.enumerated():
            for _, domain in gpu.domains():
                for p in domain.processes:
                    if p.pid == wanted:
                        return write_string(buf, length, p.name)
        return cabi.NOT_FOUND

    # --- handles ---------------------------------------------------------------------------------------------

    def device_count(self, out: Any) -> int:
        self.node.advance()
        target(out).value = len(self.node.enumerated())  # GPUs bound to the driver only
        return cabi.SUCCESS

    def _hand_out(self, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        self.node.advance()
        if not gpu.bound:
            return cabi.NOT_FOUND
        if gpu.lost:
            return cabi.GPU_IS_LOST
        with self.node.lock:
            self.node.lifecycle.attach(gpu.index)  # the first handle attaches the GPU: it is held from now on
        set_pointer(out, cabi.device_handle(gpu.index, None if mig is None else mig.index, gpu.epoch))
        return cabi.SUCCESS

    def handle_by_index(self, index: Any, out: Any) -> int:
        i = as_int(index)
        self.node.advance()
        enumerated = self.node.enumerated()
        if not 0 <= i < len(enumerated):
            return cabi.INVALID_ARGUMENT
        return self._hand_out(enumerated[i], None, out)

    def handle_by_uuid(self, uuid: Any, out: Any) -> int:
        raw = getattr(uuid, "value", uuid)
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        found = self.node.by_uuid.get(text)
        if found is None:
            return cabi.NOT_FOUND
        return self._hand_out(found[0], found[1], out)

    def handle_by_pci_bus_id(self, bus_id: Any, out: Any) -> int:
        raw = getattr(bus_id, "value", bus_id)
        text = (raw.decode() if isinstance(raw, bytes) else str(raw)).upper()
        for gpu in self.node.gpus:
            ours = gpu.pci_bus_id.upper()
            if text in (ours, ours[4:]):  # the 8-digit or the legacy 4-digit domain form
                return self._hand_out(gpu, None, out)
        return cabi.NOT_FOUND
