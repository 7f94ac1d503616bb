"""Shared fixtures: the devices to run on (the CPU, and GPU 0 when this build and machine have one)."""

import pytest

import kiln

# The devices by name, made per test: kiln.Device objects kept in this module outlived nanobind's leak check at
# exit when PyTorch was imported (pytest keeps conftest modules until late), which then reported them as leaked.
DEVICES = ["cpu"] + (["cuda:0"] if kiln.num_gpus() > 0 else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return kiln.device(request.param)


requires_gpu = pytest.mark.skipif(kiln.num_gpus() == 0, reason="no CUDA GPU in this build or on this machine")
