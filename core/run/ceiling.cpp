// The machine's ceiling for `trainer bench`: one large convolution and one GEMM timed through the CPU kernels, cached per machine.
#include "core/run/ceiling.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/io/file.h"
#include "core/ops/conv2d.h"
#include "core/ops/dense.h"
#include "core/ops/elementwise.h"
#include "core/runtime/cpu_info.h"

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

// A tensor of `s` on `ctx` holding small values that vary (the arithmetic does not depend on them;
// zeros or denormals could only make it look faster), of type t through the elementwise convert.
Tensor filled(OpContext& ctx, const Shape& s, DType t) {
  std::vector<float> h(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.01f * float(int(i % 13) - 6);
  Tensor f = ctx.empty(s);
  ctx.copy_from_host(f.data(), h.data(), f.bytes());
  if (t == DType::F32) return f;
  Tensor x = ctx.empty(s, t);
  make_kernel<ElementwiseKernel>(ctx, {})->convert(f, x);
  return x;
}

// The best of `reps` timings of f() after two untimed calls (the first builds primitives).
template <class F>
double best_seconds(OpContext& ctx, int reps, F&& f) {
  for (int i = 0; i < 2; ++i) f();
  ctx.synchronize();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    ctx.synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

Ceiling measure(int threads, Precision precision) {
  std::unique_ptr<OpContext> ctx = make_context(Device::cpu(), ContextOptions{threads, precision});
  ctx->bind_thread();
  const DType act = precision == Precision::BF16 ? DType::BF16 : DType::F32;
  Ceiling c;
  {  // 3x3 'same', 32 x 32 x 128 -> 128, batch 32: forward, dx, dw (3x the forward's FLOPs)
    Conv2dParams p;
    p.filters = 128;
    p.kh = p.kw = 3;
    p.padding = Padding::Same;
    p.bias = false;
    auto k = make_kernel<Conv2dKernel>(*ctx, p);
    const Shape xs{32, 32, 32, 128};
    Tensor x = filled(*ctx, xs, act), w = filled(*ctx, {3, 3, 128, 128}, DType::F32);
    Tensor y = ctx->empty(xs, act), dy = filled(*ctx, xs, act), dx = ctx->empty(xs, act);
    Tensor dw = ctx->empty({3, 3, 128, 128}), none;
    const double flops = 3.0 * 2.0 * 32 * 32 * 32 * 128 * 9 * 128;
    const double s = best_seconds(*ctx, 3, [&] {
      k->forward(x, w, none, y);
      k->backward(x, w, dy, dx, dw, none);
    });
    c.conv_gflops = flops / s / 1e9;
  }
  {  // dense 1024 -> 1024 on 512 rows: forward, dx, dw
    auto k = make_kernel<DenseKernel>(*ctx, DenseParams{1024, false});
    Tensor x = filled(*ctx, {512, 1024}, DType::F32), w = filled(*ctx, {1024, 1024}, DType::F32);
    Tensor y = ctx->empty({512, 1024}), dy = filled(*ctx, {512, 1024}, DType::F32), dx = ctx->empty({512, 1024});
    Tensor dw = ctx->empty({1024, 1024}), none;
    const double flops = 3.0 * 2.0 * 512 * 1024 * 1024;
    const double s = best_seconds(*ctx, 5, [&] {
      k->forward(x, w, none, y);
      k->backward(x, w, dy, dx, dw, none);
    });
    c.gemm_gflops = flops / s / 1e9;
  }
  return c;
}

std::string cache_key(int threads, Precision precision) {
  const CpuInfo cpu = cpu_info();
  return fmt::format("{} | {} | {} threads | {}", cpu.model.empty() ? "unknown CPU" : cpu.model, cpu.onednn_isa,
                     threads, precision_name(precision));
}

nlohmann::json read_cache(const std::string& path) {
  std::ifstream f(path);
  if (!f) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();  // unreadable: measured again and rewritten
}

}  // namespace

std::string ceiling_cache_path() {
  std::string dir;
  if (const char* d = std::getenv("TRAINER_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/trainer";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/trainer";
  }
  return dir.empty() ? "" : dir + "/ceilings.json";
}

std::optional<Ceiling> cpu_ceiling(int threads, Precision precision, bool again) {
  const char* mode = std::getenv("TRAINER_CEILING");
  const std::string m = mode ? mode : "";
  if (m == "off" || precision == Precision::FP16) return std::nullopt;
  const std::string key = cache_key(threads, precision);
  const std::string path = ceiling_cache_path();
  nlohmann::json cache = path.empty() ? nlohmann::json::object() : read_cache(path);
  if (!again && m != "measure" && cache.contains(key)) {
    const nlohmann::json& e = cache[key];
    if (e.is_object() && e.value("conv_gflops", 0.0) > 0 && e.value("gemm_gflops", 0.0) > 0)
      return Ceiling{e["conv_gflops"].get<double>(), e["gemm_gflops"].get<double>(), true, key};
  }
  Ceiling c;
  try {
    c = measure(threads, precision);
  } catch (const DeviceError&) {  // bf16 on a CPU without AVX-512: no ceiling to compare with
    return std::nullopt;
  }
  c.key = key;
  if (!path.empty()) {
    cache[key] = {{"conv_gflops", c.conv_gflops}, {"gemm_gflops", c.gemm_gflops}};
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    try {
      write_file_atomic(path, cache.dump(1) + "\n");
    } catch (const FileError&) {  // a read-only home: the ceiling is measured each time
    }
  }
  return c;
}

}  // namespace trainer
