// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors): written crash-safely
// (kiln::write_file_atomically); the JSON header is parsed with nlohmann/json; every size is checked against the
// file before anything is allocated.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {{bool_, "BOOL"},  {uint8, "U8"},   {int8, "I8"},     {int16, "I16"},
                                {int32, "I32"},   {int64, "I64"},  {float16, "F16"}, {bfloat16, "BF16"},
                                {float32, "F32"}, {float64, "F64"},  {complex64, "C64"}};

const char* safetensors_name(DType t) {
  for (const DTypeName& n : kNames)
    if (n.dtype == t) return n.name;
  if (t == complex128)  // the format's dtype list stops at C64
    throw DTypeError("save_safetensors: dtype complex128 has no safetensors name (the format defines C64 only); "
                     "save a.astype(complex64), or real(a) and imag(a) as two float64 tensors");
  throw DTypeError("save_safetensors: dtype " + std::string(dtype_name(t)) + " has no safetensors name");
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw ValueError("load_safetensors(" + path + "): " + what + "; the file is truncated or not a safetensors file");
}

}  // namespace

StateDict StateDict::prefixed(const std::string& prefix) const {
  StateDict out;
  for (const auto& [name, v] : items_) out.insert(prefix + name, v);
  return out;
}

StateDict StateDict::strip_prefix(const std::string& prefix) const {
  StateDict out;
  for (const auto& [name, v] : items_)
    if (name.compare(0, prefix.size(), prefix) == 0) out.insert(name.substr(prefix.size()), v);
  return out;
}

void save_safetensors(const std::string& path, const StateDict& state,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::vector<Array> host;
  uint64_t offset = 0;
  for (const auto& [name, value] : state) {
    if (name == "__metadata__") throw ValueError("save_safetensors: \"__metadata__\" is reserved as a name");
    if (!value.defined()) throw ValueError("save_safetensors: entry \"" + name + "\" is undefined");
    Array h = value.detach().to(cpu()).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(h.nbytes());
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_name(h.dtype());
    entry["shape"] = nlohmann::json::array();
    for (int64_t e : h.shape()) entry["shape"].push_back(e);
    entry["data_offsets"] = {offset, offset + bytes};
    header[name] = entry;
    offset += bytes;
    host.push_back(std::move(h));
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';  // the data starts 8-byte aligned, as the reference writer does
  uint64_t n = text.size();
  unsigned char size_bytes[8];
  for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<unsigned char>(n >> (8 * i));
  std::vector<FileBytes> pieces{{size_bytes, 8}, {text.data(), text.size()}};
  for (const Array& h : host) pieces.push_back({h.data_ptr(), static_cast<size_t>(h.nbytes())});
  write_file_atomically(path, pieces, "save_safetensors");
}

StateDict load_safetensors(const std::string& path, std::optional<Device> device) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw ValueError("load_safetensors: cannot open " + path + " (no such file, or not readable)");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (file_size < 8)
    corrupt(path, "it has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header size");
  unsigned char size_bytes[8];
  in.read(reinterpret_cast<char*>(size_bytes), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(size_bytes[i]) << (8 * i);
  if (n > file_size - 8)
    corrupt(path,
            "the header claims " + std::to_string(n) + " bytes but only " + std::to_string(file_size - 8) + " follow");
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("its JSON header does not parse (") + e.what() + ")");
  }
  if (!header.is_object()) corrupt(path, "its JSON header is not an object");
  const uint64_t data_size = file_size - 8 - n;
  StateDict state;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "entry \"" + name + "\"";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      corrupt(path, where + " lacks dtype, shape or data_offsets");
    if (!entry["dtype"].is_string()) corrupt(path, where + " has a dtype that is not a string");
    const std::string dname = entry["dtype"].get<std::string>();
    std::optional<DType> dtype;
    for (const DTypeName& d : kNames)
      if (dname == d.name) dtype = d.dtype;
    if (!dtype) corrupt(path, where + " has dtype " + dname + ", which kiln does not read");
    Shape shape;
    uint64_t count = 1;
    if (!entry["shape"].is_array()) corrupt(path, where + " has a shape that is not a list");
    bool larger_than_file = false;  // the product of the extents exceeds the data (and may overflow 64 bits)
    for (const auto& e : entry["shape"]) {
      if (!e.is_number_unsigned()) corrupt(path, where + " has a negative or non-integer extent");
      const uint64_t extent = e.get<uint64_t>();
      if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        corrupt(path, where + " has an extent of " + std::to_string(extent) + ", beyond int64");
      if (extent != 0 && count > data_size / extent) larger_than_file = true;
      count = larger_than_file ? count : count * extent;
      shape.push_back(static_cast<int64_t>(extent));
    }
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) count = 0, larger_than_file = false;
    if (larger_than_file) corrupt(path, where + " has a shape " + shape_str(shape) + " larger than the file");
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      corrupt(path, where + " has data_offsets that are not two non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const uint64_t bytes = count * static_cast<uint64_t>(itemsize(*dtype));
    if (begin > end || end > data_size)
      corrupt(path, where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] outside the " + std::to_string(data_size) + " data bytes");
    if (end - begin != bytes)
      corrupt(path, where + " holds " + std::to_string(end - begin) + " bytes but its shape " + shape_str(shape) +
                        " of " + dname + " needs " + std::to_string(bytes));
    // BOOL bytes are read as uint8 and compared with 0: a byte other than 0 or 1 (the format allows no other)
    // would be an invalid bool for every kernel that reads it.
    const bool is_bool = *dtype == bool_;
    Array h = empty(shape, is_bool ? uint8 : *dtype, cpu());
    in.seekg(static_cast<std::streamoff>(8 + n + begin));
    if (bytes > 0) in.read(static_cast<char*>(h.data_ptr()), static_cast<std::streamsize>(bytes));
    if (!in) corrupt(path, where + ": reading its data failed");
    if (is_bool) h = h.astype(bool_);
    state.insert(name, device && *device != cpu() ? h.to(*device) : h);
  }
  return state;
}

}  // namespace kiln::nn
