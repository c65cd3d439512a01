// cuDNN's answer to our attention graphs without a GPU: plans built for an H100's and an H200's recorded properties (cuDNN ≥ 9.8's deviceless compilation), so its support checks and kernel compilation run on the CPU machines too.
#include <catch2/catch.hpp>

#ifdef TRAINER_HAVE_CUDA
#include <dlfcn.h>

#include <string>
#include <vector>

#include "core/ops/cuda/cuda_attention_cudnn.h"
#include "core/ops/cuda/cudnn_graph.h"
#include "skip.h"

using namespace trainer;

namespace {

// The properties cuDNN reads of a device (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION's keys), as
// NVIDIA's data sheets and cudaGetDeviceProperties give them for the SXM H100 80GB and H200 141GB
// (sm_90, 132 SMs, 50 MiB of L2, 227 KiB of shared memory per block opt-in), with CUDA 13.0's
// driver version.
std::string hopper(const char* name, int64_t mem_clock_khz, int64_t total_mem) {
  return std::string("{\"deviceName\": \"") + name +
         "\", \"deviceVer\": 900, \"driverVer\": 13000, \"maxGridSize\": [2147483647, 65535, 65535], "
         "\"maxBlockSize\": [1024, 1024, 64], \"regsPerBlock\": 65536, \"multiProcessorCount\": 132, "
         "\"smClockRateKHz\": 1980000, \"memClockRateKHz\": " + std::to_string(mem_clock_khz) +
         ", \"l2CacheSize\": 52428800, \"warpSize\": 32, \"maxSharedMemoryPerBlock\": 49152, "
         "\"maxSharedMemoryPerBlockOptin\": 232448, \"reservedSharedMemoryPerBlock\": 1024, "
         "\"maxRegistersPerSM\": 65536, \"pciDeviceId\": 0, \"maxCtasPerSM\": 32, \"maxThreadsPerBlock\": 1024, "
         "\"maxThreadsPerSM\": 2048, \"isTccDriver\": 0, \"supportCoopLaunch\": 1, \"totalGlobalMem\": " +
         std::to_string(total_mem) + ", \"cudaDeviceId\": 0}";
}

// cuDNN compiles its runtime-fused kernels with NVRTC and loads them through the driver library:
// the machine's libcuda.so.1 where there is one, else the CUDA toolkit's stub (same soname: loaded
// first, it is the one cuDNN's dlopen finds), which refuses every module load. Null: neither.
const char* driver_library() {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) return "the driver";
  const std::string stub = std::string(TRAINER_CUDA_LIBDIR) + "/stubs/libcuda.so";
  if (dlopen(stub.c_str(), RTLD_NOW | RTLD_GLOBAL)) return "the toolkit's stub";
  return nullptr;
}

struct Case {
  const char* what;
  int64_t B, T, S, H, D;
  bool causal;
};

}  // namespace

