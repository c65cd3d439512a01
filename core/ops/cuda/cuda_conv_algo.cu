// cuDNN convolution algorithm choice under the context's workspace budget (deterministic candidates only, a line when the fastest does not fit).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/ops/cuda/cuda_conv_algo.h"
#include "core/ops/cuda/cuda_util.cuh"

// Determinism: BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 / _3 use atomics (cuDNN docs on
// reproducibility); cuDNN flags every candidate's determinism in its perf struct, and only
// CUDNN_DETERMINISTIC ones are taken. The fallbacks are deterministic too: FWD IMPLICIT_PRECOMP_GEMM
// (then IMPLICIT_GEMM), BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1.
// TRAINER_CUDNN_LOG=1 prints every choice to stderr (first GPU runs, benchmarks).
// TRAINER_CUDNN_FIND=1 (an experiment, off by default): the candidates come from cudnnFind*, which
// runs each algorithm once on buffers of its own and orders them by measured time, as PyTorch's
// cudnn.benchmark, instead of the heuristic's guess; the same filter then applies (deterministic,
// math type, workspace). It runs in the first step of a shape (synchronising, allocating inside
// cuDNN), never in a recorded one; measured times vary, so two runs may choose differently and
// their bits differ. Why it exists: on an H100 MobileNetV2's bf16 1x1 convolutions took ~0.3 ms
// each whatever their size (2026-11-27); this says whether the heuristic's choice is the cause.

namespace trainer {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// An environment switch: set, non-empty and not "0".
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && *e != '0';
}

bool find_mode() {
  static const bool on = env_on("TRAINER_CUDNN_FIND");
  return on;
}

bool log_all() {
  static const bool on = env_on("TRAINER_CUDNN_LOG");
  return on;
}

const char* pass_name(ConvPass p) {
  return p == ConvPass::Forward ? "forward" : p == ConvPass::BackwardData ? "backward data" : "backward filter";
}

// cuDNN's candidates for the pass, fastest first: the heuristic's (cudnnGet*_v7), or measured
// (cudnnFind*) under TRAINER_CUDNN_FIND. With TRAINER_CUDNN_LOG, measured times go to stderr.
std::vector<ConvCandidate> candidates(cudnnHandle_t h, const ConvDescs& d, ConvPass pass, const std::string& what) {
  std::vector<ConvCandidate> out;
  int max = 0, got = 0;
  const bool timed = find_mode();
  auto take = [&](const auto& perf) {
    for (int i = 0; i < got; ++i) {
      const auto& k = perf[size_t(i)];
      out.push_back({int(k.algo), k.status, k.determinism, k.mathType, k.memory});
      if (timed && log_all())
        std::fprintf(stderr, "conv2d %s %s: cudnnFind: algorithm %d (math %s, %s) %.4f ms%s\n", what.c_str(),
                     pass_name(pass), int(k.algo), math_name(k.mathType),
                     k.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "not deterministic", double(k.time),
                     k.status == CUDNN_STATUS_SUCCESS ? "" : " (failed)");
    }
  };
  if (pass == ConvPass::Forward) {
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(max, 1)));
    if (timed)
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, max, &got, perf.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, max, &got, perf.data()));
    take(perf);
  } else if (pass == ConvPass::BackwardData) {
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(max, 1)));
    if (timed)
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x, max, &got, perf.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, max, &got, perf.data()));
    take(perf);
  } else {
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(max, 1)));
    if (timed)
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w, max, &got, perf.data()));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, max, &got, perf.data()));
    take(perf);
  }
  return out;
}

// The workspace of `algo` with the descriptor's current math type.
cudnnStatus_t workspace_of(cudnnHandle_t h, const ConvDescs& d, ConvPass pass, int algo, size_t* bytes) {
  if (pass == ConvPass::Forward)
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo), bytes);
  if (pass == ConvPass::BackwardData)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo),
                                                        bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                        cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
}

std::vector<int> fallbacks(ConvPass pass) {
  if (pass == ConvPass::Forward)
    return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
  if (pass == ConvPass::BackwardData) return {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
  return {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
}

std::string mib(size_t bytes) { return cuda::cat((bytes + kMiB - 1) / kMiB, " MiB"); }

}  // namespace

cudnnMathType_t conv_math(DType t, bool tf32) {
  return t == DType::F32 && !tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

int conv_math_rank(DType t, bool tf32, cudnnMathType_t m) {
  const bool tensor = m == CUDNN_TENSOR_OP_MATH || m == CUDNN_DEFAULT_MATH;
  if (t == DType::F32) return m == CUDNN_FMA_MATH || (tf32 && tensor) ? 0 : -1;
  if (tensor) return 0;
  return m == CUDNN_FMA_MATH ? 1 : -1;  // CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: f32 data through f16, never
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA";
  }
  return "unknown";
}

std::vector<size_t> conv_try_order(const std::vector<ConvCandidate>& list, DType t, bool tf32) {
  std::vector<size_t> order;
  for (int rank = 0; rank <= 1; ++rank)
    for (size_t i = 0; i < list.size(); ++i) {
      const ConvCandidate& k = list[i];
      if (k.status == CUDNN_STATUS_SUCCESS && k.determinism == CUDNN_DETERMINISTIC && conv_math_rank(t, tf32, k.math) == rank)
        order.push_back(i);
    }
  return order;
}

void set_conv_math(const ConvDescs& d, cudnnMathType_t m) { CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, m)); }

