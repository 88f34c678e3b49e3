"""The MIG profile table (toolkit.migprofiles) the report, the waste rules and the waste dashboard share."""

from __future__ import annotations

from fractions import Fraction

import pytest

from toolkit.migprofiles import MIG_MODELS, PROFILE_GPU_FRACTIONS, gpu_fraction, mig_model


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
