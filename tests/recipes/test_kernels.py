"""--kernels: the default and the refusals that run on CPU (Liger itself is measured on the GPU, benchmarks/results)."""
from __future__ import annotations

import importlib.util

import pytest

from shardlab.core.errors import UserError
from shardlab.recipes import kernels


def test_default_is_torch_on_cpu_and_without_the_package():
    assert kernels.default("cpu") == "torch"
    expected = "liger" if importlib.util.find_spec("liger_kernel") else "torch"
    assert kernels.default("gpu") == expected


def test_refusals_name_the_flag_and_the_fix():
    with pytest.raises(UserError, match="use --kernels torch on CPU"):
        kernels.check("cpu")
