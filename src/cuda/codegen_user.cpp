// Source generation for user ElementwiseKernels and ReductionKernels (see
// codegen_user.hpp for the argument layouts and user_kernels.cpp for the
// host side), from the templates user_*.cuh.in of src/cuda/kernels after the
// prelude and user_prelude.cuh.
//
// Elementwise: the built-ins' grid-stride loop; offsets are the index for the
// contiguous layout, else the built-ins' coalesced strided offsets (magic-number
// division in 32-bit mode). Per element, inputs are const locals converted to
// their value type, outputs are references (16-bit floats: a float local that is
// rounded and stored after the user's code), then the user's operation.
//
// Reduction: `group` threads (1..256) take one (output, split) task; each walks
// its share of the reduced elements (map_expr, then reduce_expr into a private
// accumulator), the group meets in a shared-memory tree, and lane 0 runs
// post_map_expr (or writes a partial for a second pass). Tasks are numbered
// output-fastest, so with group 1 adjacent threads take adjacent outputs (the
// coalesced order when reducing an outer axis). Without an identity, the first
// element seeds each accumulator and a flag tracks empty ones.
#include "cuda/codegen_user.hpp"

#include <string>

#include "cuda/codegen.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/user_elementwise.cuh.in.hpp"
#include "kernel_sources/user_prelude.cuh.hpp"
#include "kernel_sources/user_reduction.cuh.in.hpp"
#include "kernel_sources/user_reduction_tree.cuh.in.hpp"
#include "kernel_sources/user_reduction_tree_flagged.cuh.in.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

namespace {

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

/// The placeholder typedefs, then the user's preamble.
std::string type_preamble(const std::vector<std::pair<std::string, DType>>& types, const std::string& preamble) {
  std::string s;
  for (const auto& [placeholder, dtype] : types)
    s += "typedef " + std::string(user_value_type(dtype)) + " " + placeholder + ";  // " +
         std::string(dtype_name(dtype)) + "\n";
  if (!preamble.empty()) s += preamble + "\n";
  return s;
}

std::string raw_type(const UserParamSpec& p) {
  return "kd::raw_array<" + std::string(device_type_name(p.storage)) + ", " + std::to_string(p.raw_ndim) + ", " +
         (p.raw_contiguous ? "true" : "false") + ">";
}

/// The user parameters of the kernel's signature (arrays as kiln_ptr_<name> pointers: no generated name starts with
/// kiln_ptr_).
std::string parameter_list(const std::vector<UserParamSpec>& params) {
  std::string s;
  for (const UserParamSpec& p : params) {
    s += s.empty() ? "" : ", ";
    switch (p.kind) {
      case UserArgKind::Array:
        s += std::string(p.output ? "" : "const ") + device_type_name(p.storage) + "* kiln_ptr_" + p.name;
        break;
      case UserArgKind::Scalar:
        s += "const " + std::string(user_value_type(p.dtype)) + " " + p.name;
        break;
      case UserArgKind::Raw:
        s += raw_type(p) + " " + p.name;
        break;
    }
  }
  return s;
}

/// `const T x = ...;` for a non-raw input read at `offset`.
std::string input_local(const UserParamSpec& p, const std::string& offset, const std::string& indent) {
  const std::string v = user_value_type(p.dtype);
  return indent + "const " + v + " " + p.name + " = kd::cast<" + v + ">(kiln_ptr_" + p.name + "[" + offset + "]);\n";
}

/// The output's variable before the user's code: a reference, or a float for 16-bit floats.
std::string output_local(const UserParamSpec& p, const std::string& offset, const std::string& indent) {
  if (is_half(p.dtype)) return indent + "float " + p.name + " = kd::widen(kiln_ptr_" + p.name + "[" + offset + "]);\n";
  return indent + std::string(user_value_type(p.dtype)) + "& " + p.name + " = kiln_ptr_" + p.name + "[" + offset +
         "];\n";
}

/// Stores a 16-bit output's float after the user's code (nothing for references).
std::string output_store(const UserParamSpec& p, const std::string& offset, const std::string& indent) {
  if (!is_half(p.dtype)) return "";
  return indent + "kiln_ptr_" + p.name + "[" + offset + "] = kd::cast<" + device_type_name(p.dtype) + ">(" + p.name +
         ");\n";
}

std::string index_types(bool index64) {
  return index64 ? "typedef unsigned long long kiln_idx_t;\ntypedef long long kiln_off_t;\n"
                 : "typedef unsigned int kiln_idx_t;\ntypedef int kiln_off_t;\n";
}

void check_name(const std::string& name, const char* what) {
  if (name.empty()) throw ValueError(std::string(what) + " codegen: the kernel has no name");
}

}  // namespace

const char* user_value_type(DType t) { return is_half(t) ? "float" : device_type_name(t); }

// ------------------------------------------------------------------ elementwise

