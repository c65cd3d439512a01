// The CUDA backend's host-side policies, checked on the CPU: the cuDNN workspace budget and the order convolution algorithm candidates are tried in.
#include <catch2/catch.hpp>

#include "core/ops/cuda/workspace_policy.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_conv_algo.h"
#include "core/ops/cuda/cuda_devices.h"
#endif

using namespace trainer;

namespace {
constexpr size_t kMiB = size_t(1) << 20, kGiB = size_t(1) << 30;
}

TEST_CASE("cuda policy: the workspace budget depends on the device's total memory and the config alone") {
  // devices.workspace_mb wins whatever the device.
  CHECK(cuda::workspace_budget(80 * kGiB, 300) == 300 * kMiB);
  CHECK(cuda::workspace_budget(0, 1) == kMiB);
  // Automatic: 1/16 of the device, at most 4 GiB, whole MiB.
  CHECK(cuda::workspace_budget(size_t(81559) * kMiB, 0) == 4096 * kMiB);  // H100 80GB: capped
  CHECK(cuda::workspace_budget(16 * kGiB, 0) == kGiB);
  CHECK(cuda::workspace_budget(24 * kGiB, 0) == 1536 * kMiB);
  CHECK(cuda::workspace_budget(size_t(8) * kGiB + 12345, 0) == 512 * kMiB);
  CHECK(cuda::workspace_budget(0, 0) == 0);
  CHECK(cuda::workspace_budget(0, -5) == 0);  // a negative value is "automatic" (the config rejects it earlier)
  // A pure function: the same arguments, the same budget (nothing read from the device).
  for (size_t total : {size_t(0), 3 * kGiB, 80 * kGiB, 141 * kGiB})
    CHECK(cuda::workspace_budget(total, 0) == cuda::workspace_budget(total, 0));
  // Monotone in the device's size up to the cap.
  size_t prev = 0;
  for (size_t g = 1; g <= 128; ++g) {
    const size_t b = cuda::workspace_budget(g * kGiB, 0);
    CHECK(b >= prev);
    CHECK(b <= cuda::kAutoWorkspaceCap);
    prev = b;
  }
}

#ifdef TRAINER_HAVE_CUDA
TEST_CASE("cuda policy: convolution candidates: deterministic ones only, tensor cores first for bf16/f16, FMA as their last resort") {
  const auto det = CUDNN_DETERMINISTIC, nondet = CUDNN_NON_DETERMINISTIC;
  const auto ok = CUDNN_STATUS_SUCCESS, bad = CUDNN_STATUS_NOT_SUPPORTED;
  // cuDNN's order, fastest first.
  const std::vector<ConvCandidate> list = {
      {0, ok, det, CUDNN_FMA_MATH, 0},         // 0: FMA
      {1, ok, nondet, CUDNN_TENSOR_OP_MATH, 0},  // 1: atomics: never
      {2, ok, det, CUDNN_TENSOR_OP_MATH, 0},   // 2
      {3, bad, det, CUDNN_TENSOR_OP_MATH, 0},  // 3: not supported: never
      {4, ok, det, CUDNN_DEFAULT_MATH, 0},     // 4
      {5, ok, det, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, 0},  // 5: converts f32 through f16: never
      {6, ok, det, CUDNN_FMA_MATH, 0},         // 6: FMA
  };
  using V = std::vector<size_t>;
  CHECK(conv_try_order(list, DType::F32, false) == V{0, 6});        // strict fp32: FMA only
  CHECK(conv_try_order(list, DType::F32, true) == V{0, 2, 4, 6});   // TF32 allowed: cuDNN's order
  CHECK(conv_try_order(list, DType::BF16, false) == V{2, 4, 0, 6}); // tensor cores, then FMA
  CHECK(conv_try_order(list, DType::F16, true) == V{2, 4, 0, 6});
  // The 3-channel stem: cuDNN offers only FMA kernels for bf16 NHWC; they are taken, not refused.
  const std::vector<ConvCandidate> stem = {{1, ok, det, CUDNN_FMA_MATH, 4096}, {0, ok, det, CUDNN_FMA_MATH, 0}};
  CHECK(conv_try_order(stem, DType::BF16, false) == V{0, 1});
  CHECK(conv_try_order({}, DType::BF16, false).empty());
  CHECK(conv_math(DType::F32, false) == CUDNN_FMA_MATH);
  CHECK(conv_math(DType::BF16, false) == CUDNN_TENSOR_OP_MATH);
  CHECK(std::string(math_name(CUDNN_FMA_MATH)) == "FMA");
}
#endif

#ifdef TRAINER_HAVE_CUDA
TEST_CASE("cudnn version: the number cudnnGetVersion returns read as trainer devices prints it (9.x and 8.x encodings)") {
  CHECK(cudnn_version_string(91900) == "9.19.0");
  CHECK(cudnn_version_string(91002) == "9.10.2");
  CHECK(cudnn_version_string(90100) == "9.1.0");
  CHECK(cudnn_version_string(8907) == "8.9.7");
  CHECK(cudnn_version_string(CUDNN_VERSION) ==
        std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." + std::to_string(CUDNN_PATCHLEVEL));
}
#endif
