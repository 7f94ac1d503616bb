// The device runtime interface (core/device_runtime.hpp): lookup by device type, and the CPU's runtime
// (aligned host memory, memcpy transfers, synchronous no-op streams and events).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device_runtime.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

TEST(DeviceRuntime, runtime_for_finds_each_built_in_device_type) {
  EXPECT_EQ(&detail::runtime_for(cpu()), detail::builtin_runtime(DeviceType::CPU));
  detail::DeviceRuntime* cuda = detail::builtin_runtime(DeviceType::CUDA);
  EXPECT_EQ(cuda != nullptr, built_with_cuda());
  if (cuda) {
    EXPECT_EQ(&detail::runtime_for(Device{DeviceType::CUDA, 0}), cuda);
    EXPECT_EQ(cuda->device_count(), num_gpus());
  } else {
    try {
      (void)detail::runtime_for(Device{DeviceType::CUDA, 0});
      FAIL() << "expected DeviceError";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda preset"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceRuntime, cpu_runtime_allocates_64_byte_aligned_host_memory) {
  detail::DeviceRuntime& runtime = detail::runtime_for(cpu());
  for (int64_t nbytes : {int64_t{0}, int64_t{1}, int64_t{100}, int64_t{300} << 10, int64_t{5} << 20}) {
    auto storage = runtime.allocate(nbytes, cpu(), {});
    ASSERT_NE(storage->data(), nullptr) << nbytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(storage->data()) % 64, 0u) << nbytes;
    EXPECT_EQ(storage->device(), cpu());
  }
}

TEST(DeviceRuntime, cpu_runtime_transfer_copies_the_bytes) {
  std::vector<int32_t> values = {3, -1, 4, 1, -5, 9, 2, 6};
  Array src = from_data(values);
  Array dst = empty({8}, int32);
  detail::runtime_for(cpu()).transfer(src, dst);
  EXPECT_EQ(dst.to_vector<int32_t>(), values);
  EXPECT_FALSE(dst.shares_storage(src));
}

TEST(DeviceRuntime, cpu_streams_and_events_are_synchronous_no_ops) {
  detail::DeviceRuntime& runtime = detail::runtime_for(cpu());
  EXPECT_EQ(runtime.device_count(), 1);
  EXPECT_EQ(runtime.properties(cpu()).name, "cpu");
  void* stream = runtime.stream_create(cpu(), {});
  EXPECT_EQ(stream, nullptr);
  EXPECT_EQ(runtime.current_stream(cpu()), nullptr);
  EXPECT_TRUE(runtime.stream_query(cpu(), stream));
  void* event = runtime.event_create(cpu(), /*timing=*/true);
  runtime.event_record(cpu(), event, stream);
  EXPECT_TRUE(runtime.event_query(cpu(), event));
  runtime.event_destroy(cpu(), event);
  runtime.stream_destroy(cpu(), stream);
}

}  // namespace
