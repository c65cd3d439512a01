// The backends the op tests run on (CPU always; CUDA when built in and a GPU is visible), their
// closeness bounds, and host<->device transfers of test tensors.
//
// Each op test is written once against host tensors and the float64 reference, and runs one
// Catch2 SECTION per backend:
//
//   for (const Backend& be : backends()) SECTION(be.name) {
//     auto k = make_kernel<DenseKernel>(be.ctx(), params);
//     Tensor x = be.upload(random_tensor(shape, rng)), y = be.nan(out_shape);
//     k->forward(x, ...);
//     be.check("y", y, want);
//   }
//
// When CUDA is compiled in but cannot run here (no GPU visible, as on the development and CI
// machines), the first test to ask for the backends prints one warning saying so, once per
// process; the CPU sections still run.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/ops/context.h"
#include "test_util.h"
#ifdef TRAINER_HAVE_CUDA
#include "core/ops/cuda/cuda_devices.h"
#endif

namespace trainer::test {

// A host tensor copied onto ctx's device (always a fresh copy, also on CPU, so in-place kernels
// never touch the host original). An undefined tensor stays undefined and keeps its shape.
inline Tensor to_device(OpContext& ctx, const Tensor& host) {
  if (!host.defined())
    return host.shape().rank() ? Tensor::view(nullptr, host.shape(), host.dtype(), ctx.device()) : Tensor();
  Tensor d = ctx.empty(host.shape(), host.dtype());
  if (host.bytes() > 0) ctx.copy_from_host(d.data(), host.data(), host.bytes());
  return d;
}

// A device tensor of ctx copied into a fresh host tensor (undefined stays undefined, shape kept).
inline Tensor to_host(OpContext& ctx, const Tensor& dev) {
  if (!dev.defined())
    return dev.shape().rank() ? Tensor::view(nullptr, dev.shape(), dev.dtype(), Device::cpu()) : Tensor();
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  if (dev.bytes() > 0) ctx.copy_to_host(h.data(), dev.data(), dev.bytes());
  return h;
}

// One backend under test. Its context lives for the whole process.
struct Backend {
  std::string name;        // "cpu", "cuda:0"; also the Catch2 section name
  OpContext* context;      // not owned
  double tol;              // the default closeness bound (kCpuTolerance, kCudaTolerance)

  OpContext& ctx() const { return *context; }
  bool is_cpu() const { return context->device().is_cpu(); }
  Tensor upload(const Tensor& host) const { return to_device(*context, host); }
  Tensor download(const Tensor& dev) const { return to_host(*context, dev); }
  Tensor empty(const Shape& s, DType t = DType::F32) const { return context->empty(s, t); }
  Tensor zeros(const Shape& s, DType t = DType::F32) const { return context->zeros(s, t); }
  // An f32 tensor filled with NaN (uploaded from host), so that elements a kernel fails to write
  // are caught.
  Tensor nan(const Shape& s) const {
    Tensor h = Tensor::empty(s);
    poison(h);
    return upload(h);
  }
  // An undefined tensor that still carries its shape ("not needed, but this wide").
  Tensor undefined(const Shape& s, DType t = DType::F32) const {
    return Tensor::view(nullptr, s, t, context->device());
  }
  ref::Vec vec(const Tensor& dev) const { return to_vec(download(dev)); }
  // check_close of a device tensor, with this backend's bound or an explicit one (0.0: exact).
  void check(const std::string& what, const Tensor& dev, const ref::Vec& want) const {
    check_close(what, download(dev), want, tol);
  }
  void check(const std::string& what, const Tensor& dev, const ref::Vec& want, double bound) const {
    check_close(what, download(dev), want, bound);
  }
};

namespace detail {

struct BackendList {
  std::vector<Backend> list;
  std::string skipped;  // one line per backend that is built but cannot run here
};

inline BackendList find_backends() {
  BackendList b;
  b.list.push_back({"cpu", &cpu_ctx(), kCpuTolerance});
#ifdef TRAINER_HAVE_CUDA
  std::string why;
  std::vector<GpuInfo> gpus;
  if (!has_backend(DeviceKind::CUDA)) {
    b.skipped = "cuda: skipped \xe2\x80\x94 CUDA is compiled in but no CUDA context is registered";
  } else if ((gpus = cuda_devices(&why)).empty()) {
    b.skipped = "cuda: skipped \xe2\x80\x94 no GPU visible (" + why + ")";
  } else {
    // The first visible GPU. The context is deliberately never destroyed: tearing down streams
    // and cuDNN handles from a static destructor races the CUDA runtime's own shutdown.
    Device d = Device::cuda(gpus[0].index);
    OpContext* c = make_context(d).release();
    c->bind_thread();  // the tests run on the main thread
    b.list.push_back({d.str(), c, kCudaTolerance});
  }
#endif
  return b;
}

}  // namespace detail

// The backends to run every op test on. The first call in a process warns about each backend
// that is compiled in but skipped here (Catch2 WARN: shown without -s).
inline const std::vector<Backend>& backends() {
  static const detail::BackendList found = detail::find_backends();
  static bool warned = false;
  if (!warned) {
    warned = true;
    if (!found.skipped.empty()) WARN(found.skipped);
  }
  return found.list;
}

}  // namespace trainer::test
