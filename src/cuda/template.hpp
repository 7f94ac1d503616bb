// Kernel templates (internal): the files src/cuda/kernels/*.cuh.in are CUDA source with named placeholders
// `${name}` (ATen's jiterator template style), embedded at build time (cmake/KilnEmbed.cmake,
// "kernel_sources/<file>.hpp"). fill_template is the one way a generator turns one into source: every
// placeholder must get a value and every value must name a placeholder, so a template and its generator cannot
// drift apart silently. Values are inserted as they are (never scanned for placeholders themselves).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cuda_impl {

/// The value of placeholder `${name}`.
struct TemplateValue {
  std::string_view name;
  std::string value;
};

/// `text` (the template file `file`, for messages) with each `${name}` replaced by its value. Throws kiln::Error
/// ("internal error") naming the file and the placeholders when one in the text has no value, a value names no
/// placeholder of the text, a name repeats, or a `${` is not closed by a `}` around a name of [A-Za-z0-9_].
std::string fill_template(std::string_view file, std::string_view text, std::initializer_list<TemplateValue> values);
/// Same, values in a vector (for generators that build the list).
std::string fill_template(std::string_view file, std::string_view text, const std::vector<TemplateValue>& values);

/// The files fill_template has filled in this process, sorted (tests check that every template is used).
std::vector<std::string> filled_template_files();

}  // namespace kiln::cuda_impl
