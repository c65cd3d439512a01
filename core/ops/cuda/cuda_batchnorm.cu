// CUDA batchnorm: cuDNN spatial batch normalisation over NHWC (other ranks as [rows, C, 1, 1]); one-row batches and the
// synchronised-batch-norm pieces (per-channel sums, backward apply) in own kernels here.
#include <algorithm>
#include <climits>
#include <cmath>

#include "core/ops/batchnorm.h"
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"

// cuDNN's legacy batch-norm API (cudnn_ops.h; cuDNN 9 API reference, cudnn_ops library:
// cudnnBatchNormalizationForwardTraining / ForwardInference / Backward, cudnnDeriveBNTensorDescriptor)
// with CUDNN_BATCHNORM_SPATIAL: one statistic per channel over N x H x W. Mapping to our contract:
//  - exponentialAverageFactor = 1 - momentum: cuDNN updates running = running * (1 - factor) +
//    batch * factor (cudnn_ops.h), Keras running = momentum * running + (1 - momentum) * batch.
//  - cuDNN's running variance takes the unbiased batch variance (n / (n - 1)), as ours (PyTorch's
//    cuDNN and native paths agree on this). A batch of one row would divide by zero there, so
//    N*H*W == 1 is computed here as the CPU backend does (variance 0, unbiased variance 0).
//  - resultSaveMean / resultSaveInvVariance are the batch mean and 1 / sqrt(var + eps) (the
//    "inverse variance" is the inverse standard deviation), i.e. our save_mean / save_invstd, and
//    backward takes them back as savedMean / savedInvVariance.
//  - epsilon is passed as a double and must be >= CUDNN_BN_MIN_EPSILON (0 in cuDNN 9).
// SPATIAL rather than SPATIAL_PERSISTENT: the persistent kernels may overflow to NaN/Inf for some
// inputs (cudnn_ops.h: "imposes some limits on the range of values") and PyTorch reports accuracy
// losses with them. Undefined gamma/beta mean 1/0 (cached device vectors); an undefined dx (or
// dgamma/dbeta) is computed into scratch, since cuDNN writes all three.

namespace trainer {
namespace {

constexpr const char* kOp = "batchnorm";

__global__ void fill_kernel(float* __restrict__ p, int64_t n, float v) { CUDA_GRID_LOOP(i, n) p[i] = v; }

// A batch of one row (m == 1), per channel, in double as the CPU backend: mean = x, variance 0,
// y = x * (g * is) + (beta - mean * g * is), running_var = momentum * running_var (+ (1 - momentum) * 0).
__global__ void one_row_forward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                       const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                                       float* __restrict__ invstd, float* __restrict__ rm, float* __restrict__ rv,
                                       int64_t C, double eps, double mom) {
  CUDA_GRID_LOOP(c, C) {
    const double mu = x[c];
    const double is = 1.0 / sqrt(eps);
    const double g = gamma ? double(gamma[c]) : 1.0, be = beta ? double(beta[c]) : 0.0;
    mean[c] = float(mu);
    invstd[c] = float(is);
    y[c] = x[c] * float(g * is) + float(be - mu * g * is);
    rm[c] = float(mom * rm[c] + (1.0 - mom) * mu);
    rv[c] = float(mom * rv[c]);
  }
}

// The CPU backend's backward for m == 1: db = dy, dg = dy * (x - mean) * is,
// dx = p * dy + q * (x - mean) + r with p = g * is, q = -g * is^2 * dg, r = -p * db.
__global__ void one_row_backward_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                        const float* __restrict__ dy, const float* __restrict__ mean,
                                        const float* __restrict__ invstd, float* __restrict__ dx,
                                        float* __restrict__ dgamma, float* __restrict__ dbeta, int64_t C) {
  CUDA_GRID_LOOP(c, C) {
    const double d = double(x[c]) - double(mean[c]);
    const double is = invstd[c], g = gamma ? double(gamma[c]) : 1.0;
    const double db = dy[c], dg = db * d * is;
    if (dbeta) dbeta[c] = float(db);
    if (dgamma) dgamma[c] = float(dg);
    if (dx) {
      const double p = g * is;
      dx[c] = float(p * db + (-g * is * is * dg) * d - p * db);
    }
  }
}

