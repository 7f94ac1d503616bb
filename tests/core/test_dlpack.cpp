// DLPack export and import on the CPU (kiln/dlpack.hpp): the fields of exported tensors against hand-written
// values, imports of hand-built "foreign" tensors over known bytes, views (slices, transposes, broadcasts,
// negative strides, byte_offset), the deleter called exactly once on both sides, and the refusals.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/dlpack.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace {

using namespace kiln;
using kiln_test::expect_error;

// A tensor as another library would produce it: its own bytes, shape and strides, and a deleter that counts.
template <class Managed = DLManagedTensorVersioned>
struct Foreign {
  std::vector<unsigned char> bytes;
  std::vector<int64_t> shape, strides;
  Managed managed{};
  int* deletions;

  // A new tensor over a copy of `data`; `strides` empty means null strides (C-contiguous).
  static Managed* make(const void* data, size_t nbytes, DLDataType dtype, std::vector<int64_t> shape,
                       std::vector<int64_t> strides, int* deletions, uint64_t byte_offset = 0,
                       DLDevice device = DLDevice{kDLCPU, 0}) {
    auto* f = new Foreign{};
    f->bytes.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + nbytes);
    f->shape = std::move(shape);
    f->strides = std::move(strides);
    f->deletions = deletions;
    DLTensor& t = f->managed.dl_tensor;
    t.data = f->bytes.data();
    t.device = device;
    t.ndim = static_cast<int32_t>(f->shape.size());
    t.dtype = dtype;
    t.shape = f->shape.data();
    t.strides = f->strides.empty() ? nullptr : f->strides.data();
    t.byte_offset = byte_offset;
    f->managed.manager_ctx = f;
    f->managed.deleter = [](Managed* self) {
      auto* owner = static_cast<Foreign*>(self->manager_ctx);
      ++*owner->deletions;
      delete owner;
    };
    if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>)
      f->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    return &f->managed;
  }
};

DLDataType dl(uint8_t code, uint8_t bits, uint16_t lanes = 1) { return DLDataType{code, bits, lanes}; }

TEST(DLPack, export_describes_every_dtype_and_round_trips_without_a_copy) {
  struct Case {
    DType dtype;
    uint8_t code, bits;
    std::vector<double> values;  // arange(6) cast to the dtype
  };
  const std::vector<double> counting{0, 1, 2, 3, 4, 5};
  const std::vector<Case> cases = {{bool_, kDLBool, 8, {0, 1, 1, 1, 1, 1}}, {int8, kDLInt, 8, counting},
                                   {int16, kDLInt, 16, counting},           {int32, kDLInt, 32, counting},
                                   {int64, kDLInt, 64, counting},           {uint8, kDLUInt, 8, counting},
                                   {float16, kDLFloat, 16, counting},       {bfloat16, kDLBfloat, 16, counting},
                                   {float32, kDLFloat, 32, counting},       {float64, kDLFloat, 64, counting}};
  for (const Case& c : cases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    const Array a = arange(6, int64).astype(c.dtype).reshape({2, 3});
    DLManagedTensorVersioned* m = to_dlpack_versioned(a);
    EXPECT_EQ(m->version.major, 1u);
    EXPECT_EQ(m->flags, 0u);
    const DLTensor& t = m->dl_tensor;
    EXPECT_EQ(t.dtype.code, c.code);
    EXPECT_EQ(t.dtype.bits, c.bits);
    EXPECT_EQ(t.dtype.lanes, 1);
    EXPECT_EQ(t.device.device_type, kDLCPU);
    EXPECT_EQ(t.device.device_id, 0);
    ASSERT_EQ(t.ndim, 2);
    EXPECT_EQ(t.shape[0], 2);
    EXPECT_EQ(t.shape[1], 3);
    EXPECT_EQ(t.strides[0], 3);
    EXPECT_EQ(t.strides[1], 1);
    EXPECT_EQ(t.byte_offset, 0u);
    EXPECT_EQ(t.data, a.data_ptr());
    const Array back = from_dlpack(m);
    EXPECT_EQ(back.dtype(), c.dtype);
    EXPECT_EQ(back.shape(), (Shape{2, 3}));
    EXPECT_EQ(back.data_ptr(), a.data_ptr());
    EXPECT_EQ(back.to_vector<double>(), c.values);
  }
}

