"""Scenarios as data: the built-ins, files, derived identities, device ids for the kubelet, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulation import BUILTIN_SCENARIOS, ScenarioError, Simulator, build_scenario, load_scenario

MINIMAL: dict[str, Any] = {
    "gpus": [{"model": "H100-SXM5-80GB"}, {"model": "A100-SXM4-40GB", "mig": [{"profile": "3g.20gb"}]}],
    "processes": [{"pid": 10, "gpu": 0, "memory_mib": 100}, {"pid": 11, "gpu": 1, "mig": 0, "memory_mib": 50}],
    "pods": [
        {"namespace": "a", "name": "whole", "containers": [{"name": "c", "gpus": [{"gpu": 0}], "pids": [10]}]},
        {"namespace": "a", "name": "mig", "containers": [{"name": "c", "gpus": [{"gpu": 1, "mig": 0}], "pids": [11]}]},
    ],
}


@pytest.mark.parametrize("name", BUILTIN_SCENARIOS)
def test_every_builtin_loads_with_complete_identities(name: str) -> None:
    s = load_scenario(name)
    assert s.name == name and s.gpus
    for g in s.gpus:
        assert g.uuid and g.serial and g.pci_bus_id
        for m in g.mig or ():
            assert m.uuid and m.uuid.startswith("MIG-") and m.gpu_instance_id is not None
    for pod in s.pods:
        assert pod.uid
        for c in pod.containers:
            assert c.id and len(c.id) == 64
    Simulator(s)  # and it runs


def test_loading_is_deterministic_and_the_seed_matters() -> None:
    assert load_scenario("shared") == load_scenario("shared")
    assert load_scenario("shared", seed=5) == load_scenario("shared", seed=5)
    a, b = load_scenario("shared", seed=5), load_scenario("shared", seed=6)
    assert a.seed == 5 and b.seed == 6
    assert {g.uuid for g in a.gpus}.isdisjoint({g.uuid for g in b.gpus})
    assert {p.uid for p in a.pods}.isdisjoint({p.uid for p in b.pods})


def test_device_ids_the_kubelet_would_report() -> None:
    s = load_scenario("a100-mig")
    devices = {p.ref: p.containers[0].devices for p in s.pods}
    mig = {m.index: m for m in s.gpus[0].mig or ()}
    (finetune,) = devices["ml/finetune-0"]
    assert finetune.resource_name == f"nvidia.com/mig-{mig[0].profile}" == "nvidia.com/mig-3g.20gb"
    assert finetune.device_ids == (mig[0].uuid,)
    (single,) = devices["research/sweep-a"]  # single strategy: plain nvidia.com/gpu, still the MIG UUID
    assert single.resource_name == "nvidia.com/gpu"
    assert single.device_ids[0].startswith("MIG-")

    shared = load_scenario("shared")
    gpu0 = shared.gpus[0].uuid
    ids = sorted(d for p in shared.pods for c in p.containers for dev in c.devices for d in dev.device_ids)
    assert [f"{gpu0}::{n}" for n in range(4)] == [i for i in ids if i.startswith(f"{gpu0}::")]
    llm = next(p for p in shared.pods if p.name == "llm-api-0")
    assert [c.sidecar for c in llm.containers] == [True, False]
    assert llm.containers[0].devices == ()

    h100 = load_scenario("h100x8")
    trainer = next(p for p in h100.pods if p.name == "llm-pretrain-0").containers[0]
    assert trainer.devices[0].device_ids == tuple(g.uuid for g in h100.gpus[:4])
    assert h100.pod_of_pid(41003) is not None and h100.pod_of_pid(41003)[0].name == "llm-pretrain-0"  # type: ignore[index]


def test_explicit_device_ids_are_kept_for_other_formats() -> None:
    data = json.loads(json.dumps(MINIMAL))
    data["pods"][0]["containers"][0]["devices"] = [{"resource_name": "nvidia.com/gpu", "device_ids": ["nvidia0"]}]
    s = build_scenario(data)
    assert s.pods[0].containers[0].devices[0].device_ids == ("nvidia0",)


def test_yaml_and_json_files_load_alike(tmp_path: Path) -> None:
    y, j = tmp_path / "node.yaml", tmp_path / "node.json"
    y.write_text(yaml.safe_dump(MINIMAL))
    j.write_text(json.dumps(MINIMAL))
    a, b = load_scenario(str(y)), load_scenario(str(j))
    assert a.name == b.name == "node"
    assert a.gpus == b.gpus


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def with_change(**changes: Any) -> str:
    data = json.loads(json.dumps(MINIMAL))
    data.update(changes)
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: [", "invalid YAML at line"),
        ("- just\n- a list\n", "must be a mapping at the top level"),
        ("gpus:\n  - model: H100-SXM5-80GB\n    colour: green\n", "gpus.0.colour: Extra inputs are not permitted"),
        ("gpus:\n  - model: GTX-1080\n", "unknown GPU model 'GTX-1080'"),
        ("gpus:\n  - model: L4\n    mig: []\n", "does not support MIG"),
        (with_change(processes=[{"pid": 1, "gpu": 5, "memory_mib": 1}]), "no GPU 5"),
        (with_change(processes=[{"pid": 1, "gpu": 1, "memory_mib": 1}]), "say on which MIG device"),
        (with_change(processes=[{"pid": 1, "gpu": 0, "memory_mib": 10**7}]), "more than its"),
        (
            with_change(processes=[{"pid": 1, "gpu": 0, "memory_mib": 1}, {"pid": 1, "gpu": 0, "memory_mib": 1}]),
            "duplicate process pid 1",
        ),
        ("gpus:\n  - model: A100-SXM4-40GB\n    mig: [{profile: 9g.99gb}]\n", "profile '9g.99gb' does not exist"),
        ("gpus:\n  - model: A100-SXM4-40GB\n    mig: [{profile: 7g.40gb}, {profile: 1g.5gb}]\n", "8 slices"),
        (with_change(timeline=[{"at": 1, "action": "explode", "gpu": 0}]), "timeline.0"),
        (with_change(timeline=[{"at": 1, "action": "set_load", "target": "x/y", "percent": 5}]), "is no GPU"),
        ("gpus:\n  - model: H100-SXM5-80GB\n    load: {baseline: 150}\n", "less than or equal to 100"),
        ("gpus:\n  - model: L4\n    errors: {'field:x': NOT_SUPPORTED}\n", "neither an NVML function name"),
        ("gpus:\n  - model: L4\n    errors: {'field:82': BROKEN}\n", "gpus.0.errors.field:82: Input should be"),
        ("gpus:\n  - model: L4\n    slow_calls: {'field:82': 1}\n", "name NVML functions"),
        ("missing_functions: [GetCount]\n", "not an NVML function name"),
    ],
)
def test_bad_files_give_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    text_of_error = str(caught.value)
    assert text_of_error.startswith(path + ": ")
    assert message in text_of_error
    assert "\n" not in text_of_error


def test_bad_names_and_paths(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not a built-in scenario"):
        load_scenario("b200x8")
    with pytest.raises(ScenarioError, match=r"--simulate .*missing.yaml: cannot read"):
        load_scenario(str(tmp_path / "missing.yaml"))
    with pytest.raises(ScenarioError, match="invalid JSON at line 1"):
        load_scenario(write(tmp_path, "{nope", "bad.json"))
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ScenarioError, match="not a UTF-8"):
        load_scenario(str(tmp_path / "bin.yaml"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["gpus", "processes", "pods", "timeline", "name", "seed", "node"])


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(_keys, _json, max_size=5) | _json)
def test_garbage_is_rejected_with_a_scenario_error_only(data: Any) -> None:
    try:
        build_scenario(data)
    except ScenarioError as e:
        assert "\n" not in str(e)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.sampled_from(["H100-SXM5-80GB", "A100-SXM4-40GB", "L4"]), min_size=1, max_size=4),
    pids=st.lists(st.integers(1, 4_000_000), unique=True, max_size=6),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_any_valid_node_loads_and_runs(gpus: list[str], pids: list[int], seed: int, data: st.DataObject) -> None:
    procs = [
        {"pid": pid, "gpu": data.draw(st.integers(0, len(gpus) - 1)), "memory_mib": data.draw(st.floats(0, 1000))}
        for pid in pids
    ]
    pods = [
        {
            "namespace": "ns",
            "name": f"p{k}",
            "containers": [{"name": "c", "gpus": [{"gpu": p["gpu"]}], "pids": [p["pid"]]}],
        }
        for k, p in enumerate(procs)
    ]
    s = build_scenario({"gpus": [{"model": m} for m in gpus], "processes": procs, "pods": pods}, seed=seed)
    assert len({g.uuid for g in s.gpus}) == len(gpus)
    for pod, proc in zip(s.pods, procs, strict=True):
        assert pod.containers[0].devices[0].device_ids == (s.gpus[proc["gpu"]].uuid,)
    sim = Simulator(s, clock=lambda: 1000.0)
    assert sim.node.gpus[0].load(0.0) == 0.0


def test_the_example_in_the_simulator_readme_loads_and_runs() -> None:
    readme = Path(__file__).parents[2] / "simulation" / "README.md"
    (example,) = re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.S)
    scenario = build_scenario(yaml.safe_load(example))
    assert [g.model for g in scenario.gpus] == ["H100-SXM5-80GB", "H100-SXM5-80GB", "A100-SXM4-40GB"]
    Simulator(scenario)
