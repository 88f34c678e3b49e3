"""The adapter at fleet scale: 2,000 GPU nodes, 20,000 GPU pods in a cache of 52,000, 500 HPAs, two replicas.

    PYTHONPATH=. python bench/fleet.py [--duration 120] [--replicas 2] [--refresh 2] [--nodes 2000] [--gpu-pods 20000]
        [--own-cores] [--json PATH] [--no-restart-replica] [--no-restart-exporters] [--no-new-namespace] [--churn 4]

Starts the simulated fleet (bench/fleet_cluster.py: the Kubernetes API stand-in with the fleet's pods and a steady
churn, and one exporter endpoint per GPU node on its own loopback address, streaming `/pods` documents that change
every second), then `--replicas` real adapter processes as a cluster runs them: TLS, client-certificate auth,
SubjectAccessReview against the stand-in, the pod cache filled by list and watch, exporters found by their pods. Then
500 HPAs, one per GPU Deployment, each asking what an HPA asks every 15 s,
    GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/<ns>/pods/*/gpu_utilization?labelSelector=app%3D<deployment>
at its own phase, each time of a replica picked at random (as kube-aggregator spreads requests over the Service's
endpoints). In the same run, through the same client, 50 more HPAs ask a bare TLS server (its own process) that
answers a canned 10-pod answer: the answer times this machine allows under the same load, the baseline. After one
HPA period of warm-up, it measures for `--duration` seconds: answer times by Deployment size, the age of each served
figure (from its sample time to the answer; timestamps are whole seconds, so ages read up to
1 s high), each replica's CPU time and memory, and the `/pods` requests and documents each exporter served.

Every answer is checked against the simulator's ground truth once the measurement is over (while it runs, the HPAs'
client only times answers and keeps their bodies: parsing a 1,000-item answer on its event loop would delay the answers
that arrive meanwhile, and their times would count the client's work as the adapter's): an item
is wrong when its pod was not a pod of that Deployment when the question was asked (a pod created or deleted within
`--grace` seconds of it counts either way: the pod cache's watch delay), when its value is not what the pod's exporter
published for the sample second its timestamp names (or a neighbouring second: the adapter places the exporter's
sample times on its own clock), when it is older than the adapter's max age (3 x interval + 2 s, plus the second the
whole-second timestamp may hide), or when a pod is listed twice. Pods of the Deployment left out although their
exporter had served fresh figures for them are counted as missing (stated, not a goal).

Churn during the measurement (each on by default, each can be turned off): one replica is stopped (SIGTERM) and
started again; it leaves the HPAs' choice when stopped and joins again when its /readyz says ready, as kube-aggregator
uses only ready endpoints; some nodes' exporters restart (connections close, then are refused for a few seconds); a
new namespace appears with a new Deployment and an HPA that asks about it; and the steady replacement of `--churn`
pods a second. Answers that fail while a replica restarts are counted apart from other failures. The replicas share
every core unless `--own-cores` gives each one of its own, as the chart's anti-affinity puts them on nodes of their
own: on a small machine, a replica starting again then does not take the serving one's core.

Prints a summary table with the goals of issues 13 and 23 and exits 1 when a goal is missed (2 when the run itself
failed); `--json PATH` writes the run's figures for a script (the scaling curve of issue 23).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_cluster import (
    AdapterCredentials,
    served_url,
    start_baseline_server,
    wait_adapter_ready,
    wait_for_ready_file,
)
from fleet_cluster import utilization_tenths

REPO = Path(__file__).resolve().parents[1]
HPA_PERIOD = 15.0
# HPAs asking the baseline server (a bare TLS server answering a canned 10-pod answer) in the same run, through the
# same client: what answer times the machine itself allows under the fleet's load
BASELINE_HPAS = 50
CLK_TCK = os.sysconf("SC_CLK_TCK")
INTERVAL = 1.0  # the simulated exporters' interval (fleet_cluster.py --interval)
MAX_AGE = 3 * INTERVAL + 2  # the adapter's default max age of a figure (adapter/sources/direct.py)
FEW = 100  # a percentile resting on fewer answers than this is little more than a maximum


@dataclass(eq=False)
class Answer:
    pods: int  # the Deployment's size
    seconds: float
    status: int
    items: int
    ages: list[float]
    replica: int = 0  # which replica answered (-1: the baseline server)
    asked: float = 0.0  # wall-clock time the question was sent
    answered: float = 0.0  # wall-clock time the answer was read
    deployment: tuple[str, str] = ("", "")  # (namespace, name)
    wrong: int = 0  # items wrong against the simulator's truth, once checked
    missing: int = 0  # pods with fresh figures left out, once checked
    failure: str = ""  # what a failed answer said (status and the start of its body, or the client's error)
    exporters_down: bool = False  # a failed answer whose pods' exporters were all restarting, once checked


@dataclass
class Run:
    answers: list[Answer] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)  # seconds, answers of the baseline server
    measuring: bool = False
    # answers and their bodies (None: failed), parsed and checked once the measurement is over
    unchecked: deque[tuple[Answer, bytes | None]] = field(default_factory=deque)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# ---- the ground truth and the check of answers against it ---------------------------------------------------------
@lru_cache(maxsize=4096)  # a few distinct seconds per answer, the same across answers
def timestamp_second(text: str) -> int | None:
    """The Unix second an item's RFC 3339 timestamp names (rounded down), None when it is not a timestamp."""
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        pass
    try:
        return math.floor(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


_SUFFIX_EXPONENT = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9}


@lru_cache(maxsize=4096)  # values repeat: a percent to a tenth has 1,001 of them
def milli_units(text: str) -> int | None:
    """A decimal-SI quantity ("37500m", "37", "1e3") in thousandths, None when it is not one or not whole in them."""
    number = text.rstrip("numkMG")
    exponent = _SUFFIX_EXPONENT.get(text[len(number) :])
    if exponent is None:
        return None
    try:
        value = Decimal(number).scaleb(exponent + 3)
    except InvalidOperation:
        return None
    if not value.is_finite() or value != value.to_integral_value():
        return None
    return int(value)


@dataclass(slots=True)
class PodLife:
    """A GPU pod of a Deployment between its creation and deletion (wall-clock times, the API stand-in's)."""

    deployment: tuple[str, str]  # (namespace, name)
    node: int
    created: float
    deleted: float = math.inf


