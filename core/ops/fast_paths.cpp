// FastPaths: the names of the fast paths, TRAINER_FAST_PATHS and the older single switches.
#include "core/ops/fast_paths.h"

#include <array>
#include <cstdlib>
#include <stdexcept>

namespace trainer {
namespace {

constexpr std::array<FastPath, 19> kEvery = {FastPath::ConvWgrad,  FastPath::Conv1x1,    FastPath::AddDx,
                                             FastPath::BnGate,     FastPath::BnSiblings, FastPath::Slices,
                                             FastPath::BnAct,      FastPath::Gelu,       FastPath::AttnBlocks,
                                             FastPath::AttnGemm,   FastPath::AttnCudnn,  FastPath::PadFold,
                                             FastPath::SoftmaxExp, FastPath::AttnKernel, FastPath::AttnBf16,
                                             FastPath::AttnSoftmax, FastPath::DenseWgrad, FastPath::DwTiled,
                                             FastPath::Conv1x1Gemm};

std::string known() {
  std::string s = "all, default, none";
  for (FastPath p : kEvery) s += std::string(", ") + FastPaths::name(p);
  return s;
}

}  // namespace

const char* FastPaths::name(FastPath p) {
  switch (p) {
    case FastPath::ConvWgrad: return "conv_wgrad";
    case FastPath::Conv1x1: return "conv_1x1";
    case FastPath::AddDx: return "add_dx";
    case FastPath::BnGate: return "bn_gate";
    case FastPath::BnSiblings: return "bn_siblings";
    case FastPath::Slices: return "slices";
    case FastPath::BnAct: return "bn_act";
    case FastPath::Gelu: return "gelu";
    case FastPath::AttnBlocks: return "attn_blocks";
    case FastPath::AttnGemm: return "attn_gemm";
    case FastPath::AttnCudnn: return "attn_cudnn";
    case FastPath::PadFold: return "pad_fold";
    case FastPath::SoftmaxExp: return "softmax_exp";
    case FastPath::AttnKernel: return "attn_kernel";
    case FastPath::AttnBf16: return "attn_bf16";
    case FastPath::AttnSoftmax: return "attn_softmax";
    case FastPath::DenseWgrad: return "dense_wgrad";
    case FastPath::DwTiled: return "dw_tiled";
    case FastPath::Conv1x1Gemm: return "conv_1x1_gemm";
  }
  return "?";
}

FastPaths FastPaths::parse(std::string_view spec) {
  FastPaths f = defaults();
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    if (item == "all" || item == "none" || item == "default") {
      f = item == "all" ? all() : item == "none" ? none() : defaults();
      continue;
    }
    const bool off = item.front() == '-';
    if (off) item.remove_prefix(1);
    bool found = false;
    for (FastPath p : kEvery)
      if (item == name(p)) {
        f = f.with(p, !off);
        found = true;
      }
    if (!found)
      throw std::invalid_argument("unknown fast path '" + std::string(item) + "' (known: " + known() +
                                  "; '-name' turns one off)");
  }
  return f;
}

FastPaths FastPaths::from_env() {
  const char* spec = std::getenv("TRAINER_FAST_PATHS");
  FastPaths f = spec ? parse(spec) : defaults();
  const char* c1 = std::getenv("TRAINER_CONV_1X1");
  if (c1 && std::string_view(c1) == "onednn") f = f.with(FastPath::Conv1x1, false);
  const char* wg = std::getenv("TRAINER_CONV_WGRAD");
  if (wg && std::string_view(wg) == "onednn") f = f.with(FastPath::ConvWgrad, false);
  return f;
}

std::string FastPaths::str() const {
  if (on_ == kDefault) return "default";
  if (on_ == kAll) return "all";
  if (on_ == 0) return "none";
  std::string s;
  for (FastPath p : kEvery) {
    if (!has(p)) continue;
    if (!s.empty()) s += ',';
    s += name(p);
  }
  return s;
}

}  // namespace trainer