namespace {

void say(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

// "conv2d <what> <pass>: cuDNN algorithm A (math M, W MiB of workspace)".
std::string choice(const std::string& what, ConvPass pass, const char* kind, int algo, cudnnMathType_t m, size_t ws) {
  return cuda::cat("conv2d ", what, " ", pass_name(pass), ": cuDNN ", kind, " algorithm ", algo, " (math ", math_name(m),
                   ", ", ws, " bytes of workspace)");
}

}  // namespace

ConvAlgo choose_conv_algo(CudaContext& c, const ConvDescs& d, ConvPass pass, DType t, const std::string& what) {
  cudnnHandle_t h = c.cudnn();
  const size_t budget = c.workspace_budget();
  set_conv_math(d, conv_math(t, c.tf32()));
  const std::vector<ConvCandidate> list = candidates(h, d, pass, what);
  const ConvCandidate* passed_over = nullptr;  // the fastest usable candidate, when it did not fit
  size_t passed_over_ws = 0;
  for (size_t i : conv_try_order(list, t, c.tf32())) {
    const ConvCandidate& k = list[i];
    set_conv_math(d, k.math);
    size_t ws = 0;
    if (workspace_of(h, d, pass, k.algo, &ws) != CUDNN_STATUS_SUCCESS) continue;
    ws = std::max(ws, k.memory);
    if (ws > budget) {
      if (!passed_over) passed_over = &k, passed_over_ws = ws;
      continue;
    }
    const ConvAlgo a{k.algo, k.math, ws};
    const bool last_resort = conv_math_rank(t, c.tf32(), k.math) > 0;
    if (passed_over)
      say(cuda::cat("note: ", choice(what, pass, "heuristic", a.algo, a.math, ws), " instead of the faster ",
                    passed_over->algo, ", which needs ", mib(passed_over_ws), ", over ", c.device().str(),
                    "'s workspace budget of ", mib(budget), " (devices.workspace_mb)"));
    else if (last_resort)
      say(cuda::cat("note: ", choice(what, pass, "heuristic", a.algo, a.math, ws), ": no deterministic tensor-core ",
                    "algorithm for ", dtype_name(t), " at this shape, so plain FMA math"));
    else if (log_all())
      say(choice(what, pass, "heuristic", a.algo, a.math, ws));
    return a;
  }
  // No heuristic candidate fits: the deterministic fallbacks, the first cuDNN supports, in the
  // preferred math type, then (bf16/f16) FMA.
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  std::vector<cudnnMathType_t> maths{conv_math(t, c.tf32())};
  if (t != DType::F32) maths.push_back(CUDNN_FMA_MATH);
  for (cudnnMathType_t m : maths)
    for (int algo : fallbacks(pass)) {
      set_conv_math(d, m);
      size_t ws = 0;
      last = workspace_of(h, d, pass, algo, &ws);
      if (last != CUDNN_STATUS_SUCCESS) continue;
      // Said where it costs speed for a known reason (the budget, FMA math) and, once per process,
      // where cuDNN's heuristics offered nothing usable at all (a speed cliff that would otherwise
      // go unseen; TRAINER_CUDNN_LOG=1 names every one).
      static std::atomic<bool> told{false};
      const bool first_plain = !passed_over && ws <= budget && m == maths.front() && !told.exchange(true);
      if (passed_over || ws > budget || log_all() || m != maths.front() || first_plain)
        say(cuda::cat("note: ", choice(what, pass, "fallback", algo, m, ws),
                      passed_over ? ": no faster deterministic algorithm fits " : "",
                      passed_over ? c.device().str() : "", passed_over ? "'s workspace budget of " : "",
                      passed_over ? mib(budget) : "",
                      first_plain && !log_all() ? ": cuDNN's heuristics offered no usable deterministic algorithm "
                                                  "(later such fallbacks are not shown: TRAINER_CUDNN_LOG=1 names each)"
                                                : ""));
      return {algo, m, ws};
    }
  cuda_fail(cuda::cat("conv2d ", what, ": no deterministic cuDNN algorithm for ", pass_name(pass), " in ",
                      dtype_name(t))
                .c_str(),
            cudnnGetErrorString(last), __FILE__, __LINE__);
}

}  // namespace trainer