class Membership:
    """Which pod belonged to which Deployment when: the simulator's journal (fleet_cluster.Fleet.journal) replayed."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], PodLife] = {}
        self.by_deployment: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        self.read = 0  # journal entries replayed
        self.until = -math.inf  # the journal is complete up to this wall-clock time

    def replay(self, entries: Sequence[Sequence[Any]], until: float) -> None:
        for at, change, namespace, name, deployment, node in entries:
            key = (namespace, name)
            if change == "add":
                self.pods[key] = PodLife((namespace, deployment), node, at)
                self.by_deployment[(namespace, deployment)].append(key)
            elif (life := self.pods.get(key)) is not None:
                life.deleted = at
        self.read += len(entries)
        self.until = until

    async def follow(self, session: aiohttp.ClientSession, truth_url: str) -> None:
        """Read the journal's entries since the last read."""
        async with session.get(f"{truth_url}/journal", params={"since": str(self.read)}) as response:
            body = await response.json()
        self.replay(body["entries"], body["until"])


WRONG_KINDS = {
    "foreign pod": "a pod that was never of the Deployment",
    "deleted pod": "a pod deleted more than the grace before the question",
    "unborn pod": "a pod created more than the grace after the question",
    "duplicate": "a pod listed twice",
    "bad timestamp": "a timestamp that is not RFC 3339",
    "stale": "older than the max age (+1 s of rounding) when asked",
    "future": "a sample time after the answer",
    "wrong value": "not what the exporter published for the named second or a neighbour",
}


class AnswerChecker:
    """Checks answers' items against the simulator's truth: membership (`Membership`), figures (`utilization_tenths`)
    and the adapter's max age; counts wrong items by kind and pods left out although fresh figures existed."""

    def __init__(self, membership: Membership, grace: float, max_age: float = MAX_AGE) -> None:
        self.membership = membership
        self.grace = grace
        self.max_age = max_age
        self.exporter_down: dict[int, list[tuple[float, float]]] = defaultdict(list)  # node -> (from, to)
        self.answers = 0
        self.items = 0
        self.wrong_answers = 0
        self.wrong: Counter[str] = Counter()  # items by kind
        self.examples: dict[str, list[str]] = defaultdict(list)
        self.missing = 0
        self.answers_missing = 0
        self.busy = 0.0  # seconds the check took, in all, after the measurement (measured by `check_answers`)
        self.busy_cpu = 0.0  # and its CPU time

    def check(self, answer: Answer, items: Sequence[Any]) -> None:
        """Check one answer's items; count what is wrong and the pods left out."""
        seen: set[tuple[str, str]] = set()
        wrong = 0
        for item in items:
            kind, key = self._wrong_kind(answer, item, seen)
            if kind is not None:
                wrong += 1
                self.wrong[kind] += 1
                if len(self.examples[kind]) < 3:
                    self.examples[kind].append(self._example(answer, item, key))
        answer.wrong = wrong
        answer.missing = self._missing(answer, seen)
        self.answers += 1
        self.items += len(items)
        self.wrong_answers += wrong > 0
        self.missing += answer.missing
        self.answers_missing += answer.missing > 0

    def _wrong_kind(
        self, answer: Answer, item: Any, seen: set[tuple[str, str]]
    ) -> tuple[str | None, tuple[str, str] | None]:
        try:
            described = item["describedObject"]
            key = (described["namespace"], described["name"])
            stamp, value = item["timestamp"], item["value"]
        except (KeyError, TypeError):
            return "foreign pod", None
        if key in seen:
            return "duplicate", key
        seen.add(key)
        life = self.membership.pods.get(key)
        if life is None or life.deployment != answer.deployment or described.get("kind") != "Pod":
            return "foreign pod", key
        if life.deleted < answer.asked - self.grace:
            return "deleted pod", key
        if life.created > answer.answered + self.grace:
            return "unborn pod", key
        second = timestamp_second(stamp) if isinstance(stamp, str) else None
        if second is None:
            return "bad timestamp", key
        if answer.asked - second > self.max_age + 1:
            return "stale", key
        if second > answer.answered:
            return "future", key
        served = milli_units(value) if isinstance(value, str) else None
        namespace, name = key
        if served is None or all(
            utilization_tenths(namespace, name, s) * 100 != served for s in (second, second - 1, second + 1)
        ):
            return "wrong value", key
        return None, key

    def _missing(self, answer: Answer, seen: set[tuple[str, str]]) -> int:
        """Pods of the Deployment throughout the question (past the grace) whose exporter served fresh figures for at
        least the max age before it, that the answer left out."""
        oldest = answer.asked - self.max_age - self.grace
        missing = 0
        for key in self.membership.by_deployment.get(answer.deployment, ()):
            if key in seen:
                continue
            life = self.membership.pods[key]
            if life.created <= oldest and life.deleted > answer.answered + self.grace:
                down = self.exporter_down.get(life.node, ())
                if not any(start <= answer.answered and end >= oldest for start, end in down):
                    missing += 1
        return missing

    def all_exporters_down(self, answer: Answer) -> bool:
        """Whether every pod of the Deployment at the question's time was on a node whose exporter was restarting
        (from its restart to 30 s after it served again): an answer that fails then has no figures to give."""
        lives = [self.membership.pods[key] for key in self.membership.by_deployment.get(answer.deployment, ())]
        members = [
            life
            for life in lives
            if life.created <= answer.answered + self.grace and life.deleted >= answer.asked - self.grace
        ]
        return bool(members) and all(
            any(
                start <= answer.answered and end >= answer.asked for start, end in self.exporter_down.get(life.node, ())
            )
            for life in members
        )

    def _example(self, answer: Answer, item: Any, key: tuple[str, str] | None) -> str:
        """What was served and what the truth was, for the report."""
        text = f"replica {answer.replica}, asked {answer.asked:.3f}, answered {answer.answered:.3f}, "
        text += f"Deployment {answer.deployment[0]}/{answer.deployment[1]}: served {json.dumps(item)[:300]}"
        life = self.membership.pods.get(key) if key else None
        if key is None or life is None:
            return text + "; no such pod of any GPU Deployment"
        text += f"; truth: pod of {life.deployment[1]} on node {life.node}, created {life.created:.3f}"
        text += f", deleted {life.deleted:.3f}" if life.deleted < math.inf else ", not deleted"
        second = timestamp_second(item.get("timestamp", "")) if isinstance(item.get("timestamp"), str) else None
        if second is not None:
            published = {s: utilization_tenths(*key, s) / 10 for s in (second - 1, second, second + 1)}
            text += f", published {published}"
        return text


