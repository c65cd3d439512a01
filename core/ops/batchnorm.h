// BatchNorm op family: per-channel (last axis) normalisation with batch or running statistics.
#pragma once
#include <vector>

#include "core/ops/activation.h"
#include "core/ops/math/batchnorm_math.h"
#include "core/ops/registry.h"
#include "core/ops/shape_checks.h"

namespace trainer {

struct BatchNormParams {
  float momentum = 0.99f;  // Keras: running = momentum * running + (1 - momentum) * batch
  float epsilon = 1e-3f;
  // An activation applied to the output in the same pass (Linear: none): y = act(bn(x)), and
  // backward takes dy through it first, reading y. Only kinds the kernel can_fuse(); the graph
  // fuses a ReLU (ReLU6) that runs in place after batch norm (Graph, Layer::fuse_activation).
  ActKind activation = ActKind::Linear;
  // The batch variance the moving variance averages: the biased one, mean((x - mean)^2), as
  // Keras 3 (ops.moments); or, when true, the unbiased one (m / (m - 1) times it), as PyTorch,
  // cuDNN and tf.keras 2's fused kernel. Normalisation always uses the biased one.
  bool unbiased_moving_variance = false;
  // What the moving variance averages, from the biased variance `var` of m rows.
  double moving_variance_term(double var, double m) const {
    return bn::moving_variance_term(var, m, unbiased_moving_variance);
  }
};

// The activations batch norm applies in its own pass: the clamps (activation_math.h's act::Clamp),
// which every backend's normalisation and gradient loops take as a compile-time flag.
inline bool batchnorm_can_fuse(ActKind k) { return k == ActKind::Linear || k == ActKind::Relu || k == ActKind::Relu6; }

class BatchNormKernel {
 public:
  using Params = BatchNormParams;
  static constexpr const char* kName = "batchnorm";
  virtual ~BatchNormKernel() = default;
  BatchNormKernel(const BatchNormKernel&) = delete;
  BatchNormKernel& operator=(const BatchNormKernel&) = delete;

  // Whether the kernels apply `k` as Params::activation (Linear always; the others where the
  // context's bn_act fast path is on, else the activation layer runs: the reference).
  bool can_fuse(ActKind k) const { return batchnorm_can_fuse(k) && (k == ActKind::Linear || fuse_); }
  // Whether the backend takes y (forward's output, also read by backward) and dy as strided views
  // (Tensor::row_stride): a channel slice of a wider tensor, so that a concat's inputs are
  // written in its output and their gradients read from its gradient, without copies. x and dx
  // stay contiguous.
  virtual bool strided_rows() const { return false; }

