// KernelRegistry: each op family's kernel factory per device kind (backends register, layers make).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/ops/context.h"

namespace trainer {

// Kernel is an abstract op-family interface with a nested `Params` and a `kName`.
template <class Kernel>
class KernelRegistry {
 public:
  using Params = typename Kernel::Params;
  using Factory = std::function<std::unique_ptr<Kernel>(OpContext&, const Params&)>;

  static void add(DeviceKind k, Factory f) { table()[int(k)] = std::move(f); }
  static std::unique_ptr<Kernel> make(OpContext& ctx, const Params& p) {
    auto& f = table()[int(ctx.device().kind)];
    if (!f)
      throw std::runtime_error(std::string("op ") + Kernel::kName + " has no " +
                               device_kind_name(ctx.device().kind) + " implementation");
    return f(ctx, p);
  }

 private:
  static std::array<Factory, kNumDeviceKinds>& table() {
    static std::array<Factory, kNumDeviceKinds> t;
    return t;
  }
};

// `static RegisterKernel<Conv2dKernel, CpuConv2d> reg(DeviceKind::CPU);` in the backend's file.
template <class Kernel, class Impl>
struct RegisterKernel {
  explicit RegisterKernel(DeviceKind k) {
    KernelRegistry<Kernel>::add(k, [](OpContext& c, const typename Kernel::Params& p) {
      return std::unique_ptr<Kernel>(std::make_unique<Impl>(c, p));
    });
  }
};

template <class Kernel>
std::unique_ptr<Kernel> make_kernel(OpContext& ctx, const typename Kernel::Params& p) {
  return KernelRegistry<Kernel>::make(ctx, p);
}

}  // namespace trainer
