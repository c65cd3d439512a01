// CUDA lstm: cuDNN's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8/Weights_v8, CUDNN_LSTM) with Keras weights repacked into cuDNN's weight space.
//
// cuDNN 9 (cudnn_adv.h), one unidirectional layer:
//  - Descriptor: cudnnSetRNNDescriptor_v8(ALGO_STANDARD, CUDNN_LSTM, DOUBLE_BIAS (NO_BIAS without
//    bias), UNIDIRECTIONAL, LINEAR_INPUT, float data, float math precision, CUDNN_FMA_MATH (no TF32,
//    as PyTorch's fp32 RNNs with allow_tf32 off), inputSize F, hiddenSize = projSize U, 1 layer,
//    no dropout descriptor, CUDNN_RNN_PADDED_IO_ENABLED (required for the unpacked layouts)).
//  - Data: x [N, T, F] and y [N, T, U] are CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED with every
//    sequence T long (host and device length arrays); h/c states [1, N, U] packed. hx = cx = NULL
//    (zero initial state, as Keras); hy is written straight into y [N, U] when only the last step
//    is returned (cuDNN's full output then goes to a buffer the kernel keeps for backward).
//  - Weights: cuDNN's gate order is Keras' (linLayerID 0..3 = i, f, g(c), o on x; 4..7 the same on
//    h), but each gate has its own row-major [U, F] (resp. [U, U]) matrix, the transpose of Keras'
//    column block W[:, kU:(k+1)U], and there are two biases per gate. Where each lives is asked
//    once per descriptor with cudnnGetRNNWeightParams; a kernel repacks W, R and b (input biases)
//    on every forward (the weights change every step) and zeroes the recurrent biases. The
//    gradient of Keras' b is the input-bias gradient alone (the recurrent bias is not a
//    parameter here); dW, dR are unpacked back by the transpose. cudnnRNNBackwardWeights_v8 only
//    adds (CUDNN_WGRAD_MODE_ADD), so the gradient weight space is zeroed first.
//  - Training: forward in CUDNN_FWD_MODE_TRAINING keeps cuDNN's reserve space (owned by this
//    kernel) for backward; inference keeps nothing. Workspace: CudaContext::workspace.
// The first GPU run must check: the op tests against float64 (this repacking — gate order,
// transposes, db from the input bias only — is the part most likely to be wrong); that hy into y
// and NULL hx/cx/dhx/dcx/dcy are accepted by cuDNN 9's v8 entry points; that two runs give
// bit-identical dW/dR/db (cuDNN documents no atomics for RNN backward weights, but it was not
// measured); the workspace/reserve sizes for long sequences against CudaContext::kMaxWorkspace;
// and the speed against the CPU kernel (scripts/gpu-check.sh runs unit_ops).
#include <climits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"
#include "core/ops/lstm.h"

namespace trainer {
namespace {

constexpr const char* kOp = "lstm";

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) cuda::fail(kOp, ": ", what, " = ", v, " exceeds cuDNN's 32-bit sizes");
  return int(v);
}

using RnnDesc = CudnnDesc<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using DataDesc = CudnnDesc<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;

// Offsets (in floats, from the start of the weight space) of the 8 gate matrices and 8 biases
// (IDs 0..3: x-side i, f, g, o; 4..7: h-side), -1 for absent biases.
struct WeightLayout {
  int64_t mat[8];
  int64_t bias[8];
};

// Keras -> cuDNN: space[mat[k] + u·F + q] = w[q·4U + kU + u], space[mat[4+k] + u·U + v] =
// r[v·4U + kU + u], space[bias[k] + u] = b[kU + u] (0 without b), space[bias[4+k] + u] = 0.
// One thread per destination element of the w block, then the r block, then the biases.
__global__ void pack_kernel(WeightLayout L, const float* __restrict__ w, const float* __restrict__ r,
                            const float* __restrict__ b, float* __restrict__ space, int64_t F, int64_t U,
                            bool has_bias) {
  const int64_t G = 4 * U, nw = F * G, nr = U * G, nb = has_bias ? 2 * G : 0;
  CUDA_GRID_LOOP(e, nw + nr + nb) {
    if (e < nw) {  // gate k, row u, column q of cuDNN's [U, F] matrix
      const int64_t k = e / (U * F), rem = e % (U * F), u = rem / F, q = rem % F;
      space[L.mat[k] + rem] = w[q * G + k * U + u];
    } else if (e < nw + nr) {
      const int64_t i = e - nw, k = i / (U * U), rem = i % (U * U), u = rem / U, v = rem % U;
      space[L.mat[4 + k] + rem] = r[v * G + k * U + u];
    } else {
      const int64_t i = e - nw - nr, id = i / U, u = i % U;  // id 0..7
      space[L.bias[id] + u] = id < 4 && b ? b[id * U + u] : 0.0f;
    }
  }
}

