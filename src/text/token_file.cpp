// Token files: llm.c's .bin (a 256 int32 header, then uint16 tokens) and raw uint16, written atomically and read
// through a read-only memory map, so that a file of billions of tokens costs only the windows read from it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/io.hpp"
#include "kiln/ops.hpp"
#include "kiln/text.hpp"

namespace kiln::text {

namespace {

constexpr int32_t kMagic = 20240520;  // llm.c's data file magic (its dev/data/data_common.py)
constexpr int32_t kVersion = 1;       // version 1: uint16 tokens
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void write_tokens(const std::string& path, std::span<const int32_t> tokens, TokenFormat format) {
  std::vector<uint16_t> data(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535)
      throw ValueError("text::write_tokens: token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                       ", outside uint16's [0, 65535]; a vocabulary of at most 65536 ids fits a token file");
    data[i] = static_cast<uint16_t>(tokens[i]);
  }
  std::array<int32_t, kHeaderInts> header{};
  if (format == TokenFormat::llmc) {
    if (tokens.size() > static_cast<size_t>(INT32_MAX))
      throw ValueError("text::write_tokens: " + std::to_string(tokens.size()) +
                       " tokens exceed llm.c's int32 token count; split them over several files");
    header[0] = kMagic;
    header[1] = kVersion;
    header[2] = static_cast<int32_t>(tokens.size());
  }
  std::vector<FileBytes> pieces;
  if (format == TokenFormat::llmc) pieces.push_back({header.data(), kHeaderBytes});
  pieces.push_back({data.data(), data.size() * sizeof(uint16_t)});
  write_file_atomically(path, pieces, "text::write_tokens");
}

TokenFile::TokenFile(const std::string& path, std::optional<TokenFormat> format) : path_(path) {
  const TokenFormat fmt = format.value_or(ends_with(path, ".bin") ? TokenFormat::llmc : TokenFormat::raw);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ValueError("text::TokenFile: cannot open '" + path + "': " + std::strerror(errno) +
                     "; write one with text::write_tokens or kiln tokenize");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw ValueError("text::TokenFile: cannot stat '" + path + "': " + std::strerror(e));
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  const std::string name = "text::TokenFile: '" + path + "' ";
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw ValueError(name + why);
  };
  const size_t header = fmt == TokenFormat::llmc ? kHeaderBytes : 0;
  if (fmt == TokenFormat::llmc && bytes < kHeaderBytes)
    fail("holds " + std::to_string(bytes) + " bytes, fewer than llm.c's 1024-byte header (truncated?); for raw " +
         "uint16 tokens pass TokenFormat::raw");
  if ((bytes - header) % 2 != 0)
    fail("holds " + std::to_string(bytes - header) + " bytes of tokens, an odd number: uint16 tokens take 2 " +
         "bytes each (truncated, or not a token file)");
  if (bytes > 0) {
    map_ = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      fail(std::string("cannot be mapped: ") + std::strerror(errno));
    }
    map_bytes_ = bytes;
  }
  ::close(fd);  // the mapping keeps the file's pages
  const size_t count = (bytes - header) / 2;
  if (fmt == TokenFormat::llmc) {
    int32_t h[3];
    std::memcpy(h, map_, sizeof h);
    std::string why;
    if (h[0] != kMagic)
      why = "has the magic " + std::to_string(h[0]) + ", not llm.c's " + std::to_string(kMagic) +
            "; for raw uint16 tokens pass TokenFormat::raw";
    else if (h[1] != kVersion)
      why = "has version " + std::to_string(h[1]) + "; kiln reads version 1 (uint16 tokens)";
    else if (h[2] < 0 || static_cast<size_t>(h[2]) != count)
      why = "has a header of " + std::to_string(h[2]) + " tokens but holds " + std::to_string(count) +
            (static_cast<size_t>(h[2]) > count ? " (truncated)" : " (trailing data)") + "; write it again";
    if (!why.empty()) {
      ::munmap(map_, map_bytes_);
      map_ = nullptr;
      throw ValueError(name + why);
    }
  }
  if (count > 0) tokens_ = {reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + header), count};
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenFile::TokenFile(TokenFile&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), tokens_(o.tokens_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
  o.tokens_ = {};
}

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, map_bytes_);
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    tokens_ = o.tokens_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
    o.tokens_ = {};
  }
  return *this;
}

Array TokenFile::window(int64_t start, int64_t length) const {
  if (start < 0 || length < 0 || start + length > size())
    throw ValueError("text::TokenFile::window: tokens [" + std::to_string(start) + ", " +
                     std::to_string(start + length) + ") are outside '" + path_ + "', which holds " +
                     std::to_string(size()) + " tokens");
  std::vector<int64_t> out(tokens_.begin() + start, tokens_.begin() + start + length);
  return from_data(out);
}

std::pair<Array, Array> TokenFile::batch(int64_t batch, int64_t seq, random::Generator& gen) const {
  if (batch <= 0 || seq <= 0)
    throw ValueError("text::TokenFile::batch: batch " + std::to_string(batch) + " and seq " + std::to_string(seq) +
                     " must be positive");
  if (size() < seq + 1)
    throw ValueError("text::TokenFile::batch: '" + path_ + "' holds " + std::to_string(size()) +
                     " tokens, fewer than a window of seq + 1 = " + std::to_string(seq + 1) +
                     "; pass a shorter seq or a longer file");
  const std::vector<int64_t> starts = gen.randint(0, size() - seq, {batch}).to_vector<int64_t>();
  std::vector<int64_t> x(static_cast<size_t>(batch * seq)), y(static_cast<size_t>(batch * seq));
  for (int64_t b = 0; b < batch; ++b) {
    const uint16_t* w = tokens_.data() + starts[static_cast<size_t>(b)];
    for (int64_t t = 0; t < seq; ++t) {
      x[static_cast<size_t>(b * seq + t)] = w[t];
      y[static_cast<size_t>(b * seq + t)] = w[t + 1];
    }
  }
  return {from_data(x, Shape{batch, seq}), from_data(y, Shape{batch, seq})};
}

std::string read_text(const std::string& path) {
  const std::string hint = path == kJargonFile ? "; install Debian's jargon-text (make deps does)" : "";
  if (ends_with(path, ".gz")) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) throw ValueError("text::read_text: cannot open '" + path + "'" + hint);
    std::string out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    int code = 0;
    const char* why = n < 0 ? gzerror(f, &code) : nullptr;
    const std::string reason = why ? why : "";
    gzclose(f);
    if (n < 0) throw ValueError("text::read_text: '" + path + "' is not a valid gzip file (" + reason + ")");
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValueError("text::read_text: cannot open '" + path + "'" + hint);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t tokenize_to_file(const BpeTokenizer& tokenizer, std::string_view text, const std::string& path,
                         TokenFormat format) {
  if (tokenizer.vocab_size() > 65536)
    throw ValueError("text::tokenize_to_file: a vocabulary of " + std::to_string(tokenizer.vocab_size()) +
                     " ids does not fit uint16 token files; train one of at most 65536");
  std::vector<int32_t> tokens;
  if (auto eot = tokenizer.special_id()) tokens.push_back(*eot);
  const std::vector<int32_t> body = tokenizer.encode(text);
  tokens.insert(tokens.end(), body.begin(), body.end());
  write_tokens(path, tokens, format);
  return static_cast<int64_t>(tokens.size());
}

}  // namespace kiln::text
