// Device discovery and properties of CUDA GPUs, the fallbacks without one,
// and arrays staying on their own GPU whatever the current device is. The
// no-GPU tests run on every machine; the GPU tests skip without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif

namespace {

using namespace kiln;

TEST(CudaDevice, without_a_gpu_everything_falls_back_to_the_cpu) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has " << num_gpus() << " GPU(s)";
  EXPECT_EQ(num_gpus(), 0);
  EXPECT_EQ(try_gpu(), cpu());
  EXPECT_EQ(try_all_gpus(), std::vector<Device>{cpu()});
  try {
    (void)gpu(0);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("0 usable GPU(s)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)device_properties(Device{DeviceType::CUDA, 0}), DeviceError);
  EXPECT_THROW(synchronize(Device{DeviceType::CUDA, 0}), DeviceError);
}

TEST(CudaDevice, the_device_count_is_stable) {
  int n = num_gpus();
  EXPECT_GE(n, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(num_gpus(), n);
  EXPECT_EQ(static_cast<int>(try_all_gpus().size()), n == 0 ? 1 : n);
}

TEST(CudaDevice, properties_describe_a_real_gpu) {
  KILN_REQUIRE_GPU();
  for (Device d : try_all_gpus()) {
    DeviceProperties p = device_properties(d);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GE(p.major, 5) << p.name;  // kiln's NVRTC targets start well above this
    EXPECT_GE(p.minor, 0);
    EXPECT_GT(p.total_memory, size_t{1} << 30) << p.name;
    EXPECT_GT(p.free_memory, 0u);
    EXPECT_LE(p.free_memory, p.total_memory);
    EXPECT_GT(p.multiprocessors, 0);
    EXPECT_GT(p.l2_cache_bytes, 0u);
    EXPECT_GE(p.shared_memory_per_block, size_t{48} << 10);  // every GPU since Kepler has 48 KiB per block
    EXPECT_EQ(p.warp_size, 32);
    EXPECT_GE(p.memory_bandwidth_gbs, 0.0);
    // Published figures of the GPUs kiln is benchmarked on (H100: 50 MiB L2, H200: 60 MiB; both sm_90).
    bool h100 = p.name.find("H100") != std::string::npos, h200 = p.name.find("H200") != std::string::npos;
    if (h100 || h200) {
      EXPECT_EQ(p.major, 9);
      EXPECT_EQ(p.minor, 0);
      EXPECT_GE(p.multiprocessors, 114);
      EXPECT_EQ(p.l2_cache_bytes, (h100 ? size_t{50} : size_t{60}) << 20);
      EXPECT_GT(p.memory_bandwidth_gbs, 2000.0);  // HBM3/HBM3e: 3.35 to 4.8 TB/s
      EXPECT_GE(p.clock_mhz, 1500);                // reported boost clocks 1755-1980 MHz
      // NVIDIA's dense bfloat16 figures: 989 TFLOP/s (SXM), 756 (PCIe), 835 (NVL).
      EXPECT_GE(peak_bf16_tflops(p), 750.0) << p.name;
      EXPECT_LE(peak_bf16_tflops(p), 990.0) << p.name;
    }
  }
}

TEST(CudaDevice, synchronize_waits_for_queued_work) {
  KILN_REQUIRE_GPU();
  Array p = empty({16 << 20}, uint8, cpu(), {.pinned = true});
  Stream s = Stream::create(gpu(0), {.non_blocking = true});
  Array g = p.to(gpu(0), s, {.non_blocking = true});
  synchronize(gpu(0));
  EXPECT_TRUE(s.query());
}

TEST(CudaDevice, device_guard_picks_the_default_device_of_creation_functions) {
  KILN_REQUIRE_GPU();
  EXPECT_EQ(current_device(), cpu());
  {
    DeviceGuard g(gpu(0));
    EXPECT_EQ(current_device(), gpu(0));
    Array a = empty({4}, float32);
    EXPECT_EQ(a.device(), gpu(0));
    Array b = from_data(std::vector<int32_t>{5, 6});
    EXPECT_EQ(b.device(), gpu(0));
    EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{5, 6}));
  }
  EXPECT_EQ(current_device(), cpu());
  EXPECT_EQ(empty({4}).device(), cpu());
}

TEST(CudaDevice, arrays_are_allocated_and_copied_on_their_own_gpu_whatever_is_current) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << num_gpus();
#ifdef KILN_WITH_CUDA
  auto before0 = cuda::memory_stats(gpu(0)).allocated;
  auto before1 = cuda::memory_stats(gpu(1)).allocated;
  DeviceGuard g(gpu(0));
  Array a = from_data(std::vector<float>{1, 2, 3}, {}, gpu(1));
  EXPECT_EQ(a.device(), gpu(1));
  EXPECT_EQ(cuda::memory_stats(gpu(1)).allocated, before1 + 512);
  EXPECT_EQ(cuda::memory_stats(gpu(0)).allocated, before0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3}));
#endif
}

TEST(CudaDevice, device_names_parse_and_print) {
  EXPECT_EQ(parse_device("cuda:1"), (Device{DeviceType::CUDA, 1}));
  EXPECT_EQ((Device{DeviceType::CUDA, 3}).str(), "cuda:3");
}

}  // namespace
