"""GPU health alerts, per dialect: a lost GPU, XID errors by class, ECC and row remapping, temperature and throttling
(clock-event reasons), framebuffer nearly full or filling up. Each carries a firing and a not-firing promtool case;
descriptions expand to the same text in both dialects (dcgm's `Hostname`/`UUID` hold what `node`/`uuid` hold).
"""

from __future__ import annotations

from exporter.catalogue import CLOCK_EVENT_REASONS, Dialect
from rules.dialect import Vocabulary
from rules.examples import GIB, GPU0, GPU1, MIG_3G
from rules.model import Alert, AlertCase, ExpectedAlert, InputSeries, RuleTest, Severity
from rules.series import (
    TestDevice,
    clock_reason_mask,
    device_series,
    gap,
    ramp,
    steady,
    up_series,
    xid_series,
)

# XID classes (NVIDIA's Xid catalogue, resolution buckets): what the operator has to do.
XID_HARDWARE = (48, 64, 74, 79, 95, 119, 120)  # DBE, remap failure, NVLink, off the bus, uncontained ECC, GSP
XID_MEMORY = (63, 92, 94)  # remap/retirement recorded, high SBE rate, contained ECC: reset or watch
XID_APPLICATION = (13, 31, 43, 45)  # engine exception, MMU fault, stopped channel, preemptive cleanup

THERMAL = ("sw_thermal_slowdown", "hw_thermal_slowdown")
HARDWARE_SLOWDOWN = ("hw_slowdown", "hw_power_brake_slowdown")
POWER_CAP = ("sw_power_cap",)

HEALTHY_NODE = "gpu-node-3"


