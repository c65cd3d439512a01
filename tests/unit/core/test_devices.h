// The devices the engine tests run on: the CPU always, the first visible GPU when CUDA is built in, and the mixed precisions each supports.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../cpu_bf16.h"
#include "core/ops/context.h"
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
  std::vector<TestDevice> all;
  std::string skipped;  // why no GPU runs here, when CUDA is built in
};

inline FoundDevices find_devices() {
  FoundDevices f;
  // bf16 where the CPU runs it (oneDNN needs AVX-512); test_devices() says when it does not.
  f.all.push_back({Device::cpu(0), "cpu", {}});
  if (cpu_bf16_refusal().empty()) f.all[0].mixed.push_back(Precision::BF16);
#ifdef TRAINER_HAVE_CUDA
  std::string why;
  std::vector<GpuInfo> gpus = cuda_devices(&why);
  if (gpus.empty()) {
    f.skipped = "cuda: skipped \xe2\x80\x94 no GPU visible (" + why + ")";
  } else {
    TestDevice d{Device::cuda(gpus[0].index), Device::cuda(gpus[0].index).str(), {}};
    if (gpus[0].cc_major >= 8) d.mixed.push_back(Precision::BF16);
    d.mixed.push_back(Precision::FP16);
    f.all.push_back(d);
  }
#endif
  return f;
}
}  // namespace detail

inline const detail::FoundDevices& found_devices() {
  static const detail::FoundDevices f = detail::find_devices();
  return f;
}

// Every device under test; the first call in a process warns (Catch2 WARN) when a GPU backend is
// built in but no GPU can run here.
inline const std::vector<TestDevice>& test_devices() {
  static bool warned = false;
  if (!warned && !found_devices().skipped.empty()) WARN(found_devices().skipped);
  if (!warned && !cpu_bf16_refusal().empty()) WARN(cpu_bf16_skip_message());
  warned = true;
  return found_devices().all;
}

// The first GPU, or nullptr (after a WARN saying why) when none can run here.
inline const TestDevice* test_gpu() {
  for (const TestDevice& d : test_devices())  // warns once when a GPU backend cannot run here
    if (!d.device.is_cpu()) return &d;
  if (found_devices().skipped.empty()) WARN("cuda: skipped \xe2\x80\x94 CUDA is not built in");
  return nullptr;
}

// Every (device, low precision) pair under test, for one SECTION each.
struct MixedCase {
  const TestDevice* dev;
  Precision precision;
  Device device() const { return dev->device; }
  std::string name() const { return dev->name + " " + precision_name(precision); }
};
inline std::vector<MixedCase> mixed_cases() {
  std::vector<MixedCase> out;
  for (const TestDevice& d : test_devices())
    for (Precision p : d.mixed) out.push_back({&d, p});
  return out;
}

// An f32 tensor on any device as host floats.
inline std::vector<float> host_floats(OpContext& ctx, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  if (t.numel()) ctx.copy_to_host(v.data(), t.data(), t.bytes());
  return v;
}

}  // namespace trainer::test
