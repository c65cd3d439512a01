// The backends the op tests run on (CPU always; CUDA when built in and a GPU is visible), their
// closeness bounds, and host<->device transfers of test tensors.
//
// Each op test is written once against host tensors and the float64 reference, and runs one
// Catch2 SECTION per backend; it is tagged [backends] (backend_choice.h), so that CTest runs its
// CPU part as "<name>" and its CUDA part as "<name> (cuda)":
//
//   TEST_CASE("dense ...", "[backends]") {
//     for (const Backend& be : backends()) SECTION(be.name) {
//       auto k = make_kernel<DenseKernel>(be.ctx(), params);
//       Tensor x = be.upload(random_tensor(shape, rng)), y = be.nan(out_shape);
//       k->forward(x, ...);
//       be.check("y", y, want);
//     }
//   }
//
// Where the CUDA part cannot run (no GPU visible, as on the development and CI machines, or CUDA
// not built in), backends() records a skip (skip.h, Missing::Gpu) and gives no CUDA backend.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../backend_choice.h"
#include "core/ops/context.h"
#include "skip.h"
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
  std::vector<Backend> list;  // the CPU, then the first GPU where one runs here
  std::string gpu_missing;    // why no GPU backend runs here ("" when one does)
};

inline BackendList find_backends() {
  BackendList b;
  b.list.push_back({"cpu", &cpu_ctx(), kCpuTolerance});
#ifdef TRAINER_HAVE_CUDA
  std::string why;
  std::vector<GpuInfo> gpus;
  if (!has_backend(DeviceKind::CUDA)) {
    b.gpu_missing = "CUDA is compiled in but no CUDA context is registered";
  } else if ((gpus = cuda_devices(&why)).empty()) {
    b.gpu_missing = "no GPU visible (" + why + ")";
  } else {
    // The first visible GPU. The context is deliberately never destroyed: tearing down streams
    // and cuDNN handles from a static destructor races the CUDA runtime's own shutdown.
    Device d = Device::cuda(gpus[0].index);
    OpContext* c = make_context(d).release();
    c->bind_thread();  // the tests run on the main thread
    b.list.push_back({d.str(), c, kCudaTolerance});
  }
#else
  b.gpu_missing = "CUDA is not built in (no nvcc found when the build was configured)";
#endif
  return b;
}

inline const BackendList& found_backends() {
  static const BackendList found = find_backends();
  return found;
}

}  // namespace detail

// The backends a [backends] test case runs on in this process (TRAINER_TEST_BACKEND,
// backend_choice.h): the CPU, the first GPU, or both. A chosen GPU that cannot run here is
// recorded as a skip (Missing::Gpu) and left out.
inline const std::vector<Backend>& backends() {
  const BackendChoice choice = backend_choice();
  const detail::BackendList& found = detail::found_backends();
  static const std::vector<Backend> chosen = [&] {
    std::vector<Backend> out;
    for (const Backend& be : found.list)
      if (be.is_cpu() ? choice.cpu : choice.cuda) out.push_back(be);
    return out;
  }();
  if (choice.cuda && !found.gpu_missing.empty()) record_skip(Missing::Gpu, "cuda: " + found.gpu_missing);
  return chosen;
}

// The CPU backend, for test cases of the CPU alone (untagged).
inline const Backend& cpu_backend() { return detail::found_backends().list[0]; }

// The GPU backend, for test cases of the GPU alone (untagged, whatever TRAINER_TEST_BACKEND says);
// nullptr, after recording a skip (Missing::Gpu), where none can run here.
inline const Backend* gpu_backend() {
  const detail::BackendList& found = detail::found_backends();
  if (found.list.size() > 1) return &found.list[1];
  record_skip(Missing::Gpu, "cuda: " + found.gpu_missing);
  return nullptr;
}

// A context on GPU `dev` of precision p taking the fast paths `fast`, for the tests that compare a
// GPU fast path with its reference path (deliberately never destroyed, as the backends' contexts).
inline OpContext* gpu_context(const Device& dev, Precision p, FastPaths fast) {
  ContextOptions o;
  o.precision = p;
  o.fast = fast;
  OpContext* c = make_context(dev, o).release();
  c->bind_thread();
  return c;
}

}  // namespace trainer::test