TEST(DLPack, legacy_export_round_trips) {
  const Array a = arange(4, float32);
  DLManagedTensor* m = to_dlpack(a);
  EXPECT_EQ(m->dl_tensor.data, a.data_ptr());
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  const Array back = from_dlpack(m);
  EXPECT_EQ(back.data_ptr(), a.data_ptr());
  EXPECT_EQ(back.to_vector<double>(), (std::vector<double>{0, 1, 2, 3}));
}

TEST(DLPack, export_of_views_points_at_the_first_element_with_element_strides) {
  const Array base = arange(12, float32).reshape({3, 4});  // [[0..3] [4..7] [8..11]]
  {
    const Array view = base.slice(1, 1, std::nullopt, 2);  // columns 1 and 3
    DLManagedTensorVersioned* m = to_dlpack_versioned(view);
    EXPECT_EQ(m->dl_tensor.data, static_cast<float*>(base.data_ptr()) + 1);
    EXPECT_EQ(m->dl_tensor.strides[0], 4);
    EXPECT_EQ(m->dl_tensor.strides[1], 2);
    EXPECT_EQ(from_dlpack(m).to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  }
  {
    DLManagedTensorVersioned* m = to_dlpack_versioned(base.transpose());
    EXPECT_EQ(m->dl_tensor.shape[0], 4);
    EXPECT_EQ(m->dl_tensor.strides[0], 1);
    EXPECT_EQ(m->dl_tensor.strides[1], 4);
    EXPECT_EQ(from_dlpack(m).to_vector<double>(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  }
  {
    const Array row = arange(3, float32);
    DLManagedTensorVersioned* m = to_dlpack_versioned(row.broadcast_to({2, 3}));
    EXPECT_EQ(m->dl_tensor.strides[0], 0);
    EXPECT_EQ(m->dl_tensor.strides[1], 1);
    EXPECT_EQ(from_dlpack(m).to_vector<double>(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  }
  {
    DLManagedTensorVersioned* m = to_dlpack_versioned(full({}, 7.0, float64));  // 0-d
    EXPECT_EQ(m->dl_tensor.ndim, 0);
    const Array back = from_dlpack(m);
    EXPECT_EQ(back.ndim(), 0);
    EXPECT_EQ(back.item<double>(), 7.0);
  }
}

TEST(DLPack, import_reads_foreign_bytes_of_every_dtype) {
  int deletions = 0;
  auto import = [&](const auto& values, DLDataType dtype) {
    return from_dlpack(Foreign<>::make(values.data(), sizeof(values), dtype, {3}, {}, &deletions));
  };
  EXPECT_EQ(import(std::array<uint8_t, 3>{1, 0, 1}, dl(kDLBool, 8)).to_vector<double>(),
            (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(import(std::array<int8_t, 3>{-1, 2, -128}, dl(kDLInt, 8)).to_vector<double>(),
            (std::vector<double>{-1, 2, -128}));
  EXPECT_EQ(import(std::array<int16_t, 3>{-300, 2, 7}, dl(kDLInt, 16)).to_vector<double>(),
            (std::vector<double>{-300, 2, 7}));
  EXPECT_EQ(import(std::array<int32_t, 3>{-70000, 2, 7}, dl(kDLInt, 32)).to_vector<double>(),
            (std::vector<double>{-70000, 2, 7}));
  EXPECT_EQ(import(std::array<int64_t, 3>{-(int64_t{1} << 40), 2, 7}, dl(kDLInt, 64)).to_vector<int64_t>(),
            (std::vector<int64_t>{-(int64_t{1} << 40), 2, 7}));
  EXPECT_EQ(import(std::array<uint8_t, 3>{255, 2, 7}, dl(kDLUInt, 8)).to_vector<double>(),
            (std::vector<double>{255, 2, 7}));
  // IEEE half 1.0 = 0x3C00, -2.0 = 0xC000, 0.5 = 0x3800; bfloat16 1.0 = 0x3F80, -2.0 = 0xC000, 0.5 = 0x3F00.
  EXPECT_EQ(import(std::array<uint16_t, 3>{0x3C00, 0xC000, 0x3800}, dl(kDLFloat, 16)).to_vector<double>(),
            (std::vector<double>{1.0, -2.0, 0.5}));
  EXPECT_EQ(import(std::array<uint16_t, 3>{0x3F80, 0xC000, 0x3F00}, dl(kDLBfloat, 16)).to_vector<double>(),
            (std::vector<double>{1.0, -2.0, 0.5}));
  EXPECT_EQ(import(std::array<float, 3>{1.5f, -2.0f, 3.25f}, dl(kDLFloat, 32)).to_vector<double>(),
            (std::vector<double>{1.5, -2.0, 3.25}));
  EXPECT_EQ(import(std::array<double, 3>{1e300, -2.0, 0.1}, dl(kDLFloat, 64)).to_vector<double>(),
            (std::vector<double>{1e300, -2.0, 0.1}));
  EXPECT_EQ(deletions, 10);  // each temporary array released its tensor once
}

TEST(DLPack, import_honours_strides_negative_strides_and_byte_offset) {
  int deletions = 0;
  const std::array<float, 6> values{0, 1, 2, 3, 4, 5};
  // [[0 1 2] [3 4 5]] read as its transpose (strides 1, 3).
  Array t = from_dlpack(Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {3, 2}, {1, 3}, &deletions));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // Reversed: byte_offset at element 5, stride -1 (NumPy's x[::-1]).
  Array r = from_dlpack(
      Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {6}, {-1}, &deletions, 5 * sizeof(float)));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  // byte_offset 8 bytes: starts at element 2; null strides: C-contiguous.
  Array o = from_dlpack(Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {2, 2}, {}, &deletions, 8));
  EXPECT_EQ(o.to_vector<double>(), (std::vector<double>{2, 3, 4, 5}));
  // Broadcast (stride 0) and an empty tensor.
  Array b = from_dlpack(Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {2, 3}, {0, 1}, &deletions));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  Array e = from_dlpack(Foreign<>::make(values.data(), 0, dl(kDLFloat, 32), {0, 4}, {4, 1}, &deletions));
  EXPECT_EQ(e.size(), 0);
  EXPECT_EQ(deletions, 0);
}

TEST(DLPack, import_shares_memory_both_ways) {
  int deletions = 0;
  const std::array<float, 3> values{1, 2, 3};
  DLManagedTensorVersioned* m = Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {3}, {}, &deletions);
  auto* producer_data = static_cast<float*>(m->dl_tensor.data);
  Array a = from_dlpack(m);
  a[1] = 20.0f;  // kiln writes, the producer sees it
  EXPECT_EQ(producer_data[1], 20.0f);
  producer_data[2] = 30.0f;  // the producer writes, kiln sees it
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, 20, 30}));
}