// The inverse for the gradients: dw, dr from the matrices, db from the input biases only.
__global__ void unpack_kernel(WeightLayout L, const float* __restrict__ space, float* __restrict__ dw,
                              float* __restrict__ dr, float* __restrict__ db, int64_t F, int64_t U) {
  const int64_t G = 4 * U, nw = F * G, nr = U * G, nb = db ? G : 0;
  CUDA_GRID_LOOP(e, nw + nr + nb) {
    if (e < nw) {  // Keras element (q, kU + u)
      const int64_t q = e / G, col = e % G, k = col / U, u = col % U;
      dw[e] = space[L.mat[k] + u * F + q];
    } else if (e < nw + nr) {
      const int64_t i = e - nw, v = i / G, col = i % G, k = col / U, u = col % U;
      dr[i] = space[L.mat[4 + k] + u * U + v];
    } else {
      const int64_t col = e - nw - nr, k = col / U, u = col % U;
      db[col] = space[L.bias[k] + u];
    }
  }
}

__global__ void fill_int_kernel(int32_t* __restrict__ p, int64_t n, int32_t v) { CUDA_GRID_LOOP(i, n) p[i] = v; }

// Everything one (N, T) needs: data and state descriptors, device sequence lengths, sizes.
struct Plan {
  int64_t n = 0, t = 0;
  DataDesc x, y;
  TensorDesc h;  // [1, N, U], for h and c alike
  Tensor seq_lengths;  // i32 [N], all T
  size_t work_train = 0, reserve = 0, work_infer = 0;
};

