"""The GPU allocator's functions (python/src/memory.cpp): DeviceError without a GPU (a CPU-only build has no
caching allocator), and on a GPU the byte counts follow the arrays made and freed."""

import pytest

import kiln
from conftest import requires_gpu

DEVICE_CALLS = {
    "memory_stats": (), "memory_allocated": (), "memory_reserved": (), "max_memory_allocated": (),
    "max_memory_reserved": (), "reset_peak_memory_stats": (), "empty_cache": (), "memory_limit": (),
    "set_memory_limit": (1 << 30,),
}
HOST_CALLS = {"host_memory_stats": (), "empty_host_cache": ()}


@pytest.mark.skipif(kiln.num_gpus() > 0, reason="this machine has a GPU")
@pytest.mark.parametrize("name", sorted(DEVICE_CALLS))
def test_without_a_gpu_the_device_allocators_functions_raise_device_error(name):
    with pytest.raises(kiln.DeviceError):
        getattr(kiln, name)(*DEVICE_CALLS[name])
    with pytest.raises(kiln.DeviceError):  # the CPU has no caching allocator, in any build
        getattr(kiln, name)(*DEVICE_CALLS[name], device=kiln.cpu())


@pytest.mark.skipif(kiln.built_with_cuda(), reason="a CUDA build has the pinned pool")
@pytest.mark.parametrize("name", sorted(HOST_CALLS))
def test_a_cpu_only_build_has_no_pinned_pool(name):
    with pytest.raises(kiln.DeviceError, match="without the CUDA backend"):
        getattr(kiln, name)()


@pytest.mark.skipif(not kiln.built_with_cuda(), reason="a CPU-only build")
def test_the_pinned_pool_counts_in_a_cuda_build():
    stats = kiln.host_memory_stats()
    assert stats["reserved_bytes"] >= stats["allocated_bytes"] >= 0
    kiln.empty_host_cache()


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