  // x [..., C] (rank >= 2; f32, bf16 or f16) normalised over every axis but the last with the
  // batch statistics; y, dy and dx are of x's shape and type, every [C] tensor is f32 (gamma, beta
  // and the gradients dgamma, dbeta may be undefined: 1, 0, not needed).
  // Saves the batch mean and 1/sqrt(var + eps) ([C]) for backward and updates the running
  // statistics (the running variance averages the biased batch variance, as Keras 3, or the
  // unbiased one with Params::unbiased_moving_variance).
  void forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                     Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) {
    const int64_t C = channels(x);
    ck_.vec("gamma", gamma, C, true);
    ck_.vec("beta", beta, C, true);
    ck_.vec("save_mean", save_mean, C, false);
    ck_.vec("save_invstd", save_invstd, C, false);
    ck_.vec("running_mean", running_mean, C, false);
    ck_.vec("running_var", running_var, C, false);
    out_ck().like("y", y, x, x.shape());
    forward_train_impl(rows(x, C), C, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var);
  }
  void forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                     const Tensor& running_var, Tensor& y) {
    const int64_t C = channels(x);
    ck_.vec("gamma", gamma, C, true);
    ck_.vec("beta", beta, C, true);
    ck_.vec("running_mean", running_mean, C, false);
    ck_.vec("running_var", running_var, C, false);
    out_ck().like("y", y, x, x.shape());
    forward_infer_impl(rows(x, C), C, x, gamma, beta, running_mean, running_var, y);
  }
  // dx, dgamma, dbeta overwritten; dx may be undefined. y (forward's output) is read only with a
  // fused activation, and may be undefined without one.
  void backward(const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& dy, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
    const int64_t C = channels(x);
    ck_.vec("gamma", gamma, C, true);
    ck_.vec("save_mean", save_mean, C, false);
    ck_.vec("save_invstd", save_invstd, C, false);
    ck_.vec("dgamma", dgamma, C, true);
    ck_.vec("dbeta", dbeta, C, true);
    out_ck().like("dy", dy, x, x.shape());
    if (p_.activation != ActKind::Linear) out_ck().like("y", y, x, x.shape());
    if (dx.defined()) ck_.like("dx", dx, x, x.shape());
    backward_impl(rows(x, C), C, x, y, gamma, dy, save_mean, save_invstd, dx, dgamma, dbeta);
  }

  // --- Sibling batch norms (the engine's sibling groups, ExecutionPlan::sibling_leader): batch
  // norms whose outputs are adjacent channel slices of one concat, with one activation and type,
  // take their forward and backward in one pass over the concat's rows. A CPU fetches whole rows of a
  // strided slice (its prefetchers), so one pass per sibling reads each row once per sibling.
  // Part k's channels are [at_k, at_k + C_k) of y's and dy's rows, in order from 0 (y [..., sum
  // C_k], may be undefined without a fused activation); its x, dx and [C_k] tensors are its own, as
  // in backward, and its kernel's forward kept state is used. The results are those of separate
  // backward calls, bit for bit.
  struct Sibling {
    const BatchNormKernel* kernel = nullptr;  // the part's own kernel (its forward's kept state)
    const Tensor *x = nullptr, *gamma = nullptr, *save_mean = nullptr, *save_invstd = nullptr;
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
  };
  // Their forward, likewise one pass writing y's rows (training: each part's statistics saved, its
  // running statistics updated and what its backward needs kept by its kernel; inference: the
  // running statistics read), bit for bit as separate forward_train / forward_infer calls.
  struct SiblingForward {
    BatchNormKernel* kernel = nullptr;  // the part's own kernel (its parameters; keeps its backward's state)
    const Tensor *x = nullptr, *gamma = nullptr, *beta = nullptr;
    Tensor *save_mean = nullptr, *save_invstd = nullptr;      // written when training, else unused
    Tensor *running_mean = nullptr, *running_var = nullptr;   // updated when training, else read
  };
  // Whether forward_siblings and backward_siblings run here (with parts' kernels of this backend).
  virtual bool joins_siblings() const { return false; }
  void forward_siblings(bool training, Tensor& y, const std::vector<SiblingForward>& parts) {
    if (!joins_siblings()) ck_.fail("this backend runs sibling batch norms one by one");
    if (parts.empty()) ck_.fail("forward_siblings: no parts");
    const int64_t W = channels(y);
    int64_t at = 0;
    for (const SiblingForward& s : parts) {
      if (!s.kernel || !s.x || !s.gamma || !s.beta || !s.running_mean || !s.running_var ||
          (training && (!s.save_mean || !s.save_invstd)))
        ck_.fail("forward_siblings: a part's tensor is missing");
      if (s.kernel->p_.activation != p_.activation) ck_.fail("forward_siblings: the parts' activations differ");
      const int64_t C = channels(*s.x);
      if (s.x->dtype() != y.dtype() || !same_rows(s.x->shape(), y.shape()))
        ck_.fail("forward_siblings: part x [", s.x->shape().str(), "] does not match y's rows [", y.shape().str(), "]");
      ck_.vec("gamma", *s.gamma, C, true);
      ck_.vec("beta", *s.beta, C, true);
      ck_.vec("running_mean", *s.running_mean, C, false);
      ck_.vec("running_var", *s.running_var, C, false);
      if (training) {
        ck_.vec("save_mean", *s.save_mean, C, false);
        ck_.vec("save_invstd", *s.save_invstd, C, false);
      }
      at += C;
    }
    if (at != W) ck_.fail("forward_siblings: the parts have ", at, " channels, y ", W);
    out_ck().like("y", y, y, y.shape());
    forward_siblings_impl(rows(y, W), W, training, y, parts);
  }
  void backward_siblings(const Tensor& y, const Tensor& dy, const std::vector<Sibling>& parts) {
    if (!joins_siblings()) ck_.fail("this backend runs sibling batch norms one by one");
    if (parts.empty()) ck_.fail("backward_siblings: no parts");
    const int64_t W = channels(dy);
    int64_t at = 0;
    for (const Sibling& s : parts) {
      if (!s.kernel || !s.x || !s.gamma || !s.save_mean || !s.save_invstd || !s.dx || !s.dgamma || !s.dbeta)
        ck_.fail("backward_siblings: a part's tensor is missing");
      if (s.kernel->p_.activation != p_.activation) ck_.fail("backward_siblings: the parts' activations differ");
      const int64_t C = channels(*s.x);
      if (s.x->dtype() != dy.dtype() || !same_rows(s.x->shape(), dy.shape()))
        ck_.fail("backward_siblings: part x [", s.x->shape().str(), "] does not match dy's rows [", dy.shape().str(),
                 "]");
      ck_.vec("gamma", *s.gamma, C, true);
      ck_.vec("save_mean", *s.save_mean, C, false);
      ck_.vec("save_invstd", *s.save_invstd, C, false);
      ck_.vec("dgamma", *s.dgamma, C, true);
      ck_.vec("dbeta", *s.dbeta, C, true);
      if (s.dx->defined()) ck_.like("dx", *s.dx, *s.x, s.x->shape());
      at += C;
    }
    if (at != W) ck_.fail("backward_siblings: the parts have ", at, " channels, dy ", W);
    out_ck().like("dy", dy, dy, dy.shape());
    if (p_.activation != ActKind::Linear) out_ck().like("y", y, dy, dy.shape());
    backward_siblings_impl(rows(dy, W), W, y, dy, parts);
  }

  // --- Pieces of synchronised batch norm (statistics over several replicas' batches), without a
  // fused activation. The layer sums the [C] results across replicas between the calls (a device
  // all-reduce: nothing here reads a value on the host, so a recorded step can hold them);
  // normalisation itself is forward_infer with the global mean and variance. All [C] tensors are f32
  // on this device, accumulated in double (CPU) or in fixed-order reductions (CUDA); `count` is a
  // [1] f32 tensor, the rows of every replica's batch (sync_count's, summed).
  // sum[c] = sum over rows of (x - shift[c]), sumsq[c] = sum of (x - shift[c])^2; an undefined
  // shift means 0. (Two passes — the mean, then the sums centred on it — keep the variance exact.)
  void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sumsq) {
    const int64_t C = channels(x);
    no_activation("channel_sums");
    ck_.vec("shift", shift, C, true);
    ck_.vec("sum", sum, C, false);
    ck_.vec("sumsq", sumsq, C, false);
    channel_sums_impl(rows(x, C), C, x, shift, sum, sumsq);
  }
  // count[0] = x's rows (this replica's part of the global count).
  void sync_count(const Tensor& x, Tensor& count) {
    const int64_t C = channels(x);
    ck_.vec("count", count, 1, false);
    sync_count_impl(rows(x, C), count);
  }
  // mean = sum / count (bn::sync_mean; 0 for no rows), from pass 1's global sums.
  void sync_mean(const Tensor& sum, const Tensor& count, Tensor& mean) {
    const int64_t C = sum.numel();
    ck_.vec("sum", sum, C, false);
    ck_.vec("count", count, 1, false);
    ck_.vec("mean", mean, C, false);
    sync_mean_impl(C, sum, count, mean);
  }
  // From pass 2's global sums centred on `mean` (in: sync_mean's; out: the batch mean): the batch
  // statistics (bn::sync_stats: save_invstd, the biased variance `var`) and the running statistics
  // updated as forward_train updates them (left alone for no rows anywhere).
  void sync_stats(const Tensor& sum, const Tensor& sumsq, const Tensor& count, Tensor& mean, Tensor& save_invstd,
                  Tensor& var, Tensor& running_mean, Tensor& running_var) {
    const int64_t C = sum.numel();
    ck_.vec("sum", sum, C, false);
    ck_.vec("sumsq", sumsq, C, false);
    ck_.vec("mean", mean, C, false);
    ck_.vec("save_invstd", save_invstd, C, false);
    ck_.vec("var", var, C, false);
    ck_.vec("running_mean", running_mean, C, false);
    ck_.vec("running_var", running_var, C, false);
    ck_.vec("count", count, 1, false);
    sync_stats_impl(C, sum, sumsq, count, mean, save_invstd, var, running_mean, running_var);
  }
  // sum_dy[c] = sum of dy, sum_dy_xmu[c] = sum of dy * (x - mean[c]), over this replica's rows.
  void backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy, Tensor& sum_dy_xmu) {
    const int64_t C = channels(x);
    no_activation("backward_sums");
    out_ck().like("dy", dy, x, x.shape());
    ck_.vec("mean", mean, C, false);
    ck_.vec("sum_dy", sum_dy, C, false);
    ck_.vec("sum_dy_xmu", sum_dy_xmu, C, false);
    backward_sums_impl(rows(x, C), C, x, dy, mean, sum_dy, sum_dy_xmu);
  }
  // This replica's dgamma, dbeta from its own backward_sums (bn::sync_param_grads; either may be
  // undefined: not trained).
  void sync_param_grads(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& invstd, Tensor& dgamma,
                        Tensor& dbeta) {
    const int64_t C = sum_dy.numel();
    ck_.vec("sum_dy", sum_dy, C, false);
    ck_.vec("sum_dy_xmu", sum_dy_xmu, C, false);
    ck_.vec("invstd", invstd, C, false);
    ck_.vec("dgamma", dgamma, C, true);
    ck_.vec("dbeta", dbeta, C, true);
    sync_param_grads_impl(C, sum_dy, sum_dy_xmu, invstd, dgamma, dbeta);
  }
  // dx = g * invstd * (dy - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count), with the
  // sums and count over the whole (global) batch; g = gamma, or 1 when undefined. Nothing to do
  // when dx is undefined (or x has no rows: a count of 0 means no replica has any).
  void backward_apply(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& invstd,
                      const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& count, Tensor& dx) {
    const int64_t C = channels(x);
    no_activation("backward_apply");
    out_ck().like("dy", dy, x, x.shape());
    ck_.vec("gamma", gamma, C, true);
    ck_.vec("mean", mean, C, false);
    ck_.vec("invstd", invstd, C, false);
    ck_.vec("sum_dy", sum_dy, C, false);
    ck_.vec("sum_dy_xmu", sum_dy_xmu, C, false);
    ck_.vec("count", count, 1, false);
    if (!dx.defined()) return;
    ck_.like("dx", dx, x, x.shape());
    backward_apply_impl(rows(x, C), C, x, dy, gamma, mean, invstd, sum_dy, sum_dy_xmu, count, dx);
  }

 protected:
  BatchNormKernel(const OpContext& c, const Params& p)
      : p_(p), ck_(kName, c.device()), fuse_(c.fast_paths().has(FastPath::BnAct)) {
    if (!(p.epsilon > 0)) ck_.fail("epsilon must be positive, got ", p.epsilon);
    if (!batchnorm_can_fuse(p.activation)) ck_.fail("cannot fuse activation ", activation_name(p.activation));
  }
  // Called with checked arguments only; x is seen as [m, C] (m = 0 when C == 0).
  virtual void forward_train_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean,
                                  Tensor& running_var) = 0;
  virtual void forward_infer_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& running_mean, const Tensor& running_var, Tensor& y) = 0;
  virtual void backward_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& y, const Tensor& gamma,
                             const Tensor& dy, const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                             Tensor& dgamma, Tensor& dbeta) = 0;
  virtual void channel_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& shift, Tensor& sum,
                                 Tensor& sumsq) = 0;
  virtual void backward_sums_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& mean,
                                  Tensor& sum_dy, Tensor& sum_dy_xmu) = 0;
  virtual void sync_count_impl(int64_t m, Tensor& count) = 0;
  virtual void sync_mean_impl(int64_t C, const Tensor& sum, const Tensor& count, Tensor& mean) = 0;
  virtual void sync_stats_impl(int64_t C, const Tensor& sum, const Tensor& sumsq, const Tensor& count, Tensor& mean,
                               Tensor& save_invstd, Tensor& var, Tensor& running_mean, Tensor& running_var) = 0;
  virtual void sync_param_grads_impl(int64_t C, const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& invstd,
                                     Tensor& dgamma, Tensor& dbeta) = 0;
  // Called where joins_siblings(), with checked arguments; W channels in all.
  virtual void forward_siblings_impl(int64_t /*m*/, int64_t /*W*/, bool /*training*/, Tensor& /*y*/,
                                     const std::vector<SiblingForward>& /*parts*/) {}
  virtual void backward_siblings_impl(int64_t /*m*/, int64_t /*W*/, const Tensor& /*y*/, const Tensor& /*dy*/,
                                      const std::vector<Sibling>& /*parts*/) {}
  // dx is defined.
  virtual void backward_apply_impl(int64_t m, int64_t C, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                   const Tensor& mean, const Tensor& invstd, const Tensor& sum_dy,
                                   const Tensor& sum_dy_xmu, const Tensor& count, Tensor& dx) = 0;

  const Params p_;

 private:
  // x's channel count; x is of a float type, and y, dy and dx must be of its type.
  int64_t channels(const Tensor& x) const {
    ck_.floating("x", x);
    ck_.min_rank("x", x, 2);
    return x.shape().back();
  }
  static int64_t rows(const Tensor& x, int64_t C) { return C ? x.numel() / C : 0; }
  // Whether a and b have the same axes but the last.
  static bool same_rows(const Shape& a, const Shape& b) {
    std::vector<int64_t> da = a.dims(), db = b.dims();
    if (da.empty() || db.empty()) return false;
    da.pop_back();
    db.pop_back();
    return da == db;
  }
  // The checks of y and dy: strided views allowed where the backend takes them.
  shape_checks::Checks out_ck() const { return strided_rows() ? ck_.rows_strided() : ck_; }
  void no_activation(const char* piece) const {
    if (p_.activation != ActKind::Linear) ck_.fail(piece, " takes no fused activation");
  }
  shape_checks::Checks ck_;
  bool fuse_;  // the bn_act fast path: activations fused into the kernel (can_fuse)
};

}  // namespace trainer