class CudaLstm final : public LstmKernel {
 public:
  CudaLstm(OpContext& ctx, const LstmParams& p) : c_(cuda_context(ctx)), p_(p) {
    if (p.units <= 0) cuda::fail(kOp, ": units must be positive, got ", p.units);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b, Tensor& y, bool training) override {
    const lstm::Dims d = check(x, w, r, &b);
    cuda::require_shape(kOp, "y", y, lstm::output_shape(d, p_), dev());
    kept_ = false;
    if (d.n == 0) return;
    prepare(d.f);
    Plan& pl = plan(d);
    TRAINER_LAUNCH(pack_kernel, cuda::grid_for(4 * d.u * (d.f + d.u + 2), c_), cuda::kBlock, c_.stream(), layout_,
                   w.f32(), r.f32(), p_.bias ? b.f32() : nullptr, wspace_.f32(), d.f, d.u, p_.bias);
    float* ys = p_.return_sequences ? y.f32() : sequence_buffer(d);
    float* hy = p_.return_sequences ? nullptr : y.f32();
    const size_t work = training ? pl.work_train : pl.work_infer;
    if (training && reserve_.bytes() < pl.reserve) reserve_ = c_.empty({int64_t((pl.reserve + 3) / 4)});
    void* ws = work ? c_.workspace(work) : nullptr;
    CUDNN_CHECK(cudnnRNNForward(c_.cudnn(), rnn_->d, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                pl.seq_lengths.i32(), pl.x.d, x.f32(), pl.y.d, ys, pl.h.d, nullptr, hy, pl.h.d,
                                nullptr, nullptr, wspace_.bytes(), wspace_.data(), work, ws,
                                training ? pl.reserve : 0, training ? reserve_.data() : nullptr));
    if (training) {
      kept_ = true;
      kept_dims_ = d;
    }
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& y, const Tensor& dy, Tensor& dx,
                Tensor& dw, Tensor& dr, Tensor& db) override {
    const lstm::Dims d = check(x, w, r, nullptr);
    const Shape out = lstm::output_shape(d, p_);
    cuda::require_shape(kOp, "y", y, out, dev());
    cuda::require_shape(kOp, "dy", dy, out, dev());
    cuda::require_shape(kOp, "dw", dw, w.shape(), dev());
    cuda::require_shape(kOp, "dr", dr, r.shape(), dev());
    if (p_.bias) cuda::require_shape(kOp, "db", db, {4 * d.u}, dev());
    if (dx.defined()) cuda::require_shape(kOp, "dx", dx, x.shape(), dev());
    if (d.n == 0) {
      c_.fill_zero(dw.data(), dw.bytes());
      c_.fill_zero(dr.data(), dr.bytes());
      if (p_.bias) c_.fill_zero(db.data(), db.bytes());
      return;
    }
    if (!kept_ || kept_dims_.n != d.n || kept_dims_.t != d.t || kept_dims_.f != d.f)
      throw std::logic_error("lstm: backward without a training forward of this input shape [" + x.shape().str() +
                             "]");
    Plan& pl = plan(d);
    const size_t seq_bytes = size_t(d.n * d.t * d.u) * sizeof(float);
    const float* ys = p_.return_sequences ? y.f32() : seq_.f32();
    const float* dys = dy.f32();
    const float* dhy = nullptr;
    if (!p_.return_sequences) {  // the last step's gradient enters as dhy; every step's dy is zero
      if (dseq_.bytes() < seq_bytes) dseq_ = c_.empty({d.n * d.t * d.u});
      c_.fill_zero(dseq_.data(), seq_bytes);
      dys = dseq_.f32();
      dhy = dy.f32();
    }
    float* dxp = dx.defined() ? dx.f32() : nullptr;
    std::optional<cuda::DeviceBuffer> dx_scratch;  // cuDNN always writes dx
    if (!dxp) {
      dx_scratch.emplace(c_.allocator(), x.bytes());
      dxp = dx_scratch->as<float>();
    }
    void* ws = pl.work_train ? c_.workspace(pl.work_train) : nullptr;
    CUDNN_CHECK(cudnnRNNBackwardData_v8(c_.cudnn(), rnn_->d, pl.seq_lengths.i32(), pl.y.d, ys, dys, pl.x.d, dxp,
                                        pl.h.d, nullptr, dhy, nullptr, pl.h.d, nullptr, nullptr, nullptr,
                                        wspace_.bytes(), wspace_.data(), pl.work_train, ws, pl.reserve,
                                        reserve_.data()));
    c_.fill_zero(dwspace_.data(), dwspace_.bytes());
    CUDNN_CHECK(cudnnRNNBackwardWeights_v8(c_.cudnn(), rnn_->d, CUDNN_WGRAD_MODE_ADD, pl.seq_lengths.i32(), pl.x.d,
                                           x.f32(), pl.h.d, nullptr, pl.y.d, ys, dwspace_.bytes(), dwspace_.data(),
                                           pl.work_train, ws, pl.reserve, reserve_.data()));
    TRAINER_LAUNCH(unpack_kernel, cuda::grid_for(4 * d.u * (d.f + d.u + 1), c_), cuda::kBlock, c_.stream(), layout_,
                   dwspace_.f32(), dw.f32(), dr.f32(), p_.bias ? db.f32() : nullptr, d.f, d.u);
  }

 private:
  Device dev() const { return c_.device(); }

  lstm::Dims check(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor* b) const {
    cuda::require_f32(kOp, "x", x, dev());
    cuda::require_f32(kOp, "w", w, dev());
    cuda::require_f32(kOp, "r", r, dev());
    if (p_.bias && b) cuda::require_f32(kOp, "b", *b, dev());
    const lstm::Dims d = lstm::dims(p_, x, w, r, b);
    to_int(d.n, "batch");
    to_int(d.t, "steps");
    to_int(d.f, "features");
    to_int(4 * d.u, "4 x units");
    return d;
  }