async def check_answers(run: Run, checker: AnswerChecker, truth_url: str, done: asyncio.Event) -> None:
    """Once the measurement is over (`done`), parse and check every answer it timed, against the journal read to the
    end. Nothing of this runs while answers are timed: on the HPAs' event loop, parsing a 1,000-item answer or checking
    it held the loop for milliseconds, and any answer that arrived meanwhile was timed that much later."""
    await done.wait()
    last = max((answer.answered for answer, _ in run.unchecked), default=-math.inf)
    async with aiohttp.ClientSession() as session:
        await checker.membership.follow(session, truth_url)
        while last + checker.grace >= checker.membership.until:  # until the journal covers the grace after the last
            await asyncio.sleep(0.5)
            await checker.membership.follow(session, truth_url)
    began, cpu = time.perf_counter(), time.thread_time()
    while run.unchecked:
        answer, body = run.unchecked.popleft()
        if body is None:
            answer.exporters_down = checker.all_exporters_down(answer)
            continue
        items = answer_items(answer, body)
        if items is not None:
            checker.check(answer, items)
    checker.busy += time.perf_counter() - began
    checker.busy_cpu += time.thread_time() - cpu


def answer_items(answer: Answer, body: bytes) -> list[Any] | None:
    """The items of an answer's body, with its item count and the figures' ages set; None (the answer failed) when the
    body is not a list of items."""
    try:
        listed = json.loads(body)["items"]
        if not isinstance(listed, list):
            raise TypeError("items is not a list")
        stamps = [timestamp_second(item["timestamp"]) for item in listed]
    except (ValueError, KeyError, TypeError) as error:
        answer.status, answer.failure = 0, f"200 with a body that is not a MetricValueList: {error}"[:200]
        return None
    answer.items = len(listed)
    answer.ages = [answer.answered - second for second in stamps if second is not None]
    return listed


