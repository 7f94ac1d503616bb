// Library version and build features.
#pragma once

#include <string>

namespace kiln {
inline constexpr const char* kVersion = "0.1.0";
/// True when this build has the CUDA backend.
bool built_with_cuda();
/// "kiln 0.1.0 (cpu, openblas)" style summary of the build.
std::string build_info();
}  // namespace kiln
