// DLPack on a GPU (kiln/dlpack.hpp): device pointers and kDLCUDA/kDLCUDAHost devices, and the stream order of
// an export: the consumer's stream waits for kiln's pending work without the host blocking. Skips without a GPU.
// Needs a CUDA build (the spin kernel); the GPU tests skip without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.hpp"
#include "kiln/dlpack.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace {

using namespace kiln;

TEST(DLPackGpu, export_and_import_device_pointers) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Array a = arange(6, float32, d).reshape({2, 3});
  DLManagedTensorVersioned* m = to_dlpack_versioned(a);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 0);
  EXPECT_EQ(m->dl_tensor.data, a.data_ptr());
  const Array back = from_dlpack(m);
  EXPECT_EQ(back.device(), d);
  EXPECT_EQ(back.data_ptr(), a.data_ptr());
  EXPECT_EQ(back.transpose().to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(DLPackGpu, pinned_host_memory_is_cuda_host) {
  KILN_REQUIRE_GPU();
  const Array pinned = arange(3, float32).pin_memory();
  DLManagedTensor* m = to_dlpack(pinned);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDAHost);
  const Array back = from_dlpack(m);
  EXPECT_EQ(back.device(), cpu());
  EXPECT_TRUE(back.is_pinned());
  EXPECT_EQ(back.to_vector<double>(), (std::vector<double>{0, 1, 2}));
}

TEST(DLPackGpu, the_consumer_stream_waits_for_kiln_without_blocking_the_host) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  // Non-blocking streams: no implicit order through the legacy default stream hides a missing wait.
  const Stream producer = Stream::create(d, {.non_blocking = true});
  const Stream consumer = Stream::create(d, {.non_blocking = true});
  Array a = zeros({1024}, float32, d);
  synchronize(d);
  {
    StreamGuard guard(producer);
    kiln_test::spin(producer, 0.3);  // kiln's work on the array is still queued when the export returns
    a.fill(2.0);
    DLManagedTensorVersioned* m = to_dlpack_versioned(a, DLPackExportOptions{.consumer_stream = consumer});
    EXPECT_FALSE(producer.query());  // the host did not wait
    const Array view = from_dlpack(m);
    // Read on the consumer's stream: without the event it would copy the zeros before the fill ran.
    const Array host = view.to(cpu(), consumer);
    EXPECT_EQ(host.sum().item<double>(), 2.0 * 1024);
  }
}

TEST(DLPackGpu, the_default_export_waits_for_kiln_current_stream) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Stream producer = Stream::create(d, {.non_blocking = true});
  StreamGuard guard(producer);
  Array a = zeros({16}, float32, d);
  kiln_test::spin(producer, 0.1);
  a.fill(3.0);
  DLManagedTensor* m = to_dlpack(a);
  EXPECT_TRUE(producer.query());  // a consumer on any stream reads finished data
  m->deleter(m);
}

TEST(DLPackGpu, a_consumer_stream_of_another_gpu_is_refused) {
  KILN_REQUIRE_GPU();
  if (num_gpus() < 2) GTEST_SKIP() << "needs two GPUs";
  const Array a = zeros({4}, float32, gpu(0));
  kiln_test::expect_error<DeviceError>(
      [&] { (void)to_dlpack_versioned(a, DLPackExportOptions{.consumer_stream = Stream::create(gpu(1))}); },
      {"to_dlpack", "cuda:1", "cuda:0"});
}

}  // namespace

#endif  // KILN_WITH_CUDA
