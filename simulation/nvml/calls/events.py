"""NVML event calls: event sets, registration of XID (and ECC) events per device, waiting for them."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from simulation.driver import posts_gpu_unavailable_event
from simulation.machine import Node, SimGpu, SimMig
from simulation.nvml import cabi
from simulation.nvml.cabi import as_int, pointer_value, set_pointer, target
from simulation.nvml.eventsets import EVENT_TYPE_GPU_UNAVAILABLE, NO_INSTANCE, RegisteredGpuLostError

Call = Callable[..., Any]

EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_PSTATE = 0x4
EVENT_XID = 0x8
EVENT_CLOCK = 0x10
SUPPORTED_EVENTS = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_PSTATE | EVENT_XID | EVENT_CLOCK


def supported_events(library_version: str) -> int:
    """The event types a device can be registered for: the GPU-unavailable event from R570 on
    (simulation/driver.py `posts_gpu_unavailable_event`)."""
    extra = EVENT_TYPE_GPU_UNAVAILABLE if posts_gpu_unavailable_event(library_version) else 0
    return SUPPORTED_EVENTS | extra


class EventCalls:
    def __init__(self, node: Node) -> None:
        self.node = node

    def plain_calls(self) -> dict[str, Call]:
        return {
            "nvmlEventSetCreate": self.create,
            "nvmlEventSetWait_v2": self.wait,
            "nvmlEventSetFree": self.free,
        }

    def device_calls(self) -> dict[str, Call]:
        return {
            "nvmlDeviceGetSupportedEventTypes": self.supported_event_types,
            "nvmlDeviceRegisterEvents": self.register,
        }

    def create(self, out: Any) -> int:
        set_pointer(out, cabi.event_set_handle(self.node.events.create()))
        return cabi.SUCCESS

    def free(self, event_set: Any) -> int:
        n = cabi.decode_event_set(pointer_value(event_set))
        if n is None or not self.node.events.free(n):
            return cabi.INVALID_ARGUMENT
        return cabi.SUCCESS

    def supported_event_types(self, t: float, gpu: SimGpu, mig: SimMig | None, out: Any) -> int:
        target(out).value = supported_events(self.node.scenario.driver_version)
        return cabi.SUCCESS

    def register(self, t: float, gpu: SimGpu, mig: SimMig | None, event_types: Any, event_set: Any) -> int:
        mask = as_int(event_types)
        # nvml.h (nvmlDeviceRegisterEvents): NOT_SUPPORTED "if the platform does not support this feature or some
        # of requested event types"
        if mask & ~supported_events(self.node.scenario.driver_version):
            return cabi.NOT_SUPPORTED
        n = cabi.decode_event_set(pointer_value(event_set))
        if n is None or not self.node.events.register(n, gpu.index, mask):
            return cabi.INVALID_ARGUMENT
        return cabi.SUCCESS

    def wait(self, event_set: Any, data_ref: Any, timeout_ms: Any) -> int:
        """Block up to the timeout (real time) for the next event of the set: TIMEOUT when none came.

        nvml.h (nvmlEventSetWait_v2): GPU_IS_LOST "if a GPU has fallen off the bus or is otherwise inaccessible". Once
        the events queued before the loss (its XID 79) are handed out, every wait on a set that has a lost GPU
        registered fails so, until the caller builds a set without it.
        """
        n = cabi.decode_event_set(pointer_value(event_set))
        if n is None or not self.node.events.exists(n):
            return cabi.INVALID_ARGUMENT
        node = self.node
        # nvml.h, nvmlEventSetWait_v2: with no event ready the call "sleeps till event arrives but not longer than
        # specified timeout"; the simulated wait sleeps until the next timeline event is due (node.quiet_seconds)
        try:
            event = node.events.wait(
                n, as_int(timeout_ms) / 1000.0, node.advance, node.lost_indices, node.quiet_seconds
            )
        except RegisteredGpuLostError:
            return cabi.GPU_IS_LOST
        if event is None:
            return cabi.TIMEOUT
        data = target(data_ref)
        epoch = node.gpus[event.gpu].epoch
        ctypes.c_void_p.from_buffer(data, type(data).device.offset).value = cabi.device_handle(event.gpu, epoch=epoch)
        data.eventType = event.event_type
        data.eventData = event.data
        gi, ci = event.instance if event.instance is not None else (NO_INSTANCE, NO_INSTANCE)
        data.gpuInstanceId = gi
        data.computeInstanceId = ci
        return cabi.SUCCESS
