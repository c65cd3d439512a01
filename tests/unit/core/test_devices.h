// The devices the engine tests run on: the CPU always, the first visible GPU when CUDA is built in, and the mixed precisions each supports.
// A test case that loops over test_devices() or mixed_cases() is tagged [backends]: CTest runs its
// CPU part and its GPU part as two entries (../backend_choice.h).
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../backend_choice.h"
#include "../cpu_bf16.h"
#include "core/ops/context.h"
#include "skip.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_devices.h"
#endif

namespace trainer::test {

struct TestDevice {
  Device device;
  std::string name;                // "cpu", "cuda:0": a Catch2 section name
  std::vector<Precision> mixed;    // the low precisions it trains in (cpu: bf16 with AVX-512; GPU: bf16 from 8.0, fp16)
};

namespace detail {
struct FoundDevices {
  std::vector<TestDevice> all;  // the CPU, then the first GPU where one runs here
  std::string gpu_missing;      // why no GPU runs here ("" when one does)
};

inline FoundDevices find_devices() {
  FoundDevices f;
  // bf16 where the CPU runs it (oneDNN needs AVX-512); mixed_cases() says when it does not.
  f.all.push_back({Device::cpu(0), "cpu", {}});
  if (cpu_bf16_refusal().empty()) f.all[0].mixed.push_back(Precision::BF16);
#ifdef TRAINER_HAVE_CUDA
  std::string why;
  std::vector<GpuInfo> gpus = cuda_devices(&why);
  if (gpus.empty()) {
    f.gpu_missing = "cuda: no GPU visible (" + why + ")";
  } else {
    TestDevice d{Device::cuda(gpus[0].index), Device::cuda(gpus[0].index).str(), {}};
    if (gpus[0].cc_major >= 8) d.mixed.push_back(Precision::BF16);
    d.mixed.push_back(Precision::FP16);
    f.all.push_back(d);
  }
#else
  f.gpu_missing = "cuda: CUDA is not built in (no nvcc found when the build was configured)";
#endif
  return f;
}
}  // namespace detail

inline const detail::FoundDevices& found_devices() {
  static const detail::FoundDevices f = detail::find_devices();
  return f;
}

// The devices a [backends] test case runs on in this process (TRAINER_TEST_BACKEND,
// ../backend_choice.h): the CPU, the first GPU, or both. A chosen GPU that cannot run here is
// recorded as a skip (Missing::Gpu) and left out.
inline const std::vector<TestDevice>& test_devices() {
  const BackendChoice choice = backend_choice();
  static const std::vector<TestDevice> chosen = [&] {
    std::vector<TestDevice> out;
    for (const TestDevice& d : found_devices().all)
      if (d.device.is_cpu() ? choice.cpu : choice.cuda) out.push_back(d);
    return out;
  }();
  if (choice.cuda && !found_devices().gpu_missing.empty()) record_skip(Missing::Gpu, found_devices().gpu_missing);
  return chosen;
}

// The first GPU, for test cases of the GPU alone (untagged, whatever TRAINER_TEST_BACKEND says);
// nullptr, after recording a skip (Missing::Gpu), when none can run here.
inline const TestDevice* test_gpu() {
  for (const TestDevice& d : found_devices().all)
    if (!d.device.is_cpu()) return &d;
  record_skip(Missing::Gpu, found_devices().gpu_missing);
  return nullptr;
}

// Every (device, low precision) pair under test, for one SECTION each.
struct MixedCase {
  const TestDevice* dev;
  Precision precision;
  Device device() const { return dev->device; }
  std::string name() const { return dev->name + " " + precision_name(precision); }
};
// A test case that calls it checks mixed precision only; where the CPU is chosen but cannot train
// in bf16 (no AVX-512), a skip is recorded (Missing::CpuFeature).
inline std::vector<MixedCase> mixed_cases() {
  std::vector<MixedCase> out;
  for (const TestDevice& d : test_devices()) {
    if (d.device.is_cpu() && !cpu_bf16_refusal().empty()) record_skip(Missing::CpuFeature, cpu_bf16_skip_message());
    for (Precision p : d.mixed) out.push_back({&d, p});
  }
  return out;
}

// An f32 tensor on any device as host floats.
inline std::vector<float> host_floats(OpContext& ctx, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  if (t.numel()) ctx.copy_to_host(v.data(), t.data(), t.bytes());
  return v;
}

}  // namespace trainer::test