// --- Synchronised batch norm pieces: per-channel sums over the rows of x viewed as [m, C] (NHWC
// is contiguous with C last), in double, in an order fixed by (m, C) alone (no atomics):
//  1. sync_partials_kernel: block b covers channels [32 * tile, 32 * tile + 32) of the rows of one
//     part (tile = b % tiles, part = b / tiles). Thread t handles channel tile * 32 + (t % 32) and
//     rows part_begin + t / 32, + 8, + 16, ... (a warp reads 32 consecutive floats of one row); the
//     8 row lanes are then added by a shared-memory tree, and the block writes its part's double
//     partials to part[part][0 or 1][C].
//  2. sync_finish_kernel: per channel, the parts' partials added in part order, stored as f32.
constexpr int kSyncTile = 32;                         // channels per block
constexpr int kSyncLanes = 8;                         // row lanes per block
constexpr int kSyncThreads = kSyncTile * kSyncLanes;  // 256 threads per block
constexpr int64_t kSyncRowsPerPart = 256;             // target rows per part (32 per thread)
constexpr int64_t kSyncMaxParts = 128;
constexpr int64_t kSyncMaxBlocks = 16384;  // bounds the partials to 8 MiB (parts * C <= 2^19)

// kBackward false: sums of d and d^2 with d = x - center (center may be null: 0).
// kBackward true: sums of dy and dy * (x - center).
template <bool kBackward>
__global__ void __launch_bounds__(kSyncThreads)
    sync_partials_kernel(const float* __restrict__ x, const float* __restrict__ dy, const float* __restrict__ center,
                         double* __restrict__ part, int64_t m, int64_t C, int64_t tiles, int64_t rows_per_part) {
  __shared__ double ss[kSyncThreads], sq[kSyncThreads];
  const int t = int(threadIdx.x), lane = t % kSyncTile, row_lane = t / kSyncTile;
  const int64_t tile = int64_t(blockIdx.x) % tiles, p = int64_t(blockIdx.x) / tiles;
  const int64_t c = tile * kSyncTile + lane;
  const int64_t r0 = p * rows_per_part, r1 = r0 + rows_per_part < m ? r0 + rows_per_part : m;
  double s = 0.0, q = 0.0;
  if (c < C) {
    const double ctr = center ? double(center[c]) : 0.0;
    for (int64_t r = r0 + row_lane; r < r1; r += kSyncLanes) {
      const double d = double(x[r * C + c]) - ctr;
      if constexpr (kBackward) {
        const double g = dy[r * C + c];
        s += g;
        q += g * d;
      } else {
        s += d;
        q += d * d;
      }
    }
  }
  ss[t] = s;
  sq[t] = q;
  __syncthreads();
#pragma unroll
  for (int h = kSyncLanes / 2; h > 0; h /= 2) {  // row lane j += row lane j + h, for j < h
    if (row_lane < h) {
      ss[t] += ss[t + h * kSyncTile];
      sq[t] += sq[t + h * kSyncTile];
    }
    __syncthreads();
  }
  if (row_lane == 0 && c < C) {
    part[p * 2 * C + c] = ss[t];
    part[p * 2 * C + C + c] = sq[t];
  }
}

__global__ void sync_finish_kernel(const double* __restrict__ part, int64_t parts, int64_t C, float* __restrict__ s,
                                   float* __restrict__ q) {
  CUDA_GRID_LOOP(c, C) {
    double a = 0.0, b = 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      a += part[p * 2 * C + c];
      b += part[p * 2 * C + C + c];
    }
    s[c] = float(a);
    q[c] = float(b);
  }
}

// Per-channel coefficients of backward_apply, as the CPU backend: dx = P * dy + Q * (x - mean) + R
// with P = g * is, Q = -P * is^2 * sum_dy_xmu / count, R = -P * sum_dy / count (coef = [P | Q | R]).
__global__ void sync_coef_kernel(const float* __restrict__ gamma, const float* __restrict__ invstd,
                                 const float* __restrict__ sum_dy, const float* __restrict__ sum_dy_xmu, double count,
                                 int64_t C, float* __restrict__ coef) {
  CUDA_GRID_LOOP(c, C) {
    const double g = gamma ? double(gamma[c]) : 1.0, is = invstd[c];
    const double p = g * is;
    coef[c] = float(p);
    coef[C + c] = float(-p * is * is * double(sum_dy_xmu[c]) / count);
    coef[2 * C + c] = float(-p * double(sum_dy[c]) / count);
  }
}