TEST(DLPack, import_calls_the_producer_deleter_once_when_the_last_view_dies) {
  int deletions = 0;
  const std::array<int32_t, 4> values{1, 2, 3, 4};
  {
    Array a = from_dlpack(Foreign<>::make(values.data(), sizeof(values), dl(kDLInt, 32), {4}, {}, &deletions));
    Array view = a.slice(0, 1, 3);
    a = Array();
    EXPECT_EQ(deletions, 0);  // the view still reads the memory
    EXPECT_EQ(view.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  }
  EXPECT_EQ(deletions, 1);
  {
    Array legacy =
        from_dlpack(Foreign<DLManagedTensor>::make(values.data(), sizeof(values), dl(kDLInt, 32), {4}, {}, &deletions));
    EXPECT_EQ(legacy.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  }
  EXPECT_EQ(deletions, 2);
}

TEST(DLPack, export_keeps_the_storage_alive_until_the_consumer_deletes) {
  std::weak_ptr<Storage> storage;
  DLManagedTensorVersioned* m = nullptr;
  {
    const Array a = arange(5, float32);
    storage = a.storage();
    m = to_dlpack_versioned(a);
  }
  ASSERT_FALSE(storage.expired());  // the consumer still holds the tensor
  EXPECT_EQ(static_cast<float*>(m->dl_tensor.data)[4], 4.0f);
  m->deleter(m);
  EXPECT_TRUE(storage.expired());

  DLManagedTensor* legacy = nullptr;
  {
    const Array a = arange(5, float32);
    storage = a.storage();
    legacy = to_dlpack(a);
  }
  ASSERT_FALSE(storage.expired());
  legacy->deleter(legacy);
  EXPECT_TRUE(storage.expired());
}

TEST(DLPack, read_only_tensors_are_accepted) {
  int deletions = 0;
  const std::array<float, 2> values{1, 2};
  DLManagedTensorVersioned* m = Foreign<>::make(values.data(), sizeof(values), dl(kDLFloat, 32), {2}, {}, &deletions);
  m->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  EXPECT_EQ(from_dlpack(m).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(deletions, 1);
}

TEST(DLPack, refusals_name_the_field_and_release_the_tensor) {
  int deletions = 0;
  const std::array<double, 2> values{1, 2};
  auto make = [&](DLDataType dtype, DLDevice device = DLDevice{kDLCPU, 0}) {
    return Foreign<>::make(values.data(), sizeof(values), dtype, {1}, {}, &deletions, 0, device);
  };
  expect_error<ValueError>([] { (void)from_dlpack(static_cast<DLManagedTensorVersioned*>(nullptr)); },
                           {"from_dlpack", "null"});
  expect_error<ValueError>([] { (void)from_dlpack(static_cast<DLManagedTensor*>(nullptr)); }, {"from_dlpack", "null"});
  expect_error<DTypeError>([&] { (void)from_dlpack(make(dl(kDLComplex, 32))); },
                           {"from_dlpack", "32 bits", "complex64", "convert"});
  expect_error<DTypeError>([&] { (void)from_dlpack(make(dl(kDLUInt, 16))); }, {"from_dlpack", "16 bits", "unsigned"});
  expect_error<DTypeError>([&] { (void)from_dlpack(make(dl(kDLUInt, 64))); }, {"from_dlpack", "64 bits"});
  expect_error<DTypeError>([&] { (void)from_dlpack(make(dl(kDLFloat, 32, 4))); }, {"from_dlpack", "lanes"});
  expect_error<DTypeError>([&] { (void)from_dlpack(make(dl(kDLFloat8_e4m3fn, 8))); }, {"from_dlpack", "code 10"});
  expect_error<DeviceError>(
      [&] {
        (void)from_dlpack(make(dl(kDLFloat, 64), DLDevice{kDLROCM, 0}));
      },
      {"from_dlpack", "kDLROCM", "copy the tensor"});
  expect_error<DeviceError>(
      [&] {
        (void)from_dlpack(make(dl(kDLFloat, 64), DLDevice{kDLMetal, 0}));
      },
      {"from_dlpack", "kDLMetal"});
  expect_error<DeviceError>(
      [&] {
        (void)from_dlpack(make(dl(kDLFloat, 64), DLDevice{kDLCUDA, 99}));
      },
      {"from_dlpack", "CUDA device 99"});
  EXPECT_EQ(deletions, 8);  // every refused tensor was handed back to its producer

  DLManagedTensorVersioned* future = make(dl(kDLFloat, 64));
  future->version = DLPackVersion{2, 0};
  expect_error<ValueError>([&] { (void)from_dlpack(future); }, {"from_dlpack", "DLPack 2.0", "major version 1"});
  EXPECT_EQ(deletions, 9);  // the spec: an unknown major version is released, then refused

  DLManagedTensorVersioned* misaligned = make(dl(kDLFloat, 64));
  misaligned->dl_tensor.byte_offset = 4;
  expect_error<ValueError>([&] { (void)from_dlpack(misaligned); }, {"from_dlpack", "aligned", "byte_offset"});
  EXPECT_EQ(deletions, 10);

  DLManagedTensorVersioned* shapeless = make(dl(kDLFloat, 64));
  shapeless->dl_tensor.shape = nullptr;
  expect_error<ValueError>([&] { (void)from_dlpack(shapeless); }, {"from_dlpack", "null shape"});
  EXPECT_EQ(deletions, 11);

  expect_error<ValueError>([] { (void)to_dlpack_versioned(Array()); }, {"to_dlpack_versioned", "undefined"});
  expect_error<ValueError>([] { (void)to_dlpack(Array()); }, {"to_dlpack", "undefined"});
}

}  // namespace