# ---- processes ----------------------------------------------------------------------------------------------------
def start_fleet(args: argparse.Namespace, workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """The simulated fleet, at `--fleet-nice` (default 10): its 2,000 exporters and the API stand-in stand for other
    machines, whose CPU the adapters never share in a cluster. On this machine they would otherwise take turns with
    the adapters for its two cores, and the adapters' answers would wait for the simulator's time slices."""
    ready = workdir / "fleet.json"
    process = subprocess.Popen(
        [
            "nice",
            f"-n{args.fleet_nice}",
            sys.executable,
            str(REPO / "bench" / "fleet_cluster.py"),
            f"--ready={ready}",
            f"--nodes={args.nodes}",
            f"--gpu-pods={args.gpu_pods}",
            f"--other-pods={args.other_pods}",
            f"--churn={args.churn}",
            f"--port={args.port}",
            f"--interval={INTERVAL}",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return process, wait_for_ready_file(process, ready, "the simulated fleet")


@dataclass(eq=False)
class Target:
    """Where an HPA's question can go (a replica or the baseline server) and whether it is among the ready endpoints
    the HPAs ask."""

    index: int
    url: str
    session: aiohttp.ClientSession | None = None
    ready: bool = True


@dataclass(eq=False)
class Replica:
    process: subprocess.Popen[bytes]
    url: str
    command: list[str]
    log: Path
    index: int
    target: Target
    restarting: bool = False
    cpu_base: float = 0.0  # the current process's CPU seconds when measuring began (0 for a process started later)
    cpu_spent: float = 0.0  # CPU seconds of earlier processes of this replica while measuring

    def relaunch(self) -> None:
        self.process = spawn_adapter(self.command, self.log)


def spawn_adapter(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PULSE_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(command, cwd=REPO, env=env, stderr=log.open("ab"))


def start_replicas(args: argparse.Namespace, workdir: Path, kube: str) -> tuple[list[Replica], ssl.SSLContext]:
    """The adapter replicas, each on port 0; returns once each says where it serves (its log's "serving" line)."""
    credentials = AdapterCredentials.write(workdir, kube)
    flags = [f"--exporter-port={args.port}", f"--exporter-refresh={args.refresh}", *args.adapter_flag]
    command = [sys.executable, "-m", "adapter.cli", *credentials.flags(), *flags]
    cores = sorted(os.sched_getaffinity(0))
    started = []
    for index in range(args.replicas):
        log = workdir / f"adapter-{index}.log"
        before = log.stat().st_size if log.exists() else 0
        # --own-cores: a core of its own (util-linux taskset execs the adapter: the pid is the adapter's)
        own = ["taskset", "--cpu-list", str(cores[index % len(cores)]), *command] if args.own_cores else command
        started.append((index, log, before, own, spawn_adapter(own, log)))
    replicas = []
    for index, log, before, launched, process in started:
        url = served_url(process, log, before)
        # relaunched, a replica comes back on its address, as a restarted pod behind its Service
        again = [f"--listen={url.removeprefix('https://')}" if a.startswith("--listen=") else a for a in launched]
        replicas.append(Replica(process, url, again, log, index, Target(index, url)))
    return replicas, credentials.client_ssl()


async def wait_ready(replicas: list[Replica], context: ssl.SSLContext) -> None:
    for replica in replicas:
        await wait_adapter_ready(replica.process, replica.url, context)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def memory(pid: int) -> dict[str, float]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- churn events -------------------------------------------------------------------------------------------------
@dataclass
class Events:
    """What happened during the measurement, for the summary: (wall-clock time, what)."""

    log: list[tuple[float, str]] = field(default_factory=list)
    restarts: list[tuple[int, float, float]] = field(default_factory=list)  # replica, stopped at, ready again at

    def note(self, what: str) -> None:
        self.log.append((time.time(), what))
        print(f"  event: {what}", flush=True)


def _reap(process: subprocess.Popen[bytes], timeout: float) -> float:
    """Wait for `process` to exit (killing it after `timeout`) and return the CPU seconds it used in all."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            process.kill()
            deadline = math.inf
        time.sleep(0.05)


async def restart_replica(replica: Replica, context: ssl.SSLContext, events: Events) -> None:
    """Stop the replica as Kubernetes stops a pod (it leaves the Service's ready endpoints, then gets SIGTERM), start
    it again on the same address, and let the HPAs ask it again once its /readyz says ready."""
    replica.restarting = True
    replica.target.ready = False
    stopped = time.time()
    events.note(f"replica {replica.index}: SIGTERM (out of the ready endpoints)")
    replica.process.send_signal(signal.SIGTERM)
    used = await asyncio.get_running_loop().run_in_executor(None, _reap, replica.process, 30.0)
    replica.cpu_spent += used - replica.cpu_base
    events.note(f"replica {replica.index}: exited ({replica.process.returncode}) after {time.time() - stopped:.1f} s")
    replica.cpu_base = 0.0
    replica.relaunch()
    await wait_adapter_ready(replica.process, replica.url, context)
    replica.target.ready = True
    replica.restarting = False
    events.restarts.append((replica.index, stopped, time.time()))
    events.note(f"replica {replica.index}: ready again, {time.time() - stopped:.1f} s after SIGTERM")


async def follow_readiness(replicas: list[Replica], context: ssl.SSLContext) -> None:
    """Each replica's /readyz every half second: the HPAs ask only ready replicas (as kube-aggregator uses only the
    Service's ready endpoints). A restarting replica is left to `restart_replica`."""
    timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            for replica in replicas:
                if replica.restarting:
                    continue
                try:
                    async with session.get(f"{replica.url}/readyz", ssl=context) as response:
                        ready = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ready = False
                if not replica.restarting:
                    replica.target.ready = ready
            await asyncio.sleep(0.5)


async def restart_exporters(
    info: dict[str, Any], nodes: list[int], seconds: float, checker: AnswerChecker, events: Events
) -> None:
    """Restart the exporters of `nodes`, one a second: each closes its connections and refuses new ones for `seconds`.
    Their pods are not counted missing from then until 30 s after they serve again (the adapter reconnects)."""
    async with aiohttp.ClientSession() as session:
        for node in nodes:
            async with session.post(f"{info['control']}/restart", params={"node": node, "seconds": seconds}) as reply:
                reply.raise_for_status()
            now = time.time()
            checker.exporter_down[node].append((now - 1, now + seconds + 30))
            events.note(f"exporter of node {node} restarts: refusing connections for {seconds:g} s")
            await asyncio.sleep(1.0)


async def new_namespace(info: dict[str, Any], pods: int, events: Events) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{info['truth']}/namespaces", params={"pods": pods}) as reply,
    ):
        deployment: dict[str, Any] = await reply.json()
    events.note(f"namespace {deployment['namespace']} appears with Deployment {deployment['name']} of {pods} pods")
    return deployment


# ---- the HPAs -----------------------------------------------------------------------------------------------------
async def hpa(
    deployment: dict[str, Any],
    targets: list[Target],
    run: Run,
    rng: random.Random,
    context: ssl.SSLContext,
    baseline: bool = False,
    first_within: float = HPA_PERIOD,
) -> None:
    """One HPA: its Deployment's question every HPA_PERIOD (the first within `first_within` s), of a ready target
    picked at random. A `baseline` HPA asks the baseline server the same way and records only its answer time. Answers
    are only timed and parsed here; their check comes later (`check_answers`)."""
    path = (
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{deployment['namespace']}/pods/*/gpu_utilization"
        f"?labelSelector=app%3D{deployment['name']}"
    )
    key = (str(deployment["namespace"]), str(deployment["name"]))
    await asyncio.sleep(rng.uniform(0, first_within))
    next_at = time.monotonic()
    while True:
        target = rng.choice([t for t in targets if t.ready] or targets)
        assert target.session is not None
        asked = time.time()
        started = time.perf_counter()
        status, body, failure = 0, b"", ""
        try:
            async with target.session.get(target.url + path, ssl=context) as response:
                body = await response.read()
                status = response.status
            seconds = time.perf_counter() - started
            answered = time.time()
            if status != 200:
                failure = f"{status} {body[:160].decode(errors='replace')}"
        except (aiohttp.ClientError, TimeoutError) as error:
            seconds = time.perf_counter() - started
            answered = time.time()
            failure = f"{type(error).__name__}: {error}"[:200]
        if run.measuring and baseline:
            run.baseline.append(seconds)
        elif run.measuring:
            answer = Answer(int(deployment["pods"]), seconds, status, 0, [], target.index, asked, answered, key)
            answer.failure = failure
            run.answers.append(answer)
            run.unchecked.append((answer, body if status == 200 else None))
        next_at += HPA_PERIOD
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


# the replicas' own histograms the summary reads: their request durations (custom.metrics.k8s.io answers), how late
# their event loops ran a timer, and their garbage collections' pauses by generation
HISTOGRAMS = {
    "requests": ("gpu_pulse_adapter_request_duration_seconds", {"group": "custom.metrics.k8s.io"}),
    "loop_lag": ("gpu_pulse_adapter_event_loop_lag_seconds", {}),
    "gc0": ("gpu_pulse_adapter_gc_pause_seconds", {"generation": "0"}),
    "gc1": ("gpu_pulse_adapter_gc_pause_seconds", {"generation": "1"}),
    "gc2": ("gpu_pulse_adapter_gc_pause_seconds", {"generation": "2"}),
}
Buckets = dict[float, float]  # upper bound -> count, and SUM -> the sum of the observations
SUM = -1.0  # no bucket has a negative bound


async def server_buckets(replicas: list[Replica], context: ssl.SSLContext) -> list[dict[str, Buckets]]:
    """Each replica's own HISTOGRAMS: name -> buckets (and the sum under SUM)."""
    found: list[dict[str, Buckets]] = []
    async with aiohttp.ClientSession() as session:
        for replica in replicas:
            async with session.get(f"{replica.url}/metrics", ssl=context) as response:
                found.append(histograms_of(await response.text()))
    return found


def histograms_of(text: str) -> dict[str, Buckets]:
    """HISTOGRAMS as one replica's /metrics exposition `text` gives them."""
    histograms: dict[str, Buckets] = {name: defaultdict(float) for name in HISTOGRAMS}
    for family in text_string_to_metric_families(text):
        for name, (metric, labels) in HISTOGRAMS.items():
            if family.name != metric:
                continue
            for sample in family.samples:
                if any(sample.labels.get(k) != v for k, v in labels.items()):
                    continue
                if sample.name.endswith("_bucket"):
                    histograms[name][float(sample.labels["le"])] += sample.value
                elif sample.name.endswith("_sum"):
                    histograms[name][SUM] += sample.value
    return histograms


def quantile_of(buckets: Buckets, q: float) -> float:
    """The upper bound of the bucket holding quantile `q` (an upper estimate; NaN without observations)."""
    ordered = sorted((le, count) for le, count in buckets.items() if le != SUM)
    total = ordered[-1][1] if ordered else 0.0
    if not total:
        return math.nan
    return next(le for le, count in ordered if count >= q * total)


async def keep_metrics(replicas: list[Replica], context: ssl.SSLContext, workdir: Path) -> None:
    """Each replica's /metrics at the end of the run, as adapter-N.metrics in the kept work directory."""
    async with aiohttp.ClientSession() as session:
        for index, replica in enumerate(replicas):
            async with session.get(f"{replica.url}/metrics", ssl=context) as response:
                (workdir / f"adapter-{index}.metrics").write_bytes(await response.read())


async def fleet_stats(control: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{control}/stats") as response:
        stats: dict[str, Any] = await response.json()
        return stats


def large_size(deployments: list[dict[str, Any]]) -> int:
    """The size of the Deployments whose answers are timed as the large ones: 1,000 pods, or in a smaller fleet (whose
    sizes fleet_cluster.deployment_sizes scales down) the largest there is."""
    return min(1000, max(int(d["pods"]) for d in deployments))


def ten_size(deployments: list[dict[str, Any]]) -> int:
    """The size of the Deployments whose answers are timed as the small ones: 10 pods, or the size nearest to it."""
    return min((int(d["pods"]) for d in deployments), key=lambda size: (abs(size - 10), size))


async def small_answer(replicas: list[Replica], context: ssl.SSLContext, deployments: list[dict[str, Any]]) -> bytes:
    """The body of an answer about a 10-pod Deployment (`ten_size`), for the baseline server to answer with."""
    ten = next(d for d in deployments if d["pods"] == ten_size(deployments))
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ten['namespace']}/pods/*/gpu_utilization"
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{replicas[0].url}{path}?labelSelector=app%3D{ten['name']}", ssl=context) as response,
    ):
        return await response.read()


def hpa_session() -> aiohttp.ClientSession:
    """The HPAs' client of one target, its connections kept open as kube-aggregator keeps them."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30))


def schedule_churn(
    args: argparse.Namespace,
    info: dict[str, Any],
    replicas: list[Replica],
    context: ssl.SSLContext,
    checker: AnswerChecker,
    events: Events,
    hpa_started: Callable[[dict[str, Any]], None],
) -> list[asyncio.Task[None]]:
    """The churn events of the measurement, at fixed fractions of it: a replica restart at 20%, exporter restarts from
    40% (one a second), a new namespace at 55% (its HPA asks within 2 s)."""
    rng = random.Random(11)

    async def later(fraction: float, work: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(fraction * args.duration)
        await work()

    async def exporters() -> None:
        nodes = range(int(info["nodes"]))  # every simulated node has GPU pods and an exporter
        chosen = rng.sample(nodes, min(len(nodes), args.exporter_restarts))
        await restart_exporters(info, chosen, args.exporter_down, checker, events)

    async def namespace() -> None:
        hpa_started(await new_namespace(info, args.new_namespace_pods, events))

    planned: list[Coroutine[Any, Any, None]] = []
    if args.restart_replica and replicas:
        planned.append(later(0.2, lambda: restart_replica(replicas[-1], context, events)))
    if args.restart_exporters and args.exporter_restarts > 0:
        planned.append(later(0.4, exporters))
    if args.new_namespace:
        planned.append(later(0.55, namespace))
    return [asyncio.create_task(work) for work in planned]


async def drive(
    args: argparse.Namespace,
    info: dict[str, Any],
    replicas: list[Replica],
    context: ssl.SSLContext,
    baseline_url: str,
) -> dict[str, Any]:
    rng = random.Random(7)
    run = Run()
    events = Events()
    checker = AnswerChecker(Membership(), args.grace)
    for replica in replicas:
        replica.target.session = hpa_session()
    targets = [replica.target for replica in replicas]
    floor = Target(-1, baseline_url, hpa_session())
    tasks = [asyncio.create_task(hpa(d, targets, run, rng, context)) for d in info["deployments"]]
    small = [d for d in info["deployments"] if d["pods"] <= 20]
    tasks += [
        asyncio.create_task(hpa(d, [floor], run, rng, context, baseline=True))
        for d in rng.sample(small, min(len(small), BASELINE_HPAS))
    ]

    def hpa_started(deployment: dict[str, Any]) -> None:
        tasks.append(asyncio.create_task(hpa(deployment, targets, run, rng, context, first_within=2.0)))

    helpers = [asyncio.create_task(follow_readiness(replicas, context))]
    checked = asyncio.Event()
    checking = asyncio.create_task(check_answers(run, checker, info["truth"], checked))
    churn: list[asyncio.Task[None]] = []
    try:
        print(f"warming up for one HPA period ({HPA_PERIOD:g} s) and {args.warmup:g} s more ...", flush=True)
        await asyncio.sleep(HPA_PERIOD + args.warmup)
        before = await fleet_stats(info["control"])
        buckets_before = await server_buckets(replicas, context)
        for replica in replicas:
            replica.cpu_base, replica.cpu_spent = cpu_seconds(replica.process.pid), 0.0
        started, started_wall = time.monotonic(), time.time()
        run.measuring = True
        print(f"measuring for {args.duration:g} s ...", flush=True)
        churn = schedule_churn(args, info, replicas, context, checker, events, hpa_started)
        await asyncio.sleep(args.duration)
        run.measuring = False
        if churn:  # a restart still under way finishes before the figures are taken
            _, late = await asyncio.wait(churn, timeout=300)
            for task in late:
                task.cancel()
                events.note("a churn event did not finish within 300 s of the measurement's end")
        elapsed = time.monotonic() - started
        cpu = [r.cpu_spent + cpu_seconds(r.process.pid) - r.cpu_base for r in replicas]
        after = await fleet_stats(info["control"])
        buckets_after = await server_buckets(replicas, context)
        memories = [memory(r.process.pid) for r in replicas]
        if args.keep is not None:
            await keep_metrics(replicas, context, args.keep)
    finally:
        for task in tasks + helpers + churn:
            task.cancel()
        await asyncio.gather(*tasks, *helpers, *churn, return_exceptions=True)
        for session in [t.session for t in targets] + [floor.session]:
            if session is not None:
                await session.close()
    checked.set()
    await asyncio.wait_for(checking, timeout=120)
    restarted = {index for index, *_ in events.restarts}
    windowed: dict[str, Buckets] = {name: defaultdict(float) for name in HISTOGRAMS}
    for index, (counts_before, counts_after) in enumerate(zip(buckets_before, buckets_after, strict=True)):
        for name, buckets in counts_after.items():
            for le, count in buckets.items():  # a restarted replica's histograms began anew
                windowed[name][le] += count - (0.0 if index in restarted else counts_before[name].get(le, 0.0))
    server = {le: count for le, count in windowed["requests"].items() if le != SUM}
    window = after["monotonic"] - before["monotonic"]
    requests = [(a - b) * 60 / window for a, b in zip(after["requests"], before["requests"], strict=True)]
    documents = [(a - b) * 60 / window for a, b in zip(after["documents"], before["documents"], strict=True)]
    return {
        "answers": run.answers,
        "baseline": run.baseline,
        "cpu": [seconds / elapsed for seconds in cpu],
        "memory": memories,
        "requests_per_minute": requests,
        "documents_per_minute": documents,
        "streams": after["streams"],
        "server": dict(sorted(server.items())),
        "stalls": {name: buckets for name, buckets in windowed.items() if name != "requests"},
        "checker": checker,
        "events": events,
        "exporter_restarts": after.get("restarts", []),
        "started": started_wall,
        "restarted_replicas": sorted(restarted),
    }


# ---- the summary --------------------------------------------------------------------------------------------------
def stall_figures(stalls: dict[str, Buckets]) -> dict[str, dict[str, float]]:
    """Count, total seconds, p50 and p99 (bucket upper bounds) of each stall histogram over the measurement."""
    figures = {}
    for name, buckets in stalls.items():
        count = buckets.get(math.inf, 0.0)
        figures[name] = {
            "count": count,
            "seconds": buckets.get(SUM, 0.0),
            "p50_s": quantile_of(buckets, 0.5),
            "p99_s": quantile_of(buckets, 0.99),
        }
    return figures


def spread(values_ms: list[float]) -> dict[str, float | int]:
    return {"p50_ms": percentile(values_ms, 0.5), "p99_ms": percentile(values_ms, 0.99), "answers": len(values_ms)}


def in_restart(answer: Answer, restarts: list[tuple[int, float, float]]) -> bool:
    """Whether the answer was asked of a replica between its SIGTERM (less a second) and 2 s after it was ready."""
    return any(
        index == answer.replica and stopped - 1 <= answer.asked <= ready + 2 for index, stopped, ready in restarts
    )


FRESHLY_READY = 30.0  # seconds after a restarted replica is ready in which its answers are also shown apart


SLOWEST_SHOWN = 5  # the slowest answers of the largest Deployments listed, with when and which replica


def slowest(
    answers: list[Answer], started: float, restarts: list[tuple[int, float, float]], shown: int
) -> list[dict[str, Any]]:
    """The `shown` slowest answers: their time, when they were asked (seconds into the measurement), the replica, and
    whether that replica had come back from a restart less than FRESHLY_READY seconds before: what a p99 over a few
    hundred answers (its second or third slowest) rests on."""
    return [
        {
            "ms": a.seconds * 1000,
            "at_s": a.asked - started,
            "replica": a.replica,
            "freshly_ready": freshly_ready(a, restarts),
        }
        for a in sorted(answers, key=lambda a: -a.seconds)[:shown]
    ]


def freshly_ready(answer: Answer, restarts: list[tuple[int, float, float]]) -> bool:
    """Whether the answer was asked of a restarted replica within FRESHLY_READY s after it said it was ready."""
    return any(
        index == answer.replica and ready <= answer.asked <= ready + FRESHLY_READY for index, _, ready in restarts
    )


def after_restart(answers: list[Answer], restarts: list[tuple[int, float, float]]) -> dict[str, Any]:
    """The answers of restarted replicas in their first FRESHLY_READY s of readiness, against all others: their
    times, failures and pods left out (what a restart costs the HPAs, beyond the answers it makes fail outright)."""

    def figures(group: list[Answer]) -> dict[str, Any]:
        ok = [a.seconds * 1000 for a in group if a.status == 200]
        return {
            **spread(ok),
            "p90_ms": percentile(ok, 0.9),
            "failed": sum(a.status != 200 for a in group),
            "missing_items": sum(a.missing for a in group),
        }

    fresh = [a for a in answers if freshly_ready(a, restarts)]
    rest = [a for a in answers if not freshly_ready(a, restarts) and not in_restart(a, restarts)]
    return {"seconds": FRESHLY_READY, "freshly_ready": figures(fresh), "others": figures(rest)}


def figures_of(args: argparse.Namespace, info: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The run's figures, for the summary table and `--json`."""
    answers: list[Answer] = measured["answers"]
    events: Events = measured["events"]
    checker: AnswerChecker = measured["checker"]
    ok = [a for a in answers if a.status == 200]
    failed = [a for a in answers if a.status != 200]
    failed_in_restart = [a for a in failed if in_restart(a, events.restarts)]
    failed_exporters_down = [a for a in failed if a.exporters_down and a not in failed_in_restart]
    failed_other = [a for a in failed if a not in failed_in_restart and a not in failed_exporters_down]
    floor = [seconds * 1000 for seconds in measured["baseline"]]
    large_pods, ten_pods = large_size(info["deployments"]), ten_size(info["deployments"])
    ten = [a.seconds * 1000 for a in ok if a.pods == ten_pods]
    requests, documents = measured["requests_per_minute"], measured["documents_per_minute"]
    started = measured["started"]
    return {
        "nodes": info["nodes"],
        "gpu_pods": info["gpu_pods"],
        "pods_cached": info["gpu_pods"] + info["other_pods"] + info["nodes"],
        "replicas": args.replicas,
        "own_cores": args.own_cores,
        "duration_s": args.duration,
        "answers": len(answers),
        "answers_large": {"pods": large_pods, **spread([a.seconds * 1000 for a in ok if a.pods >= large_pods])},
        "slowest_large": slowest(
            [a for a in ok if a.pods >= large_pods], started, measured["events"].restarts, shown=SLOWEST_SHOWN
        ),
        "answers_ten": {"pods": ten_pods, **spread(ten)},
        "answers_2_to_20_pods": spread([a.seconds * 1000 for a in ok if 2 <= a.pods <= 20]),
        "baseline": spread(floor),
        "ten_pod_p99_over_baseline_p99": percentile(ten, 0.99) / percentile(floor, 0.99),
        "cpu_cores_per_replica": measured["cpu"],
        "rss_mib_per_replica": [m["VmRSS"] for m in measured["memory"]],
        "peak_rss_mib_per_replica": [m["VmHWM"] for m in measured["memory"]],
        "restarted_replicas": measured["restarted_replicas"],
        "figure_age_s": {"p99": percentile([x for a in ok for x in a.ages], 0.99), "max_age": MAX_AGE},
        "requests_per_exporter_per_minute": {"mean": statistics.fmean(requests), "max": max(requests)},
        "documents_per_exporter_per_minute": {"mean": statistics.fmean(documents), "max": max(documents)},
        "open_streams": measured["streams"],
        "failed": len(failed_other),
        "after_replica_restart": after_restart(answers, events.restarts),
        "failed_during_replica_restart": len(failed_in_restart),
        "failed_all_exporters_restarting": len(failed_exporters_down),
        "failure_examples": [
            f"replica {a.replica}, {a.deployment[0]}/{a.deployment[1]} asked at +{a.asked - started:.2f} s: {a.failure}"
            for a in (failed_other + failed_in_restart + failed_exporters_down)[:8]
        ],
        "checked": {
            "answers": checker.answers,
            "items": checker.items,
            "grace_s": checker.grace,
            "seconds": checker.busy,
            "cpu_seconds": checker.busy_cpu,
        },
        "wrong_answers": checker.wrong_answers,
        "wrong_items_by_kind": dict(checker.wrong),
        "wrong_examples": dict(checker.examples),
        "missing_items": checker.missing,
        "answers_with_missing": checker.answers_missing,
        "pods_served": sum(a.items for a in ok),
        "pods_asked": sum(a.pods for a in ok),
        "events": [{"at_s": round(at - started, 2), "what": what} for at, what in events.log],
        "exporter_restarts": [
            {
                "node": node,
                "down_at_s": round(down - started, 2),
                "up_at_s": None if up is None else round(up - started, 2),
            }
            for node, down, up in measured["exporter_restarts"]
        ],
        "server_histogram": {str(le): count for le, count in measured["server"].items()},
        "stalls": stall_figures(measured["stalls"]),
    }


def summary(args: argparse.Namespace, figures: dict[str, Any]) -> bool:
    rows: list[tuple[str, str, str, str, bool | None]] = []

    def row(what: str, value: float, unit: str, goal: float, stretch: float) -> None:
        rows.append((what, f"{value:.2f} {unit}", f"< {goal:g}", f"< {stretch:g}", value < goal))

    large, ten, floor = figures["answers_large"], figures["answers_ten"], figures["baseline"]
    row(f"HPA query p99, {large['pods']:,}-pod Deployments ({large['answers']} answers)", large["p99_ms"], "ms", 20, 5)
    ratio = figures["ten_pod_p99_over_baseline_p99"]
    rows.append(
        (
            f"HPA query p99, {ten['pods']}-pod Deployments ({ten['answers']} answers), over the floor",
            f"{ten['p99_ms']:.2f} ms = {ratio:.2f} x",
            "< 2 x",
            "< 1.25 x",
            ratio < 2,
        )
    )
    rows.append(
        (
            f"  the same client's p99 of a bare TLS server ({floor['answers']} answers)",
            f"{floor['p99_ms']:.2f} ms",
            "(the floor here)",
            "",
            None,
        )
    )
    row("adapter CPU, busiest replica", max(figures["cpu_cores_per_replica"]), "cores", 1, 0.25)
    rss = max(figures["rss_mib_per_replica"])
    row(f"adapter RSS, {figures['pods_cached']:,} pods cached", rss, "MiB", 400, 200)
    age_goal, age_stretch = MAX_AGE, INTERVAL + 1
    age = figures["figure_age_s"]["p99"]
    rows.append(
        (
            "figure age p99 (whole-second stamps)",
            f"{age:.2f} s",
            f"<= {age_goal:g}",
            f"<= {age_stretch:g}",
            age <= age_goal,
        )
    )
    requests = figures["requests_per_exporter_per_minute"]
    bound = 2.0 * args.replicas  # a stream each, renewed about every 5 minutes, plus reconnects for new namespaces
    rows.append(
        (
            f"/pods requests per exporter per minute, {args.replicas} replicas",
            f"mean {requests['mean']:.2f}, max {requests['max']:.1f}",
            f"bounded: mean <= {bound:g}",
            "independent of replicas",
            requests["mean"] <= bound,
        )
    )
    documents = figures["documents_per_exporter_per_minute"]
    rows.append(("/pods documents per exporter per minute", f"mean {documents['mean']:.1f}", "(stated)", "", None))
    checked = figures["checked"]
    wrong = figures["wrong_answers"]
    rows.append(
        (
            "wrong answers (against the simulator's truth)",
            f"{wrong} of {checked['answers']} ({sum(figures['wrong_items_by_kind'].values())} items)",
            "0",
            "",
            wrong == 0 and checked["answers"] > 0,
        )
    )
    rows.append(
        (
            "pods left out although fresh figures existed",
            f"{figures['missing_items']:,} in {figures['answers_with_missing']} answers",
            "(stated)",
            "",
            None,
        )
    )
    rows.append(
        ("answers that failed", f"{figures['failed']} of {figures['answers']}", "0", "", figures["failed"] == 0)
    )
    rows.append(
        ("  failed while a replica restarted", f"{figures['failed_during_replica_restart']}", "(stated)", "", None)
    )
    rows.append(
        (
            "  failed: every pod's exporter restarting",
            f"{figures['failed_all_exporters_restarting']}",
            "(stated)",
            "",
            None,
        )
    )
    rows.append(
        ("pods served / pods asked", f"{figures['pods_served']:,} / {figures['pods_asked']:,}", "(stated)", "", None)
    )
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    print()
    header = ("what", "measured", "goal", "stretch")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " | met")
    print("-+-".join("-" * w for w in widths) + "-+----")
    for what, value, goal, stretch, met in rows:
        flag = "" if met is None else ("yes" if met else "NO")
        print(
            " | ".join(str(c).ljust(w) for c, w in zip((what, value, goal, stretch), widths, strict=True))
            + f" | {flag}"
        )
    print()
    details(args, figures)
    return all(met is not False for *_, met in rows)


def details(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """What the table rests on: answers behind each percentile, churn events, wrong items by kind with examples."""
    for what in ("answers_large", "answers_ten", "answers_2_to_20_pods", "baseline"):
        spread_of = figures[what]
        if spread_of["answers"] < FEW:
            print(f"WARNING: {what}: the p99 rests on {spread_of['answers']} answers (< {FEW}): it is nearly a maximum")
    rss_each = ", ".join(f"{m:.1f}" for m in figures["rss_mib_per_replica"])
    peak_each = ", ".join(f"{m:.1f}" for m in figures["peak_rss_mib_per_replica"])
    large, ten, small = figures["answers_large"], figures["answers_ten"], figures["answers_2_to_20_pods"]
    floor = figures["baseline"]
    slow = "; ".join(
        f"{a['ms']:.1f} ms at +{a['at_s']:.0f} s, replica {a['replica']}"
        + (" (freshly ready)" if a["freshly_ready"] else "")
        for a in figures["slowest_large"]
    )
    print(f"the slowest {large['pods']:,}-pod answers: {slow}")
    print(
        f"{figures['answers']} HPA answers in {args.duration:g} s; {large['pods']:,}-pod p50 {large['p50_ms']:.2f} ms "
        f"({large['answers']} answers); {ten['pods']}-pod p50 {ten['p50_ms']:.2f} ms ({ten['answers']}); 2-20-pod p50 "
        f"{small['p50_ms']:.2f} ms, p99 {small['p99_ms']:.2f} ms ({small['answers']}); CPU per replica "
        f"{', '.join(f'{c:.3f}' for c in figures['cpu_cores_per_replica'])} cores; RSS per replica "
        f"{rss_each} MiB (peak {peak_each}); open streams {figures['open_streams']}"
    )
    print(
        f"baseline (a bare TLS server answering a canned 10-pod answer, {floor['answers']} answers through the same "
        f"client in the same minutes): p50 {floor['p50_ms']:.2f} ms, p99 {floor['p99_ms']:.2f} ms"
    )
    server = {float(le): count for le, count in figures["server_histogram"].items()}
    total = server.get(math.inf, 0.0)
    if total:
        within = ", ".join(f"<= {le * 1000:g} ms: {count / total:.1%}" for le, count in server.items() if le <= 0.1)
        print(f"server side (the replicas' own histogram, {total:.0f} answers): {within}")
    stalls = figures["stalls"]
    lag = stalls["loop_lag"]
    pauses = ", ".join(
        f"generation {g[-1]}: {stalls[g]['count']:.0f} taking {stalls[g]['seconds']:.2f} s, "
        f"p99 <= {stalls[g]['p99_s'] * 1000:g} ms"
        for g in ("gc0", "gc1", "gc2")
    )
    print(
        "waits outside the handlers, both replicas over the measurement: event loop lag "
        f"p50 <= {lag['p50_s'] * 1000:g} ms, p99 <= {lag['p99_s'] * 1000:g} ms ({lag['count']:.0f} timers); "
        f"garbage collections {pauses}"
    )
    checked = figures["checked"]
    print(
        f"checked {checked['answers']} answers, {checked['items']:,} items, against the simulator's truth (grace "
        f"{checked['grace_s']:g} s for pods created or deleted around a question, max age {MAX_AGE:g} s + 1 s), "
        f"after the measurement: {checked['seconds']:.2f} s ({checked['cpu_seconds']:.2f} s of CPU) of parsing and "
        "checking"
    )
    for kind, count in sorted(figures["wrong_items_by_kind"].items()):
        print(f"  wrong, {kind} ({WRONG_KINDS[kind]}): {count} items")
        for example in figures["wrong_examples"].get(kind, []):
            print(f"    e.g. {example}")
    split = figures["after_replica_restart"]
    fresh = f"asked of a restarted replica in its first {split['seconds']:g} s of readiness"
    for what, group in ((fresh, split["freshly_ready"]), ("asked outside any restart", split["others"])):
        print(
            f"answers {what}: {group['answers']} answered, p50 {group['p50_ms']:.2f} ms, p90 {group['p90_ms']:.2f} ms, "
            f"p99 {group['p99_ms']:.2f} ms; {group['failed']} failed; {group['missing_items']} pods left out"
        )
    for example in figures["failure_examples"]:
        print(f"  failed: {example}")
    print("churn during the measurement (seconds after it began):")
    for event in figures["events"]:
        print(f"  +{event['at_s']:7.2f} s  {event['what']}")
    for restart in figures["exporter_restarts"]:
        print(
            f"  exporter of node {restart['node']}: down at +{restart['down_at_s']} s, "
            f"serving again at +{restart['up_at_s']} s"
        )
    print(f"  and {args.churn:g} pods replaced a second throughout")


def write_json(path: Path, figures: dict[str, Any]) -> None:
    """The run's figures as JSON (NaN as null), for a script that runs the benchmark at several sizes."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    path.write_text(json.dumps(clean(figures), indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds measured, after warm-up")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds after the first HPA period")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        help="the adapters' --exporter-refresh (2: docs/install.md's sizing was measured at it; their default is 1)",
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpu-pods", type=int, default=20_000)
    parser.add_argument("--other-pods", type=int, default=30_000)
    parser.add_argument("--churn", type=float, default=4.0, help="pods replaced a second")
    parser.add_argument("--port", type=int, default=9400, help="the exporters' port on each node's address")
    parser.add_argument(
        "--fleet-nice", type=int, default=10, help="the simulated fleet's niceness (0: it competes with the adapters)"
    )
    parser.add_argument("--adapter-flag", action="append", default=[], help="another flag for the adapters")
    parser.add_argument(
        "--own-cores",
        action="store_true",
        help="each replica on a core of its own, as the chart's anti-affinity puts replicas on nodes of their own (the "
        "fleet, the HPAs and the baseline server keep every core): a replica starting again does not take the serving "
        "one's core",
    )
    parser.add_argument(
        "--keep", type=Path, help="keep the work directory here (logs, certificates, each replica's final /metrics)"
    )
    parser.add_argument("--json", type=Path, help="write the run's figures here as JSON")
    parser.add_argument(
        "--grace",
        type=float,
        default=2.0,
        help="seconds around a question in which a pod's creation or deletion may "
        "not have reached the adapter's pod cache (neither answer counts wrong)",
    )
    parser.add_argument(
        "--restart-replica",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop the last replica (SIGTERM) at 20%% of the measurement and start it again",
    )
    parser.add_argument(
        "--restart-exporters",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restart --exporter-restarts nodes' exporters from 40%% of the measurement, one a second",
    )
    parser.add_argument("--exporter-restarts", type=int, default=10, help="how many nodes' exporters restart")
    parser.add_argument("--exporter-down", type=float, default=8.0, help="seconds a restarting exporter refuses")
    parser.add_argument(
        "--new-namespace",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a new namespace with a new Deployment (and its HPA) at 55%% of the measurement",
    )
    parser.add_argument("--new-namespace-pods", type=int, default=4)
    args = parser.parse_args()
    processes: list[subprocess.Popen[bytes]] = []
    replicas: list[Replica] = []
    with tempfile.TemporaryDirectory(prefix="gpu-pulse-fleet-") as tmp:
        workdir = Path(tmp) if args.keep is None else args.keep
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            print(
                f"starting the fleet: {args.nodes} GPU nodes, {args.gpu_pods} GPU pods, {args.other_pods} others ...",
                flush=True,
            )
            fleet, info = start_fleet(args, workdir)
            processes.append(fleet)
            own = ", each on a core of its own" if args.own_cores else ", sharing every core"
            print(f"starting {args.replicas} adapter replicas{own} ...", flush=True)
            replicas, context = start_replicas(args, workdir, info["kube"])
            asyncio.run(wait_ready(replicas, context))
            body = asyncio.run(small_answer(replicas, context, info["deployments"]))
            baseline, baseline_url = start_baseline_server(body, workdir / "serving.crt", workdir / "serving.key")
            processes.append(baseline)
            measured = asyncio.run(drive(args, info, replicas, context, baseline_url))
        except SystemExit as failure:
            for log in sorted(workdir.glob("adapter-*.log")):
                sys.stderr.write(f"--- {log.name}\n{log.read_text()[-3000:]}\n")
            stop([r.process for r in replicas] + processes)
            print(f"fleet: {failure}", file=sys.stderr)
            sys.exit(2)
        finally:
            stop([r.process for r in replicas] + processes)  # the replicas' processes of now (one may be new)
        for log in sorted(workdir.glob("adapter-*.log")):
            text = log.read_text()
            if text.strip():
                print(f"--- {log.name} (last lines)\n" + "\n".join(text.splitlines()[-5:]))
    figures = figures_of(args, info, measured)
    met = summary(args, figures)
    if args.json is not None:
        write_json(args.json, figures)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
