"""The GPU allocator's functions (python/src/memory.cpp): DeviceError without a GPU (a CPU-only build has no
caching allocator), and on a GPU the byte counts follow the arrays made and freed."""

import pytest

import kiln
from conftest import requires_gpu

CALLS = {
    "memory_stats": (), "memory_allocated": (), "memory_reserved": (), "max_memory_allocated": (),
    "max_memory_reserved": (), "reset_peak_memory_stats": (), "empty_cache": (), "memory_limit": (),
    "set_memory_limit": (1 << 30,), "host_memory_stats": (), "empty_host_cache": (),
}


@pytest.mark.skipif(kiln.num_gpus() > 0, reason="this machine has a GPU")
@pytest.mark.parametrize("name", sorted(CALLS))
def test_without_a_gpu_every_memory_function_raises_device_error(name):
    with pytest.raises(kiln.DeviceError):
        getattr(kiln, name)(*CALLS[name])


@requires_gpu
def test_allocated_bytes_follow_an_array_and_the_cache_empties():
    gpu = kiln.cuda(0)
    kiln.synchronize()
    before = kiln.memory_allocated(gpu)
    x = kiln.empty((1 << 20,), dtype=kiln.float32, device=gpu)  # 4 MiB, a multiple of the 512-byte rounding
    assert kiln.memory_allocated(gpu) == before + 4 * (1 << 20)
    assert kiln.memory_reserved(gpu) >= kiln.memory_allocated(gpu)
    assert kiln.max_memory_allocated(gpu) >= before + 4 * (1 << 20)
    del x
    kiln.synchronize()
    assert kiln.memory_allocated(gpu) == before
    kiln.empty_cache(gpu)
    stats = kiln.memory_stats(gpu)
    assert stats["reserved_bytes"] == kiln.memory_reserved(gpu) and stats["allocated_bytes"] == before


@requires_gpu
def test_a_memory_limit_turns_a_large_allocation_into_out_of_memory():
    gpu = kiln.cuda(0)
    old = kiln.memory_limit(gpu)
    kiln.empty_cache(gpu)
    kiln.set_memory_limit(kiln.memory_reserved(gpu) + (64 << 20), gpu)
    try:
        with pytest.raises(kiln.OutOfMemoryError):
            kiln.empty((1 << 30,), dtype=kiln.float32, device=gpu)
    finally:
        kiln.set_memory_limit(old, gpu)
    assert kiln.memory_limit(gpu) == old