  // The RNN descriptor, weight spaces and their layout for input size F (made once per F).
  void prepare(int64_t F) {
    if (rnn_ && F == f_) return;
    plans_.clear();  // their temp sizes belong to the old descriptor
    kept_ = false;
    rnn_ = std::make_unique<RnnDesc>();
    const int U = int(p_.units);
    CUDNN_CHECK(cudnnSetRNNDescriptor_v8(rnn_->d, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
                                         p_.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS, CUDNN_UNIDIRECTIONAL,
                                         CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, int(F),
                                         U, U, 1, nullptr, CUDNN_RNN_PADDED_IO_ENABLED));
    size_t bytes = 0;
    CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(c_.cudnn(), rnn_->d, &bytes));
    const int64_t floats = int64_t((bytes + 3) / 4);
    wspace_ = c_.empty({floats});
    dwspace_ = c_.empty({floats});
    TensorDesc m, bd;
    const float* base = wspace_.f32();
    for (int id = 0; id < 8; ++id) {
      void* ma = nullptr;
      void* ba = nullptr;
      CUDNN_CHECK(cudnnGetRNNWeightParams(c_.cudnn(), rnn_->d, 0, bytes, wspace_.data(), id, m.d, &ma, bd.d, &ba));
      const int64_t cols = id < 4 ? F : p_.units;
      if (!ma || elements(m.d) != p_.units * cols)
        throw DeviceError(cuda::cat("lstm: cuDNN's matrix ", id, " is not [", p_.units, ", ", cols, "]"));
      layout_.mat[id] = static_cast<const float*>(ma) - base;
      layout_.bias[id] = -1;
      if (p_.bias) {
        if (!ba || elements(bd.d) != p_.units)
          throw DeviceError(cuda::cat("lstm: cuDNN's bias ", id, " is not [", p_.units, "]"));
        layout_.bias[id] = static_cast<const float*>(ba) - base;
      }
    }
    f_ = F;
  }

  static int64_t elements(cudnnTensorDescriptor_t t) {
    cudnnDataType_t type;
    int rank = 0, dims[8], strides[8];
    CUDNN_CHECK(cudnnGetTensorNdDescriptor(t, 8, &type, &rank, dims, strides));
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }

  // The plan for (N, T), made on first use (a few batch shapes are kept: training, the last
  // partial batch, evaluation).
  Plan& plan(const lstm::Dims& d) {
    for (auto& p : plans_)
      if (p->n == d.n && p->t == d.t) return *p;
    if (plans_.size() >= 8) plans_.erase(plans_.begin());
    auto p = std::make_unique<Plan>();
    p->n = d.n;
    p->t = d.t;
    const int N = int(d.n), T = int(d.t), U = int(d.u);
    const std::vector<int> lengths(size_t(N), T);
    CUDNN_CHECK(cudnnSetRNNDataDescriptor(p->x.d, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, T, N,
                                          int(d.f), lengths.data(), nullptr));
    CUDNN_CHECK(cudnnSetRNNDataDescriptor(p->y.d, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, T, N, U,
                                          lengths.data(), nullptr));
    const int hdims[3] = {1, N, U}, hstrides[3] = {N * U, U, 1};
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->h.d, CUDNN_DATA_FLOAT, 3, hdims, hstrides));
    p->seq_lengths = c_.empty({d.n}, DType::I32);
    TRAINER_LAUNCH(fill_int_kernel, cuda::grid_for(d.n, c_), cuda::kBlock, c_.stream(), p->seq_lengths.i32(), d.n,
                   int32_t(T));
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(c_.cudnn(), rnn_->d, CUDNN_FWD_MODE_TRAINING, p->x.d, &p->work_train,
                                          &p->reserve));
    size_t unused = 0;
    CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(c_.cudnn(), rnn_->d, CUDNN_FWD_MODE_INFERENCE, p->x.d, &p->work_infer,
                                          &unused));
    plans_.push_back(std::move(p));
    return *plans_.back();
  }

  // cuDNN's full output [N, T, U] when only the last step is returned (kept for backward).
  float* sequence_buffer(const lstm::Dims& d) {
    const int64_t n = d.n * d.t * d.u;
    if (seq_.numel() < n) seq_ = c_.empty({n});
    return seq_.f32();
  }

  CudaContext& c_;
  LstmParams p_;
  int64_t f_ = 0;
  std::unique_ptr<RnnDesc> rnn_;
  WeightLayout layout_{};
  Tensor wspace_, dwspace_;  // cuDNN weight space (repacked each forward) and its gradient
  std::vector<std::unique_ptr<Plan>> plans_;
  Tensor reserve_;     // cuDNN's reserve space of the last training forward
  Tensor seq_, dseq_;  // full output and zero output gradient, without return_sequences
  bool kept_ = false;
  lstm::Dims kept_dims_{};
};

static RegisterKernel<LstmKernel, CudaLstm> reg(DeviceKind::CUDA);

}  // namespace
}  // namespace trainer
