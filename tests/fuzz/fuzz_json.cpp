// libFuzzer target: the JSON kiln reads and writes. kiln reads JSON in one place, the safetensors header (with
// nlohmann/json), so the input is taken as a header and framed as a whole safetensors file (its size prefix
// and 64 data bytes): every input reaches the JSON parser and the checks of each entry's dtype, shape and
// offsets, which fuzz_safetensors reaches only through a matching size prefix. And kiln's JSON writers
// (kiln/json.hpp) must give JSON that parses back to what they were given.
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "kiln/json.hpp"
#include "kiln/nn.hpp"

namespace {

/// True for well-formed UTF-8 (JSON text is UTF-8; json_quote passes other bytes through unchanged).
bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();  // dump throws type_error 316 on invalid UTF-8
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const std::string path = kiln_fuzz::scratch_path(".safetensors");
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((uint64_t{size} >> (8 * i)) & 0xff);
  file.append(text);
  file.append(64, '\x01');
  kiln_fuzz::write_file(path, file);
  kiln_fuzz::expect_kiln_errors_only([&] { (void)kiln::nn::load_safetensors(path); });

  // json_quote: a string literal that parses back to the same string.
  if (valid_utf8(text)) {
    const std::string quoted = kiln::json_quote(std::string(text));
    if (nlohmann::json::parse(quoted).get<std::string>() != text) std::abort();
  }
  // json_number: a number within 9 significant digits of the value, or null when it is not finite.
  if (size >= sizeof(double)) {
    double v;
    std::memcpy(&v, data, sizeof v);
    const nlohmann::json n = nlohmann::json::parse(kiln::json_number(v));
    if (!std::isfinite(v) ? !n.is_null() : !n.is_number() || std::fabs(n.get<double>() - v) > 1e-8 * std::fabs(v))
      std::abort();
  }
  return 0;
}
