// The one benchmark reporter of the bench/ programs (bench_common.hpp's Report) and `kiln bench`
// (tools/kiln): the text table both print and the JSON files of docs/bench-schema.md both write. Header only
// (fmt, the standard library and kiln/json.hpp), like bench_clock.hpp, so tools/kiln needs no bench/ target.
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "bench_clock.hpp"
#include "kiln/json.hpp"

namespace kiln::benchutil {

/// A text table, numbers right-aligned. Either collected and printed whole (columns sized to their contents:
/// row() then print()), or streamed as results arrive with fixed widths (print_header() then print_row()).
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<size_t> widths = {})
      : headers_(std::move(headers)), widths_(std::move(widths)) {
    widths_.resize(headers_.size(), 0);
    for (size_t c = 0; c < headers_.size(); ++c) widths_[c] = std::max(widths_[c], headers_[c].size());
  }
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

  /// Prints the header, a rule and every row(), each column as wide as its widest cell.
  void print() const {
    std::vector<size_t> width = widths_;
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
    line(headers_, width);
    size_t total = 1;
    for (size_t w : width) total += w + 1;
    fmt::print("  {}\n", std::string(total - 1, '-'));
    for (const auto& r : rows_) line(r, width);
    std::fflush(stdout);
  }
  /// Streaming: the header line in the fixed widths.
  void print_header() const { line(headers_, widths_); }
  /// Streaming: one row in the fixed widths (a longer cell widens its line only).
  void print_row(const std::vector<std::string>& cells) const {
    line(cells, widths_);
    std::fflush(stdout);
  }

 private:
  static void line(const std::vector<std::string>& cells, const std::vector<size_t>& width) {
    std::string out = " ";
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const bool numeric = !cell.empty() && (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-');
      out += ' ';
      out += c > 0 && numeric ? fmt::format("{:>{}}", cell, width[c]) : fmt::format("{:<{}}", cell, width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    fmt::print("{}\n", out);
  }

  std::vector<std::string> headers_;
  std::vector<size_t> widths_;
  std::vector<std::vector<std::string>> rows_;
};

/// "12.3" style with `digits` after the point.
inline std::string format_number(double v, int digits = 1) { return fmt::format("{:.{}f}", v, digits); }

/// The current UTC time as the schema's `date`: "YYYY-MM-DDTHH:MM:SSZ".
inline std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return date;
}

/// A JSON object written field by field in order, one field a line (the layout of docs/bench-schema.md's files).
class JsonObject {
 public:
  JsonObject& raw(const std::string& key, const std::string& json) {
    fields_.emplace_back(key, json);
    return *this;
  }
  JsonObject& str(const std::string& key, const std::string& value) { return raw(key, kiln::json_quote(value)); }
  JsonObject& num(const std::string& key, double value) { return raw(key, kiln::json_number(value)); }
  JsonObject& boolean(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
  /// An array of already-written JSON values, one a line.
  JsonObject& array(const std::string& key, const std::vector<std::string>& items) {
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? ",\n    " : "\n    ") + items[i];
    return raw(key, items.empty() ? "[]" : s + "\n  ]");
  }
  std::string text() const {
    std::string s = "{\n";
    for (size_t i = 0; i < fields_.size(); ++i)
      s += fmt::format("  {}: {}{}\n", kiln::json_quote(fields_[i].first), fields_[i].second,
                       i + 1 < fields_.size() ? "," : "");
    return s + "}\n";
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// Writes `text` to `path`: "" when done, else what failed (the caller throws its own error naming its flag).
inline std::string write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return "cannot open " + path + " for writing; check the folder exists";
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  return ok ? "" : "failed writing " + path + " (disk full?)";
}

}  // namespace kiln::benchutil
