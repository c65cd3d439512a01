// Whether this CPU trains in precision: bf16 (oneDNN's bf16 needs AVX-512): tests of the CPU's
// bf16 path skip (skip.h, Missing::CpuFeature), saying why, on a machine whose CPU lacks it:
//   if (!cpu_bf16_refusal().empty()) TRAINER_SKIP(CpuFeature, cpu_bf16_skip_message());
#pragma once
#include <string>
#include <thread>

#include "core/ops/context.h"

namespace trainer::test {

// The CPU context's refusal of bf16 on this machine, or "" when bf16 runs here.
inline const std::string& cpu_bf16_refusal() {
  static const std::string why = [] {
    std::string w;
    // On a thread of its own: a CPU context sets its thread's OpenMP thread count.
    std::thread([&w] {
      try {
        make_context(Device::cpu(0), ContextOptions{1, Precision::BF16});
      } catch (const DeviceError& e) {
        w = e.what();
      }
    }).join();
    return w;
  }();
  return why;
}

inline std::string cpu_bf16_skip_message() { return "cpu bf16: " + cpu_bf16_refusal(); }

}  // namespace trainer::test