__global__ void sync_apply_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  const float* __restrict__ mean, const float* __restrict__ coef, int64_t n, int64_t C,
                                  float* __restrict__ dx) {
  CUDA_GRID_LOOP(i, n) {
    const int64_t c = i % C;
    dx[i] = coef[c] * dy[i] + coef[C + c] * (x[i] - mean[c]) + coef[2 * C + c];
  }
}

class CudaBatchNorm final : public BatchNormKernel {
 public:
  CudaBatchNorm(OpContext& ctx, const BatchNormParams& p) : c_(cuda_context(ctx)), p_(p) {
    if (!(p.epsilon > 0)) cuda::fail(kOp, ": epsilon must be positive, got ", p.epsilon);
    // can_fuse() says Linear only here: the graph keeps the activation a layer of its own.
    if (p.activation != ActKind::Linear) cuda::fail(kOp, ": no fused activation on CUDA (can_fuse)");
    if (double(p.epsilon) < CUDNN_BN_MIN_EPSILON)
      cuda::fail(kOp, ": epsilon ", p.epsilon, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&xd_));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&pd_));
  }
  ~CudaBatchNorm() override {
    cudnnDestroyTensorDescriptor(pd_);
    cudnnDestroyTensorDescriptor(xd_);
  }
  CudaBatchNorm(const CudaBatchNorm&) = delete;
  CudaBatchNorm& operator=(const CudaBatchNorm&) = delete;

  void forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                     Tensor& save_invstd, Tensor& running_mean, Tensor& running_var) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("beta", beta, C, true);
    check_vec("save_mean", save_mean, C, false);
    check_vec("save_invstd", save_invstd, C, false);
    check_vec("running_mean", running_mean, C, false);
    check_vec("running_var", running_var, C, false);
    cuda::require_shape(kOp, "y", y, x.shape(), dev());
    if (C == 0) return;
    const unsigned grid = cuda::grid_for(C, c_);
    if (m == 0) {  // no samples: no statistics; leave the running statistics alone
      c_.fill_zero(save_mean.data(), save_mean.bytes());
      TRAINER_LAUNCH(fill_kernel, grid, cuda::kBlock, c_.stream(), save_invstd.f32(), C, 1.0f / std::sqrt(p_.epsilon));
      return;
    }
    if (m == 1) {
      TRAINER_LAUNCH(one_row_forward_kernel, grid, cuda::kBlock, c_.stream(), x.f32(), opt(gamma), opt(beta), y.f32(),
                     save_mean.f32(), save_invstd.f32(), running_mean.f32(), running_var.f32(), C, double(p_.epsilon),
                     double(p_.momentum));
      return;
    }
    describe(x, C, m);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        c_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd_, x.data(), xd_, y.data(), pd_, scale(gamma, C),
        shift(beta, C), 1.0 - double(p_.momentum), running_mean.data(), running_var.data(), double(p_.epsilon),
        save_mean.data(), save_invstd.data()));
  }

  void forward_infer(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                     const Tensor& running_var, Tensor& y) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("beta", beta, C, true);
    check_vec("running_mean", running_mean, C, false);
    check_vec("running_var", running_var, C, false);
    cuda::require_shape(kOp, "y", y, x.shape(), dev());
    if (m == 0 || C == 0) return;
    describe(x, C, m);
    const float one = 1.0f, zero = 0.0f;
    // y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta (any m, including 1).
    CUDNN_CHECK(cudnnBatchNormalizationForwardInference(c_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd_, x.data(),
                                                        xd_, y.data(), pd_, scale(gamma, C), shift(beta, C),
                                                        running_mean.data(), running_var.data(), double(p_.epsilon)));
  }

  void backward(const Tensor& x, const Tensor& /*y: no fused activation*/, const Tensor& gamma, const Tensor& dy,
                const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    check_vec("gamma", gamma, C, true);
    check_vec("save_mean", save_mean, C, false);
    check_vec("save_invstd", save_invstd, C, false);
    check_vec("dgamma", dgamma, C, true);
    check_vec("dbeta", dbeta, C, true);
    cuda::require_shape(kOp, "dy", dy, x.shape(), dev());
    if (dx.defined()) cuda::require_shape(kOp, "dx", dx, x.shape(), dev());
    if (C == 0) return;
    if (m == 0) {
      if (dgamma.defined()) c_.fill_zero(dgamma.data(), dgamma.bytes());
      if (dbeta.defined()) c_.fill_zero(dbeta.data(), dbeta.bytes());
      return;
    }
    if (m == 1) {
      TRAINER_LAUNCH(one_row_backward_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), x.f32(), opt(gamma),
                     dy.f32(), save_mean.f32(), save_invstd.f32(), opt(dx), opt(dgamma), opt(dbeta), C);
      return;
    }
    describe(x, C, m);
    // cuDNN writes dx, dgamma and dbeta: scratch stands in for the undefined ones (returned to the
    // stream-ordered allocator after the call is queued).
    Tensor dx_tmp = dx.defined() ? Tensor() : c_.empty(x.shape());
    Tensor dg_tmp = dgamma.defined() ? Tensor() : c_.empty({C});
    Tensor db_tmp = dbeta.defined() ? Tensor() : c_.empty({C});
    const float one = 1.0f, zero = 0.0f;  // alpha/beta for data and parameter gradients: overwrite
    CUDNN_CHECK(cudnnBatchNormalizationBackward(
        c_.cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd_, x.data(), xd_, dy.data(), xd_,
        (dx.defined() ? dx : dx_tmp).data(), pd_, scale(gamma, C), (dgamma.defined() ? dgamma : dg_tmp).data(),
        (dbeta.defined() ? dbeta : db_tmp).data(), double(p_.epsilon), save_mean.data(), save_invstd.data()));
  }

  // --- Synchronised batch norm pieces (see batchnorm.h and the kernels above).

  void channel_sums(const Tensor& x, const Tensor& shift, Tensor& sum, Tensor& sumsq) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    check_vec("shift", shift, C, true);
    check_vec("sum", sum, C, false);
    check_vec("sumsq", sumsq, C, false);
    row_sums<false>(x, nullptr, opt(shift), m, C, sum, sumsq);
  }

  void backward_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, Tensor& sum_dy,
                     Tensor& sum_dy_xmu) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    cuda::require_shape(kOp, "dy", dy, x.shape(), dev());
    check_vec("mean", mean, C, false);
    check_vec("sum_dy", sum_dy, C, false);
    check_vec("sum_dy_xmu", sum_dy_xmu, C, false);
    row_sums<true>(x, dy.f32(), mean.f32(), m, C, sum_dy, sum_dy_xmu);
  }

  void backward_apply(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& invstd,
                      const Tensor& sum_dy, const Tensor& sum_dy_xmu, double count, Tensor& dx) override {
    const int64_t C = channels(x), m = C ? x.numel() / C : 0;
    cuda::require_shape(kOp, "dy", dy, x.shape(), dev());
    check_vec("gamma", gamma, C, true);
    check_vec("mean", mean, C, false);
    check_vec("invstd", invstd, C, false);
    check_vec("sum_dy", sum_dy, C, false);
    check_vec("sum_dy_xmu", sum_dy_xmu, C, false);
    if (!(count > 0)) cuda::fail(kOp, ": count must be positive, got ", count);
    if (!dx.defined()) return;
    cuda::require_shape(kOp, "dx", dx, x.shape(), dev());
    if (m == 0 || C == 0) return;
    cuda::DeviceBuffer coef(c_.allocator(), size_t(3 * C) * sizeof(float));
    TRAINER_LAUNCH(sync_coef_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), opt(gamma), invstd.f32(),
                   sum_dy.f32(), sum_dy_xmu.f32(), count, C, coef.as<float>());
    const int64_t n = m * C;
    TRAINER_LAUNCH(sync_apply_kernel, cuda::grid_for(n, c_), cuda::kBlock, c_.stream(), x.f32(), dy.f32(), mean.f32(),
                   coef.as<const float>(), n, C, dx.f32());
  }

 private:
  Device dev() const { return c_.device(); }

  // The two per-channel sums of sync_partials_kernel<kBackward> over x's m rows into s and q (f32 [C]).
  // The partition (parts, rows per part) depends on m and C only, so the results do not depend on the GPU.
  template <bool kBackward>
  void row_sums(const Tensor& x, const float* dy, const float* center, int64_t m, int64_t C, Tensor& s, Tensor& q) {
    if (C == 0) return;
    if (m == 0) {
      c_.fill_zero(s.data(), s.bytes());
      c_.fill_zero(q.data(), q.bytes());
      return;
    }
    const int64_t tiles = (C + kSyncTile - 1) / kSyncTile;
    int64_t parts = (m + kSyncRowsPerPart - 1) / kSyncRowsPerPart;
    parts = std::min({parts, kSyncMaxParts, std::max<int64_t>(1, kSyncMaxBlocks / tiles)});
    const int64_t rows_per_part = (m + parts - 1) / parts;
    parts = (m + rows_per_part - 1) / rows_per_part;  // no empty part
    if (tiles * parts > int64_t(INT_MAX)) cuda::fail(kOp, ": x [", x.shape().str(), "] has too many channels");
    cuda::DeviceBuffer part(c_.allocator(), size_t(parts * 2 * C) * sizeof(double));
    TRAINER_LAUNCH(sync_partials_kernel<kBackward>, unsigned(tiles * parts), unsigned(kSyncThreads), c_.stream(),
                   x.f32(), dy, center, part.as<double>(), m, C, tiles, rows_per_part);
    TRAINER_LAUNCH(sync_finish_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), part.as<const double>(), parts,
                   C, s.f32(), q.f32());
  }

  int64_t channels(const Tensor& x) const {
    cuda::require_f32(kOp, "x", x, dev());
    shape_checks::require_min_rank(kOp, "x", x, 2);
    return x.shape().back();
  }

  void check_vec(const char* name, const Tensor& t, int64_t C, bool optional) const {
    if (optional && !t.defined()) return;
    cuda::require_shape(kOp, name, t, {C}, dev());
  }

  static float* opt(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }

  // x as a 4-D NHWC tensor: [N, H, W, C] as is; any other rank as [rows, C, 1, 1] (the same memory:
  // spatial statistics over N x 1 x 1 are the statistics over all rows). Then the derived
  // per-channel descriptor (1 x C x 1 x 1) for scale, bias, means and variances.
  void describe(const Tensor& x, int64_t C, int64_t m) {
    if (x.numel() > INT_MAX || C > INT_MAX)  // cuDNN's legacy tensors use 32-bit sizes and strides
      cuda::fail(kOp, ": x [", x.shape().str(), "] is too large for cuDNN (more than 2^31 - 1 elements)");
    const Shape& s = x.shape();
    if (s.rank() == 4)
      CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, int(s[0]), int(C), int(s[1]),
                                             int(s[2])));
    else
      CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, int(m), int(C), 1, 1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd_, xd_, CUDNN_BATCHNORM_SPATIAL));
  }

  // gamma, or a cached vector of C ones when undefined; beta, or C zeros.
  const void* scale(const Tensor& gamma, int64_t C) {
    return gamma.defined() ? gamma.data() : constant(ones_, C, 1.0f);
  }
  const void* shift(const Tensor& beta, int64_t C) { return beta.defined() ? beta.data() : constant(zeros_, C, 0.0f); }
  const float* constant(Tensor& t, int64_t C, float v) {
    if (t.numel() != C) {
      t = c_.empty({C});
      TRAINER_LAUNCH(fill_kernel, cuda::grid_for(C, c_), cuda::kBlock, c_.stream(), t.f32(), C, v);
    }
    return t.f32();
  }

  CudaContext& c_;
  BatchNormParams p_;
  cudnnTensorDescriptor_t xd_ = nullptr, pd_ = nullptr;
  Tensor ones_, zeros_;
};

static RegisterKernel<BatchNormKernel, CudaBatchNorm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