std::string user_elementwise_source(const UserElementwiseSpec& spec) {
  check_name(spec.name, "ElementwiseKernel");
  if (!spec.contiguous && (spec.ndim < 1 || spec.ndim > kMaxRank))
    throw ValueError("ElementwiseKernel codegen: rank " + std::to_string(spec.ndim) + " is outside 1.." +
                     std::to_string(kMaxRank));
  int operands = 0;
  for (const UserParamSpec& p : spec.params) operands += p.kind == UserArgKind::Array ? 1 : 0;
  std::string params_struct, extra;
  if (!spec.contiguous) {
    const int nd = spec.ndim;
    const int words = (spec.index64 ? nd : 3 * nd) + operands * nd;
    params_struct = "struct kiln_params_t { kiln_idx_t w[" + std::to_string(words > 0 ? words : 1) + "]; };";
    extra = "const kiln_params_t kiln_p, ";
  }
  const std::string params = parameter_list(spec.params);
  const std::string in = "    ";
  std::string offsets_code, locals, stores;
  if (!spec.contiguous && operands > 0) {
    StridedNames names;
    names.params = "kiln_p";
    names.index = "kiln_i";
    names.rem = "kiln_rem";
    names.offset = "kiln_o";
    names.idx = "kiln_idx_t";
    names.off = "kiln_off_t";
    emit_strided_offsets(offsets_code, spec.ndim, operands, spec.index64, in, names);
  }
  std::vector<std::string> offsets;
  int operand = 0;
  for (const UserParamSpec& p : spec.params) {
    if (p.kind != UserArgKind::Array) {
      offsets.emplace_back();
      continue;
    }
    offsets.push_back(spec.contiguous ? std::string("kiln_i") : "kiln_o" + std::to_string(operand));
    ++operand;
    locals += p.output ? output_local(p, offsets.back(), in) : input_local(p, offsets.back(), in);
  }
  for (size_t k = 0; k < spec.params.size(); ++k)
    if (spec.params[k].kind == UserArgKind::Array && spec.params[k].output)
      stores += output_store(spec.params[k], offsets[k], in);
  return device_prelude() + std::string(kernel_sources::user_prelude_cuh) +
         fill_template("user_elementwise.cuh.in", kernel_sources::user_elementwise_cuh_in,
                       {{"name", spec.name},
                        {"types", type_preamble(spec.types, spec.preamble)},
                        {"index_types", index_types(spec.index64)},
                        {"params_struct", params_struct},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", params + (params.empty() ? "" : ", ") + extra},
                        {"offsets", offsets_code},
                        {"locals", locals},
                        {"operation", spec.operation},
                        {"stores", stores}});
}

// ------------------------------------------------------------------ reduction