def lab(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def _where(v: Vocabulary) -> str:
    """`GPU <index> (<uuid>) on node <node>` as a template."""
    return f"GPU {lab('gpu')} ({lab(v.uuid)}) on node {lab(v.node)}"


def _where_mig(v: Vocabulary) -> str:
    instance = f"{{{{ if $labels.{v.gpu_instance} }}}} MIG instance {lab(v.gpu_instance)}{{{{ end }}}}"
    return f"GPU {lab('gpu')}{instance} ({lab(v.uuid)}) on node {lab(v.node)}"


def _place(device: TestDevice) -> str:
    return f"GPU {device.gpu} ({device.uuid}) on node {device.node}"


def _place_mig(device: TestDevice) -> str:
    instance = f" MIG instance {device.mig[0]}" if device.mig else ""
    return f"GPU {device.gpu}{instance} ({device.uuid}) on node {device.node}"


def _fired(
    v: Vocabulary, key: str | None, device: TestDevice, description: str, **extra: str
) -> tuple[ExpectedAlert, ...]:
    """One expected alert per series copy of `device` (the dcgm dialect repeats device series per pod)."""
    const = dict(v.rendering(key).const_labels) if key else {}
    return tuple(ExpectedAlert(labels | const | extra, description) for labels in device.copies(v))


def _bit_expr(v: Vocabulary, reasons: tuple[str, ...]) -> str:
    """Any of the clock-event reasons active: per-reason 0/1 series, or bits of the dcgm bitmask."""
    rendering = v.rendering("clock_event_reasons")
    if rendering.bits is not None and v.dialect is Dialect.PROMETHEUS:
        pattern = "|".join(reasons)
        return f'max without ({rendering.bit_label}) ({rendering.name}{{{rendering.bit_label}=~"{pattern}"}}) == 1'
    return " or ".join(f"{rendering.name} % {2 * high} >= {low}" for low, high in _bit_runs(reasons))


def _bit_runs(reasons: tuple[str, ...]) -> list[tuple[int, int]]:
    """The reasons' bits as runs of adjacent bits, (lowest, highest) each: a mask has a bit of the run set exactly when
    its remainder by twice the highest is at least the lowest. Two operations a run, where dividing, flooring and
    taking the remainder bit by bit took three a bit and a sum: each is a copy of every GPU's series
    (docs/decisions/2026-11-29-prometheus-on-the-exporters-exposition.md)."""
    runs: list[tuple[int, int]] = []
    for bit in sorted({CLOCK_EVENT_REASONS[r] for r in reasons}):
        if runs and runs[-1][1] * 2 == bit:
            runs[-1] = (runs[-1][0], bit)
        else:
            runs.append((bit, bit))
    return runs


def _xid_expr(v: Vocabulary, xids: tuple[int, ...]) -> str:
    """A new XID of the class in the last 10 minutes, from the per-XID counters (the same family in both dialects'
    shapes: `nvidia_gpu_xid_errors_total`, `gpu_pulse_xid_errors_total` in the dcgm dialect). The dcgm dialect's
    DCGM_FI_DEV_XID_ERRORS cannot tell a repeat: its value is the last XID code (also its `err_code`), so the same
    code again leaves its one series unchanged; the counter grows with each XID. A counter's first sample is its first
    XID (the exporter publishes an XID's series once it has one), hence the `unless ... offset` branch."""
    rendering = v.rendering("xid_errors")
    sel = f'{rendering.name}{{{rendering.vector_label}=~"{"|".join(map(str, xids))}"}}'
    return f"increase({sel}[10m]) > 0 or ({sel} unless {sel} offset 10m)"


def _lost_gpu_test(v: Vocabulary, name: str, action: str) -> RuleTest:
    """XID 79 (fallen off the bus) on a GPU that is down from then on: the exporter keeps a lost GPU's XID series, so
    the alert fires while the GPU is gone, not only once it is back. The series is there on every driver branch:
    R535 before 535.216.01 and R550 before 550.120 post no event for a lost GPU, later ones only to the channels
    running on it, R570 the GPU-unavailable event; the exporter counts the loss as the XID 79 the driver logs
    (exporter/nvml/xid.py)."""
    device = GPU1
    inputs: tuple[InputSeries, ...] = (up_series(v, device, steady(1, 5).then(steady(0, 11))),)
    inputs += xid_series(v, device, 79, gap(5).then(steady(1, 11)))
    extra = {"xid": "79"}
    return RuleTest(
        f"{name}: fires for XID 79 on a GPU that fell off the bus (an event, or GPU_IS_LOST where the driver posts "
        "none), while it is still down",
        inputs,
        alert_cases=(
            AlertCase("4m", ()),
            AlertCase("8m", _fired(v, None, device, f"XID 79 on {_place(device)}: {action}", **extra)),
        ),
    )


def _xid_alert(v: Vocabulary, name: str, xids: tuple[int, ...], severity: Severity, summary: str, action: str) -> Alert:
    """An XID class alert, tested with an XID of the class on one GPU and an old XID of another class on another
    (the hardware class also with XID 79 on a GPU that is lost)."""
    xid = xids[0]
    other = (XID_HARDWARE if xids is XID_APPLICATION else XID_APPLICATION)[0]
    device = GPU0
    healthy = TestDevice(node=HEALTHY_NODE, gpu=0, uuid="GPU-c0000000-0000-0000-0000-000000000000")
    # the first XID at minute 5, the same XID again at minute 30 (a repeat must alert again)
    inputs = xid_series(v, device, xid, gap(5).then(steady(1, 25)).then(steady(2, 11)))
    inputs += xid_series(v, healthy, other, steady(3, 41))
    extra = {"xid": str(xid)}
    text = f"XID {xid} on {_place(device)}: {action}"
    return Alert(
        name,
        _xid_expr(v, xids),
        "0m",
        severity,
        summary,
        f"XID {lab('xid')} on {_where(v)}: {action}",
        (
            RuleTest(
                f"{name}: fires within 10 minutes of an XID of its class and again when the same XID repeats, not for "
                "an old XID of another class",
                inputs,
                alert_cases=(
                    AlertCase("4m", ()),
                    AlertCase("8m", _fired(v, None, device, text, **extra)),
                    AlertCase("20m", ()),
                    AlertCase("33m", _fired(v, None, device, text, **extra)),
                    AlertCase("45m", ()),
                ),
            ),
            *((_lost_gpu_test(v, name, action),) if 79 in xids else ()),
        ),
    )


def gpu_alerts(v: Vocabulary) -> tuple[Alert, ...]:
    down = GPU1
    hot, cool = GPU0, TestDevice(node=HEALTHY_NODE, gpu=0, uuid="GPU-c0000000-0000-0000-0000-000000000000")
    mig_full = MIG_3G
    leaking = GPU0
    steady_mem = TestDevice(node=HEALTHY_NODE, gpu=1, uuid="GPU-c1000000-0000-0000-0000-000000000000")

    def clock_test(name: str, reasons: tuple[str, ...], for_minutes: int) -> RuleTest:
        """Each reason of the alert on its own GPU (the last one on a GPU shared by two pods), other reasons on
        another GPU, which must stay quiet."""
        samples = for_minutes + 10
        throttled = (hot, GPU1)[: len(reasons)] if len(reasons) > 1 else (hot,)
        other = clock_reason_mask(*(r for r in ("gpu_idle", "sw_power_cap", "sw_thermal_slowdown") if r not in reasons))
        inputs = device_series(v, "clock_event_reasons", cool, steady(other, samples))
        fired: tuple[ExpectedAlert, ...] = ()
        for device, reason in zip(throttled, reasons, strict=True):
            active = clock_reason_mask(reason, "applications_clocks_setting")  # with an unrelated bit set
            inputs += device_series(v, "clock_event_reasons", device, steady(active, samples))
            fired += _fired(v, None, device, _clock_text(name, device))
        return RuleTest(
            f"{name}: fires after {for_minutes} minutes of {' or '.join(reasons)}, not for other reasons",
            inputs,
            alert_cases=(AlertCase(f"{for_minutes - 2}m", ()), AlertCase(f"{for_minutes + 5}m", fired)),
        )

    return (
        Alert(
            "GPUDown",
            f"{v.up} == 0",
            "1m",
            Severity.CRITICAL,
            "A GPU stopped answering NVML.",
            f"{_where(v)} no longer answers NVML (lost or fallen off the bus); the pods holding it cannot use it.",
            (
                RuleTest(
                    "GPUDown: fires once a GPU is lost for a minute, not for GPUs that answer",
                    (up_series(v, GPU0, steady(1, 8)), up_series(v, down, steady(1, 3).then(steady(0, 5)))),
                    alert_cases=(
                        AlertCase("2m", ()),
                        AlertCase(
                            "6m",
                            (
                                ExpectedAlert(
                                    down.labels(v),
                                    f"{_place(down)} no longer answers NVML (lost or fallen off the bus); "
                                    "the pods holding it cannot use it.",
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        _xid_alert(
            v,
            "GPUXidHardwareError",
            XID_HARDWARE,
            Severity.CRITICAL,
            "A GPU reported an XID error that needs a GPU reset or hardware service.",
            "drain the node's GPU workloads, reset the GPU, and replace it if the error returns.",
        ),
        _xid_alert(
            v,
            "GPUXidMemoryError",
            XID_MEMORY,
            Severity.WARNING,
            "A GPU reported a memory XID error (row remapping or contained ECC).",
            "the affected application may have been stopped; schedule a GPU reset to apply row remapping.",
        ),
        _xid_alert(
            v,
            "GPUXidApplicationError",
            XID_APPLICATION,
            Severity.INFO,
            "A GPU application triggered an XID error.",
            "an application fault (bad memory access or a stopped channel); check the logs of its pods.",
        ),
        Alert(
            "GPUUncorrectableECCErrors",
            f"increase({_ecc(v)}[10m]) > 0",
            "0m",
            Severity.WARNING,
            "A GPU reported uncorrectable ECC memory errors.",
            f"{_where(v)} reported uncorrectable (double-bit) ECC errors in the last 10 minutes; "
            "applications using it may have crashed or computed on corrupted data.",
            (
                RuleTest(
                    "GPUUncorrectableECCErrors: fires on a new uncorrectable error, not on a steady count",
                    device_series(v, "ecc_dbe_volatile", GPU0, steady(0, 5).then(steady(2, 20)))
                    + device_series(v, "ecc_dbe_volatile", cool, steady(4, 25)),
                    alert_cases=(
                        AlertCase("3m", ()),
                        AlertCase(
                            "7m",
                            _fired(
                                v,
                                "ecc_dbe_volatile",
                                GPU0,
                                f"{_place(GPU0)} reported uncorrectable (double-bit) ECC errors in the last 10 "
                                "minutes; applications using it may have crashed or computed on corrupted data.",
                            ),
                        ),
                        AlertCase("20m", ()),
                    ),
                ),
            ),
        ),
        Alert(
            "GPURowRemapFailure",
            f"{v.name('row_remap_failure')} == 1",
            "1m",
            Severity.CRITICAL,
            "A GPU failed to remap a faulty memory row and needs service.",
            f"{_where(v)} could not remap a faulty memory row: it will keep producing memory errors. Drain it and "
            "arrange a replacement.",
            (
                RuleTest(
                    "GPURowRemapFailure: fires while the failure flag is set",
                    device_series(v, "row_remap_failure", GPU0, steady(0, 3).then(steady(1, 5)))
                    + device_series(v, "row_remap_failure", cool, steady(0, 8)),
                    alert_cases=(
                        AlertCase("2m", ()),
                        AlertCase(
                            "6m",
                            _fired(
                                v,
                                "row_remap_failure",
                                GPU0,
                                f"{_place(GPU0)} could not remap a faulty memory row: it will keep producing memory "
                                "errors. Drain it and arrange a replacement.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPURowRemapPending",
            f"{v.name('row_remap_pending')} == 1",
            "15m",
            Severity.WARNING,
            "A GPU has a memory row remap waiting for a GPU reset.",
            f"{_where(v)} has a memory row remap pending: it takes effect at the next GPU reset. Drain the GPU and "
            "reset it when convenient.",
            (
                RuleTest(
                    "GPURowRemapPending: fires after 15 minutes pending",
                    device_series(v, "row_remap_pending", GPU0, steady(1, 25))
                    + device_series(v, "row_remap_pending", cool, steady(0, 25)),
                    alert_cases=(
                        AlertCase("10m", ()),
                        AlertCase(
                            "20m",
                            _fired(
                                v,
                                "row_remap_pending",
                                GPU0,
                                f"{_place(GPU0)} has a memory row remap pending: it takes effect at the next GPU "
                                "reset. Drain the GPU and reset it when convenient.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUHighTemperature",
            f"{v.name('gpu_temp')} > 85",
            "5m",
            Severity.WARNING,
            "A GPU runs hot.",
            f"{_where(v)} has been at {{{{ $value }}}} °C for 5 minutes (threshold 85 °C); it will slow down to "
            "protect itself. Check cooling and airflow.",
            (
                RuleTest(
                    "GPUHighTemperature: fires after 5 minutes above 85 °C",
                    device_series(v, "gpu_temp", hot, steady(70, 3).then(steady(91, 12)))
                    + device_series(v, "gpu_temp", cool, steady(84, 15)),
                    alert_cases=(
                        AlertCase("5m", ()),
                        AlertCase(
                            "10m",
                            _fired(
                                v,
                                "gpu_temp",
                                hot,
                                f"{_place(hot)} has been at 91 °C for 5 minutes (threshold 85 °C); it will slow "
                                "down to protect itself. Check cooling and airflow.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUThermalThrottling",
            _bit_expr(v, THERMAL),
            "10m",
            Severity.WARNING,
            "A GPU slows its clocks because it is too hot.",
            _CLOCK_TEXT["GPUThermalThrottling"].format(where=_where(v)),
            (clock_test("GPUThermalThrottling", THERMAL, 10),),
        ),
        Alert(
            "GPUHardwareSlowdown",
            _bit_expr(v, HARDWARE_SLOWDOWN),
            "5m",
            Severity.WARNING,
            "A GPU's clocks are held down by a hardware slowdown or power brake signal.",
            _CLOCK_TEXT["GPUHardwareSlowdown"].format(where=_where(v)),
            (clock_test("GPUHardwareSlowdown", HARDWARE_SLOWDOWN, 5),),
        ),
        Alert(
            "GPUPowerCapped",
            _bit_expr(v, POWER_CAP),
            "30m",
            Severity.INFO,
            "A GPU has been held at its power limit for half an hour.",
            _CLOCK_TEXT["GPUPowerCapped"].format(where=_where(v)),
            (clock_test("GPUPowerCapped", POWER_CAP, 30),),
        ),
        Alert(
            "GPUMemoryNearlyFull",
            # used / (used + free), written to read each family once: 1 / (1 + free / used) is the same fraction
            # (0 for used = 0, as 0 / free; no series where either is missing), from two selections instead of three
            f"1 / (1 + {v.name('fb_free')} / {v.name('fb_used')}) > 0.95",
            "15m",
            Severity.WARNING,
            "A GPU's framebuffer is nearly full.",
            f"{_where_mig(v)} has {{{{ $value | humanizePercentage }}}} of its framebuffer allocated; new "
            "allocations will fail with out-of-memory errors.",
            (
                RuleTest(
                    "GPUMemoryNearlyFull: fires per GPU or MIG instance above 95% for 15 minutes",
                    device_series(v, "fb_used", mig_full, steady(19.5 * GIB, 20))
                    + device_series(v, "fb_free", mig_full, steady(0.5 * GIB, 20))
                    + device_series(v, "fb_used", cool, steady(60 * GIB, 20))
                    + device_series(v, "fb_free", cool, steady(20 * GIB, 20)),
                    alert_cases=(
                        AlertCase("10m", ()),
                        AlertCase(
                            "16m",
                            _fired(
                                v,
                                None,
                                mig_full,
                                f"{_place_mig(mig_full)} has 97.5% of its framebuffer allocated; new allocations "
                                "will fail with out-of-memory errors.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
        Alert(
            "GPUMemoryFillingUp",
            _filling_up(v),
            "30m",
            Severity.WARNING,
            "A GPU's framebuffer use keeps growing and will reach its capacity within 4 hours.",
            f"Framebuffer use of {_where_mig(v)} has grown steadily for the last hour; at this rate it reaches "
            "the device's capacity within 4 hours. A process on it may be leaking memory.",
            (
                RuleTest(
                    "GPUMemoryFillingUp: fires for steady growth, not for a flat high use",
                    device_series(v, "fb_free", leaking, ramp(70 * GIB, -0.25 * GIB, 121))
                    + device_series(v, "fb_free", steady_mem, steady(10 * GIB, 121)),
                    alert_cases=(
                        AlertCase("30m", ()),
                        AlertCase(
                            "90m",
                            _fired(
                                v,
                                None,
                                leaking,
                                f"Framebuffer use of {_place_mig(leaking)} has grown steadily for the last hour; at "
                                "this rate it reaches the device's capacity within 4 hours. A process on it may be "
                                "leaking memory.",
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def _filling_up(v: Vocabulary) -> str:
    """Free framebuffer projected below zero within 4 hours from the last hour's trend, and lower than 30 minutes ago.

    One range function over one family (free memory falls as use grows; free + used is the capacity allocations can
    reach, so no join with a total), and the "still growing" test as an instant comparison with `offset` instead of a
    second range function. Its group is evaluated every SLOW_INTERVAL (alerting.py): the alert needs 30 minutes of the
    condition anyway, and the range function is the costliest expression of the GPU alerts."""
    free = v.name("fb_free")
    return f"predict_linear({free}[1h], 4 * 3600) < 0 and {free} < {free} offset 30m"


def slow_gpu_alerts(v: Vocabulary) -> tuple[Alert, ...]:
    """The GPU health alerts of the slower group (alerting.py, with GPUAllocatedButIdle): GPUMemoryFillingUp."""
    return tuple(a for a in gpu_alerts(v) if a.alert in SLOW_ALERTS)


def minute_gpu_alerts(v: Vocabulary) -> tuple[Alert, ...]:
    """The GPU health alerts of the per-minute group (alerting.py): held 5 minutes, or a 10-minute window."""
    return tuple(a for a in gpu_alerts(v) if a.alert in MINUTE_ALERTS)


def steady_gpu_alerts(v: Vocabulary) -> tuple[Alert, ...]:
    """The GPU health alerts of the two-minute group (alerting.py): held 10 minutes or more."""
    return tuple(a for a in gpu_alerts(v) if a.alert in STEADY_ALERTS)


def fast_gpu_alerts(v: Vocabulary) -> tuple[Alert, ...]:
    return tuple(a for a in gpu_alerts(v) if a.alert not in SLOW_ALERTS | STEADY_ALERTS | MINUTE_ALERTS)


SLOW_ALERTS = frozenset({"GPUMemoryFillingUp"})
STEADY_ALERTS = frozenset({"GPURowRemapPending", "GPUThermalThrottling", "GPUPowerCapped", "GPUMemoryNearlyFull"})
MINUTE_ALERTS = frozenset({"GPUHighTemperature", "GPUHardwareSlowdown", "GPUUncorrectableECCErrors"})


def _ecc(v: Vocabulary) -> str:
    rendering = v.rendering("ecc_dbe_volatile")
    const = ",".join(f'{k}="{val}"' for k, val in rendering.const_labels.items())
    return f"{rendering.name}{{{const}}}" if const else rendering.name


_CLOCK_TEXT = {
    "GPUThermalThrottling": "{where} has been slowing its clocks for thermal reasons for 10 minutes: workloads on "
    "it run slower. Check cooling, airflow and fan health.",
    "GPUHardwareSlowdown": "{where} has been held down by a hardware slowdown (thermal or power brake signal) for 5 "
    "minutes: workloads on it run much slower. Check the power supply and the chassis.",
    "GPUPowerCapped": "{where} has been held at its power limit for 30 minutes: it cannot reach full clocks. "
    "Expected under full load; investigate if the limit was lowered.",
}


def _clock_text(name: str, device: TestDevice) -> str:
    return _CLOCK_TEXT[name].format(where=_place(device))
