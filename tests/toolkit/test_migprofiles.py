"""The MIG profile table (toolkit.migprofiles) the report, the waste rules and the waste dashboard share."""

from __future__ import annotations

from fractions import Fraction

import pytest

from toolkit.migprofiles import GB, GIB, MIG_MODELS, NAMED_SHARE_FLOOR, PROFILE_GPU_FRACTIONS, gpu_fraction, mig_model


def test_every_profile_name_holds_one_share_of_its_gpu() -> None:
    assert PROFILE_GPU_FRACTIONS["1g.10gb"] == Fraction(1, 7)
    assert PROFILE_GPU_FRACTIONS["3g.40gb"] == Fraction(3, 7)
    assert PROFILE_GPU_FRACTIONS["2g.12gb"] == Fraction(1, 2)  # A30: 4 slices
    for model in MIG_MODELS:
        full = model.profiles[-1]
        assert full.gpu_fraction == 1 and full.memory_fraction == 1, model.product
        assert [p.compute_slices for p in model.profiles] == sorted(p.compute_slices for p in model.profiles)


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 80GB (SXM5, PCIe)"),
        ("NVIDIA H100 NVL", "H100 94GB (NVL)"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB"),
        ("NVIDIA A30", "A30 24GB"),
        ("NVIDIA H200", "H200 141GB (SXM5, NVL)"),
    ],
)
def test_nvml_names_find_their_profiles(name: str, product: str) -> None:
    model = mig_model(name)
    assert model is not None and model.product == product
    assert mig_model("NVIDIA L4") is None and mig_model("Tesla T4") is None


def test_a_profile_the_table_lacks_counts_its_slices_of_seven() -> None:
    assert gpu_fraction("1c.3g.40gb") == Fraction(3, 7)
    assert gpu_fraction("2g.48gb") == Fraction(2, 7)
    assert gpu_fraction("8g.200gb") == 1 and gpu_fraction("mystery") == 1


@pytest.mark.parametrize(
    ("gpu", "profile", "gib"),
    [  # `nvidia-smi mig -lgip`'s Memory column (toolkit/migprofiles.py cites the listings)
        ("NVIDIA H100 80GB HBM3", "3g.40gb", 39.50),
        ("NVIDIA H100 80GB HBM3", "1g.10gb", 9.75),
        ("NVIDIA H100 PCIe", "7g.80gb", 79.25),
        ("NVIDIA A100-SXM4-40GB", "1g.10gb", 9.62),
        ("NVIDIA A100-SXM4-80GB", "3g.40gb", 39.25),
        ("NVIDIA A30", "2g.12gb", 11.69),
        ("NVIDIA H200", "1g.18gb", 16.00),
    ],
)
def test_an_instance_holds_what_the_driver_lists(gpu: str, profile: str, gib: float) -> None:
    model = mig_model(gpu)
    assert model is not None
    found = {p.name: p for p in model.profiles}[profile]
    assert found.listed and found.memory_bytes == pytest.approx(gib * GIB, abs=0.01 * GIB)
    assert found.memory_bytes <= gib * GIB  # rounded down, never over


def test_an_estimate_is_never_above_what_a_listing_shows() -> None:
    """Unlisted profiles: at most the product's least listed GiB per memory slice, or NAMED_SHARE_FLOOR of the name;
    every listed instance holds at least that share of its name's gigabytes."""
    for model in MIG_MODELS:
        listed = [p for p in model.profiles if p.listed]
        least = min((p.memory_bytes / p.memory_slices for p in listed), default=None)
        for profile in model.profiles:
            if profile.listed:
                assert profile.memory_bytes >= float(NAMED_SHARE_FLOOR) * profile.memory_gb * GB, profile
            elif least is not None:
                assert profile.memory_bytes <= least * profile.memory_slices + 1, profile
            else:
                assert profile.memory_bytes <= float(NAMED_SHARE_FLOOR) * profile.memory_gb * GB + 1, profile
        assert model.whole_gpu_bytes == model.profiles[-1].memory_bytes