std::string user_reduction_source(const UserReductionSpec& spec) {
  check_name(spec.name, "ReductionKernel");
  const int kn = spec.kept_ndim, rn = spec.reduced_ndim, g = spec.group;
  const auto fail = [&](const std::string& why) {
    throw ValueError("ReductionKernel codegen (" + spec.name + "): " + why);
  };
  if (kn < 0 || kn > kMaxRank) fail("kept rank out of range");
  if (rn < 1 || rn > kMaxRank) fail("reduced rank out of range");
  if (g < 1 || g > kBlockSize || (g & (g - 1)) != 0) fail("group must be a power of two <= the block size");
  std::vector<const UserParamSpec*> inputs, outputs;
  for (const UserParamSpec& p : spec.params) {
    if (p.kind != UserArgKind::Array) continue;
    (p.output ? outputs : inputs).push_back(&p);
  }
  const int num_in = static_cast<int>(inputs.size()), num_out = static_cast<int>(outputs.size());
  const int kin = kn, kout = kn + num_in * kn, red_size = kn * (1 + num_in + num_out), red_in = red_size + rn;
  const int tail = red_in + num_in * rn;
  const bool identity = !spec.identity.empty();
  const std::string R = "kiln_reduce_t";

  std::string shared;
  if (g > 1) {
    shared = "  __shared__ " + R + " kiln_smem[" + std::to_string(kBlockSize) + "];\n";
    if (!identity) shared += "  __shared__ bool kiln_shas[" + std::to_string(kBlockSize) + "];\n";
  }
  std::string kept_declarations;
  for (int k = 0; k < num_in; ++k) kept_declarations += ", kiln_ki" + std::to_string(k) + " = 0";
  for (int m = 0; m < num_out; ++m) kept_declarations += ", kiln_ko" + std::to_string(m) + " = 0";
  std::string kept;
  if (kn > 0) {
    kept += "      kiln_idx_t kiln_rem = kiln_o;\n";
    const auto add = [&](const std::string& dim, const std::string& amount) {
      std::string t;
      for (int k = 0; k < num_in; ++k)
        t += "        kiln_ki" + std::to_string(k) + " += " + amount + " * (kiln_off_t)kiln_p.w[" +
             std::to_string(kin + k * kn) + " + " + dim + "];\n";
      for (int m = 0; m < num_out; ++m)
        t += "        kiln_ko" + std::to_string(m) + " += " + amount + " * (kiln_off_t)kiln_p.w[" +
             std::to_string(kout + m * kn) + " + " + dim + "];\n";
      return t;
    };
    if (kn > 1) {
      kept += "#pragma unroll\n      for (int d = " + std::to_string(kn - 1) + "; d >= 1; --d) {\n";
      kept += "        const kiln_idx_t q = kiln_rem / kiln_p.w[d];\n";
      kept += "        const kiln_off_t r = (kiln_off_t)(kiln_rem - q * kiln_p.w[d]);\n        kiln_rem = q;\n";
      kept += add("d", "r");
      kept += "      }\n";
    }
    kept += "      {\n" + add("0", "(kiln_off_t)kiln_rem") + "      }\n";
  }
  std::string value;
  if (spec.pass == UserReducePass::FromPartials) {
    value = "        const " + R + " kiln_v = kiln_partials_in[(kiln_off_t)kiln_r * (kiln_off_t)kiln_num_out + " +
            "(kiln_off_t)kiln_o];\n";
  } else {
    value = "        kiln_idx_t kiln_rrem = kiln_r;\n";
    for (int k = 0; k < num_in; ++k)
      value += "        kiln_off_t kiln_ri" + std::to_string(k) + " = kiln_ki" + std::to_string(k) + ";\n";
    const auto add = [&](const std::string& dim, const std::string& amount) {
      std::string t;
      for (int k = 0; k < num_in; ++k)
        t += "          kiln_ri" + std::to_string(k) + " += " + amount + " * (kiln_off_t)kiln_p.w[" +
             std::to_string(red_in + k * rn) + " + " + dim + "];\n";
      return t;
    };
    if (rn > 1) {
      value += "#pragma unroll\n        for (int d = " + std::to_string(rn - 1) + "; d >= 1; --d) {\n";
      value += "          const kiln_idx_t q = kiln_rrem / kiln_p.w[" + std::to_string(red_size) + " + d];\n";
      value += "          const kiln_off_t r = (kiln_off_t)(kiln_rrem - q * kiln_p.w[" + std::to_string(red_size) +
               " + d]);\n          kiln_rrem = q;\n";
      value += add("d", "r");
      value += "        }\n";
    }
    value += "        {\n" + add("0", "(kiln_off_t)kiln_rrem") + "        }\n";
    for (int k = 0; k < num_in; ++k)
      value += input_local(*inputs[static_cast<size_t>(k)], "kiln_ri" + std::to_string(k), "        ");
    value += "        const " + R + " kiln_v = (" + R + ")(" + spec.map_expr + ");\n";
  }
  const std::string accumulate =
      identity ? "        kiln_acc = kiln_combine(kiln_acc, kiln_v);\n"
               : "        if (kiln_has) {\n          kiln_acc = kiln_combine(kiln_acc, kiln_v);\n        } else {\n"
                 "          kiln_acc = kiln_v;\n          kiln_has = true;\n        }\n";
  std::string tree;
  if (g > 1) {
    const std::vector<TemplateValue> values = {{"sync", g <= 32 ? "__syncwarp()" : "__syncthreads()"},
                                               {"half", std::to_string(g / 2)}};
    tree = identity ? fill_template("user_reduction_tree.cuh.in", kernel_sources::user_reduction_tree_cuh_in, values)
                    : fill_template("user_reduction_tree_flagged.cuh.in",
                                    kernel_sources::user_reduction_tree_flagged_cuh_in, values);
  }
  if (!identity) tree += "    (void)kiln_has;\n";
  std::string finish;
  if (spec.pass == UserReducePass::ToPartials) {
    finish = "      kiln_partials_out[kiln_task] = kiln_acc;\n";
  } else {
    finish = "      const " + R + " a = kiln_acc;\n";
    for (int m = 0; m < num_out; ++m)
      finish += output_local(*outputs[static_cast<size_t>(m)], "kiln_ko" + std::to_string(m), "      ");
    finish += "      {\n" + spec.post_map_expr + "\n;\n      }\n";
    for (int m = 0; m < num_out; ++m)
      finish += output_store(*outputs[static_cast<size_t>(m)], "kiln_ko" + std::to_string(m), "      ");
  }
  const std::string params = parameter_list(spec.params);
  return device_prelude() + std::string(kernel_sources::user_prelude_cuh) +
         fill_template("user_reduction.cuh.in", kernel_sources::user_reduction_cuh_in,
                       {{"name", spec.name},
                        {"types", type_preamble(spec.types, spec.preamble)},
                        {"reduce_type", user_value_type(spec.reduce_type)},
                        {"index_types", index_types(spec.index64)},
                        {"param_words", std::to_string(tail + 4)},
                        {"block_size", std::to_string(kBlockSize)},
                        {"parameters", params + (params.empty() ? "" : ", ")},
                        {"reduce_expr", spec.reduce_expr},
                        {"shared", shared},
                        {"tail", std::to_string(tail)},
                        {"group", std::to_string(g)},
                        {"tasks_per_block", std::to_string(kBlockSize / g)},
                        {"initial", identity ? "(" + R + ")(" + spec.identity + ")" : R + "()"},
                        {"has_flag", identity ? "" : "    bool kiln_has = false;"},
                        {"kept_declarations", kept_declarations},
                        {"kept_offsets", kept},
                        {"value", value},
                        {"accumulate", accumulate},
                        {"tree", tree},
                        {"finish", finish}});
}

}  // namespace kiln::cuda_impl
