"""The pod side of the poll loop: kubelet pod-resources + proc tree + pod watch -> who uses which device.

`KubeletPodAttributor` implements `exporter.collection.PodAttributor`. Its `attribute` never calls the kubelet or the
Kubernetes API: it reads the kubelet client's last mapping and the watch's cache, reads the cgroup files of the
processes on shared GPUs, and runs the pure `attribute` function. When the kubelet stops answering, the last mapping
stays in use until it is older than `max_mapping_age`; after that the devices lose their pods (rather than keep
labels that may be wrong), and `kubelet_up`/`mapping_age_seconds` say why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from exporter.attribution.attribute import attribute
from exporter.attribution.directory import DirectoryStatus, PodDirectory
from exporter.attribution.energy import EnergyLedger
from exporter.attribution.kubelet_dra import KubeletDraCheck
from exporter.attribution.labels import PodLabelPolicy
from exporter.attribution.proc import ProcessOwners
from exporter.attribution.resourceslices import DraDevices, MigSpec, ResourceSliceIndex
from exporter.attribution.slicewatch import SliceWatchStatus
from exporter.attribution.visibility import busy, judge_visibility
from exporter.collection import Attribution, DeviceCollection
from exporter.kubelet.client import PodResourcesClient
from exporter.kubelet.device_ids import ResourceNames
from exporter.snapshot import CollectorStatus, ProcessVisibility
from toolkit.logs import fields

log = logging.getLogger(__name__)

DEFAULT_MAX_MAPPING_AGE = 60.0
VISIBILITY_RECHECK_SECONDS = 30.0
# The most start-up waits for the kubelet's first List (a List takes milliseconds; a hung kubelet costs this once)
FIRST_LIST_WAIT_SECONDS = 5.0


class WatchedPods(PodDirectory, Protocol):
    """A pod directory with a lifecycle and a status: PodWatch, StaticPodDirectory."""

    @property
    def status(self) -> DirectoryStatus: ...

    @property
    def watches(self) -> bool:
        """True when a watch of the Kubernetes API keeps the directory current (its health is then reported)."""
        ...

    def start(self) -> None: ...

    def close(self) -> None: ...


class WatchedSlices(DraDevices, Protocol):
    """DRA devices with a lifecycle and a status: ResourceSliceWatch, StaticResourceSlices."""

    @property
    def status(self) -> SliceWatchStatus: ...

    def start(self) -> None: ...

    def close(self) -> None: ...


class StaticResourceSlices:
    """A fixed set of ResourceSlices (the simulated node's, where no API server runs). A WatchedSlices."""

    def __init__(self, index: ResourceSliceIndex) -> None:
        self.index = index
        self.status = SliceWatchStatus(synced=True, connected=True, devices=len(index))

    def uuid_of(self, driver: str, pool: str, device: str) -> str | None:
        return self.index.uuid_of(driver, pool, device)

    def mig_spec_of(self, driver: str, pool: str, device: str) -> MigSpec | None:
        return self.index.mig_spec_of(driver, pool, device)

    def start(self) -> None:
        """Nothing to start: the slices are given."""

    def close(self) -> None:
        """Nothing to stop."""


class KubeletPodAttributor:
    """Implements exporter.collection.PodAttributor."""

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        owners: ProcessOwners | None = None,
        pods: WatchedPods | None = None,
        slices: WatchedSlices | None = None,
        resource_names: ResourceNames | None = None,
        labels: PodLabelPolicy | None = None,
        max_mapping_age: float = DEFAULT_MAX_MAPPING_AGE,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.client = client
        self.owners = owners
        self.pods = pods
        self.slices = slices
        self.resource_names = resource_names or ResourceNames()
        self.labels = labels or PodLabelPolicy()
        self.max_mapping_age = max_mapping_age
        self._timer = timer
        self._ledger = EnergyLedger()
        self._stale_logged = False
        self._attribution_errors = 0
        self._last_problems = (0, 0)
        self._mps_devices = 0
        self._ambiguous_dra = 0
        self._kubelet_dra = KubeletDraCheck()
        self._visible: bool | None = None
        # the last verdict, with what it was judged on: the listed PIDs do not change from cycle to cycle, so their
        # /proc entries are read again only when they do, or after VISIBILITY_RECHECK_SECONDS
        self._judged: tuple[object, float, ProcessVisibility] | None = None

    def start(self) -> None:
        self.client.start()
        # the first List before the first poll: otherwise the first scrape after a start (or a rollout) serves
        # device series without pod labels, and a dashboard or an HPA sees the pods vanish for one interval
        self.client.wait_first_answer(min(FIRST_LIST_WAIT_SECONDS, self.client.call_timeout))
        if self.pods is not None:
            self.pods.start()
        if self.slices is not None:
            self.slices.start()

    def close(self) -> None:
        self.client.close()
        if self.pods is not None:
            self.pods.close()
        if self.slices is not None:
            self.slices.close()

    def attribute(self, collection: DeviceCollection) -> Attribution:
        started = self._timer()
        state = self.client.state
        age = state.age(self.client.now())
        fresh = state.pods is not None and age is not None and age <= self.max_mapping_age
        if state.pods is not None and not fresh and not self._stale_logged:
            log.warning(
                "the kubelet pod mapping is %.0f s old (bound %.0f s): devices are reported without pods until the "
                "kubelet answers again",
                age or 0.0,
                self.max_mapping_age,
            )
        self._stale_logged = state.pods is not None and not fresh

        directory = self.pods if self.pods is not None and self.pods.status.synced else None
        owner_of = self.owners.owner_of if self.owners is not None and self.owners.available() else None
        if collection.processes_hidden is not None:  # listed PIDs and samples cannot be tied to pods reliably
            owner_of = None
        result = attribute(
            collection.devices,
            state.pods if fresh and state.pods is not None else (),
            resource_names=self.resource_names,
            owner_of=owner_of,
            directory=directory,
            labels=self.labels,
            dra=self.slices,
        )
        uses = self._ledger.charge(result.shares, collection.devices)
        self._attribution_errors += result.conflicts + result.unknown_device_ids
        problems = (result.conflicts, result.unknown_device_ids)
        if problems != self._last_problems and any(problems):
            log.info(
                "pod-resources: %d device(s) claimed by more than one pod (stale entries of terminated pods: one pod "
                "kept per device), %d device ID(s) in no known format",
                *problems,
            )
        self._last_problems = problems
        if result.ambiguous_dra_devices != self._ambiguous_dra:
            if result.ambiguous_dra_devices:
                log.warning(
                    "%d DRA MIG device(s) published without a UUID (the NVIDIA DRA driver's dynamic MIG) fit more than "
                    "one MIG instance of their profile on their GPU: which one is not published, so their pods are "
                    "left out rather than guessed",
                    result.ambiguous_dra_devices,
                )
            self._ambiguous_dra = result.ambiguous_dra_devices
        if result.mps_devices != self._mps_devices:
            if result.mps_devices:
                log.info(
                    "%d shared GPU(s) run their pods as MPS clients: NVML's utilization samples name the MPS server, "
                    "so those pods report memory but their utilization stays unattributed",
                    result.mps_devices,
                )
            self._mps_devices = result.mps_devices
        statuses = [
            CollectorStatus("kubelet", state.up, state.last_duration_seconds, float(state.errors_total)),
            CollectorStatus(
                "pod_mapping",
                fresh,
                self._timer() - started,
                float(self._attribution_errors),
            ),
        ]
        if self.pods is not None and self.pods.watches:  # a fixed directory runs no watch: nothing to report
            watch = self.pods.status
            statuses.append(CollectorStatus("podwatch", watch.connected, 0.0, float(watch.errors_total)))
        dra = self._kubelet_dra.status(state.pods if fresh and state.pods is not None else (), directory)
        if dra is not None:
            statuses.append(dra)
        if self.slices is not None:
            sliced = self.slices.status
            statuses.append(CollectorStatus("resourceslices", sliced.connected, 0.0, float(sliced.errors_total)))
        return Attribution(
            pods=uses,
            kubelet_up=state.up,
            mapping_age_seconds=age,
            statuses=tuple(statuses),
            process_visibility=self._visibility(collection, owner_of is not None),
            kubelet_error=None if state.up else state.last_error,
        )

    def _visibility(self, collection: DeviceCollection, proc_root: bool) -> ProcessVisibility:
        owners = self.owners

        def readable(pids: Iterable[int]) -> int:
            assert owners is not None
            found = owners.owners_of(pids)
            return len(found.owners) + found.not_in_pod

        basis = (
            proc_root,
            collection.processes_hidden,
            frozenset(p.pid for d in collection.devices if d.up for p in d.processes),
            tuple(busy(d) for d in collection.devices),
        )
        now = self._timer()
        judged = self._judged
        if judged is not None and judged[0] == basis and now - judged[1] < VISIBILITY_RECHECK_SECONDS:
            return judged[2]
        if collection.processes_hidden is not None:
            verdict = ProcessVisibility(False, collection.processes_hidden)
        else:
            verdict = judge_visibility(collection.devices, readable if proc_root and owners is not None else None)
        self._judged = (basis, now, verdict)
        if verdict.visible is not None and verdict.visible != self._visible:
            if verdict.visible:
                again = " again" if self._visible is False else ""  # the first verdict is no recovery
                log.info(
                    "GPU processes of other pods are visible%s: %s",
                    again,
                    verdict.reason,
                    extra=fields(reason=verdict.reason),
                )
            else:
                log.warning(
                    "GPU processes of other pods are not visible: %s; shared GPUs stay unattributed",
                    verdict.reason,
                    extra=fields(reason=verdict.reason),
                )
            self._visible = verdict.visible
        return verdict
