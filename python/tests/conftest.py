"""Shared fixtures: the devices to run on (the CPU, and GPU 0 when this build and machine have one)."""

import pytest

import kiln

DEVICES = [kiln.cpu()] + ([kiln.cuda(0)] if kiln.num_gpus() > 0 else [])


@pytest.fixture(params=DEVICES, ids=str)
def device(request):
    return request.param


requires_gpu = pytest.mark.skipif(kiln.num_gpus() == 0, reason="no CUDA GPU in this build or on this machine")