// Every shape the fast path takes (cuda::AttentionCudnn::takes) must meet an engine that passes
// cuDNN's support checks and compiles: a plan where the driver is real, a refusal at the module load
// and nothing earlier under the stub. (A graph cuDNN does not recognise gets no candidate at all:
// P in f32 instead of the low type did, 2026-11-29.)
TEST_CASE("attention (cuDNN graphs): plans for an H200's and an H100's properties, without a GPU: forward and "
          "backward, bf16 and f16, GPT-2 124M's and gpt_bytes' shapes, odd lengths, cross-attention") {
  const char* driver = driver_library();
  if (!driver) TRAINER_SKIP(Package, "neither libcuda.so.1 nor the CUDA toolkit's stub libcuda.so loads");
  if (cudnnGetVersion() < cuda::AttentionCudnn::kAnyKeysVersion)
    TRAINER_SKIP(Package, "cuDNN " << cudnnGetVersion() << " is older than 9.16, which these shapes' backward needs");
  const cudnn_graph::Desc h200 = cudnn_graph::device_properties(hopper("NVIDIA H200", 3201000, 150754820096));
  const cudnn_graph::Desc h100 = cudnn_graph::device_properties(hopper("NVIDIA H100 80GB HBM3", 2619000, 85520809984));
  const Case gpt2{"GPT-2 124M", 4, 1024, 1024, 12, 64, true};
  // Each case compiles a kernel (~0.6 s): the H200 takes every shape in bf16, f16 two of them, the
  // H100 (the same sm_90 kernels, other limits) GPT-2's.
  std::vector<std::tuple<const cudnn_graph::Desc*, const char*, Case, cudnnDataType_t>> cases;
  for (const Case& c : {gpt2, Case{"gpt_bytes", 32, 128, 128, 4, 32, true}, Case{"odd lengths", 3, 77, 77, 5, 16, true},
                        Case{"cross-attention", 2, 50, 130, 3, 64, false}, Case{"one query", 2, 1, 9, 2, 8, true},
                        Case{"wide heads", 1, 40, 40, 2, 128, true}})
    cases.emplace_back(&h200, "H200", c, CUDNN_DATA_BFLOAT16);
  cases.emplace_back(&h200, "H200", gpt2, CUDNN_DATA_HALF);
  cases.emplace_back(&h200, "H200", Case{"odd lengths", 3, 77, 77, 5, 16, true}, CUDNN_DATA_HALF);
  cases.emplace_back(&h100, "H100", gpt2, CUDNN_DATA_BFLOAT16);
  for (const auto& [props, device, s, low] : cases)
    for (const bool backward : {false, true}) {
      AttentionDims d;
      d.B = s.B, d.T = s.T, d.S = s.S, d.H = s.H, d.Dk = d.Dv = s.D, d.causal = s.causal;
      d.scale = 0.125f;
      INFO(device << ", " << s.what << " (B " << s.B << ", T " << s.T << ", S " << s.S << ", H " << s.H << ", D "
                  << s.D << "), " << (low == CUDNN_DATA_BFLOAT16 ? "bf16" : "f16") << ", "
                  << (backward ? "backward" : "forward") << ", driver library: " << driver);
      REQUIRE(cuda::AttentionCudnn::takes(d, backward));
      std::vector<cudnn_graph::Refusal> refused;
      const auto plan = cudnn_graph::build(backward ? attn_graph::backward(d) : attn_graph::forward(d), low,
                                           cudnn_graph::Target{nullptr, props}, &refused, 1);
      INFO(cudnn_graph::why_not(refused));
      if (plan) continue;  // a real driver: the plan is built
      REQUIRE(refused.size() == 1);
      CHECK(refused[0].status == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    }
  // What the fast path leaves to attn_gemm: a head width that is not a multiple of 8 (cuDNN's
  // heuristics offer nothing for it), and backward with one query and one key (which cudnn-frontend
  // refuses, sdpa_support_surface.h, though the backend's heuristics offer an engine).
  AttentionDims odd;
  odd.B = 2, odd.T = odd.S = 16, odd.H = 2, odd.Dk = odd.Dv = 12, odd.causal = true, odd.scale = 0.3f;
  CHECK_FALSE(cuda::AttentionCudnn::takes(odd, false));
  CHECK_FALSE(cudnn_graph::build(attn_graph::forward(odd), CUDNN_DATA_BFLOAT16, cudnn_graph::Target{nullptr, &h200}));
  AttentionDims one;
  one.B = 2, one.T = one.S = 1, one.H = 2, one.Dk = one.Dv = 16, one.causal = true, one.scale = 0.25f;
  CHECK_FALSE(cuda::AttentionCudnn::takes(one, true));
  CHECK(cuda::AttentionCudnn::takes(one, false));
  // The version rules: backward for any key count from 9.16, multiples of 128 before; nothing on
  // 9.10.0/9.10.1 or before 9.6.
  AttentionDims gpt = odd;
  gpt.Dk = gpt.Dv = 64, gpt.T = gpt.S = 1024;
  AttentionDims odd_keys = gpt;
  odd_keys.T = odd_keys.S = 77;
  CHECK(cuda::AttentionCudnn::takes(odd_keys, true, 91600));
  CHECK_FALSE(cuda::AttentionCudnn::takes(odd_keys, true, 91500));
  CHECK(cuda::AttentionCudnn::takes(odd_keys, false, 91500));
  CHECK(cuda::AttentionCudnn::takes(gpt, true, 91500));
  CHECK_FALSE(cuda::AttentionCudnn::takes(gpt, false, 91001));
  CHECK(cuda::AttentionCudnn::takes(gpt, false, 91002));
  CHECK_FALSE(cuda::AttentionCudnn::takes(gpt, false, 90500));
}
#endif
