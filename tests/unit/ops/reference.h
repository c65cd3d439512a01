// Float64 reference implementations of every op (straightforward loops) that the kernels are checked against.
#pragma once
#include <cstdint>
#include <vector>

namespace trainer::ref {

using Vec = std::vector<double>;

// NHWC activations, HWIO conv weights [kh, kw, cin, cout].
struct ConvDims {
  int64_t n, ih, iw, ic, oh, ow, oc;
  int kh, kw, sh, sw, dh, dw;
  int pt, pl;  // top and left padding (bottom/right padding is implied by oh/ow)
};
Vec conv2d_forward(const ConvDims& d, const Vec& x, const Vec& w, const Vec* b);
void conv2d_backward(const ConvDims& d, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw, Vec& db);

// BatchNorm over [m, C] (all axes but the last flattened into m). The running variance averages
// the biased batch variance (Keras 3), or with `unbiased` m/(m - 1) times it (PyTorch; 0 for m = 1).
struct BnTrain {
  Vec y, mean, invstd, running_mean, running_var;
};
BnTrain batchnorm_train(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& beta, const Vec& running_mean,
                        const Vec& running_var, double momentum, double eps, bool unbiased = false);
Vec batchnorm_infer(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& beta, const Vec& running_mean,
                    const Vec& running_var, double eps);
// Analytical gradient of the training-mode batchnorm with respect to x, gamma and beta, with the
// statistics recomputed in double from x.
void batchnorm_backward(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& dy, double eps, Vec& dx,
                        Vec& dgamma, Vec& dbeta);

// 2-D pooling on NHWC; avg excludes the padding; max sends the gradient to the first maximum, and
// a window holding a NaN gives NaN (PyTorch's max_pool2d, pool_math.h).
struct PoolDims {
  int64_t n, ih, iw, c, oh, ow;
  int kh, kw, sh, sw, pt, pl;
};
Vec pool2d_forward(const PoolDims& d, const Vec& x, bool max);
Vec pool2d_backward(const PoolDims& d, const Vec& x, const Vec& dy, bool max);
// `got` against `want` where NaN must match NaN: how many of want's values are NaN, and how many
// of got's differ (a NaN where want has none, a number where it has NaN, another number).
struct NanMatch {
  int64_t nans = 0, wrong = 0;
};
NanMatch match_with_nans(const Vec& got, const Vec& want);

Vec global_pool_forward(const Vec& x, int64_t n, int64_t hw, int64_t c, bool max);
Vec global_pool_backward(const Vec& x, const Vec& dy, int64_t n, int64_t hw, int64_t c, bool max);

// Dense: x [n, k], w [k, u], b [u].
Vec dense_forward(const Vec& x, const Vec& w, const Vec* b, int64_t n, int64_t k, int64_t u);
void dense_backward(const Vec& x, const Vec& w, const Vec& dy, int64_t n, int64_t k, int64_t u, Vec& dx, Vec& dw,
                    Vec& db);

// Activations by name index: 0 linear, 1 relu, 2 relu6, 3 sigmoid, 4 tanh (ActKind order).
// kind: an ActKind's number; alpha: ActivationParams::alpha (leaky_relu's slope, elu's alpha).
Vec activation_forward(int kind, const Vec& x, double alpha = 0);
Vec activation_backward(int kind, const Vec& x, const Vec& dy, double alpha = 0);  // from x

// Softmax over the last axis of [rows, C].
Vec softmax_forward(const Vec& x, int64_t rows, int64_t C);
Vec softmax_backward(const Vec& y, const Vec& dy, int64_t rows, int64_t C);
struct Xent {
  double loss_sum = 0;
  int64_t correct = 0;
  Vec dlogits;
};
// targets: [rows, C] probabilities (a one-hot row for an index label).
Xent cross_entropy(const Vec& logits, const Vec& targets, int64_t rows, int64_t C, double grad_scale);

// Optimizer steps on double state, following optim_update.h: Keras 3's definitions when `keras`,
// else PyTorch's (under keras the weight decay is decoupled: sgd and rmsprop take it so).
void sgd_step(Vec& w, const Vec& g, Vec& v, double lr, double momentum, double wd, double scale, bool nesterov,
              bool keras);
void adam_step(Vec& w, const Vec& g, Vec& m, Vec& v, double lr, double b1, double b2, double eps, double wd,
               double scale, bool decoupled, int t, bool keras);
void rmsprop_step(Vec& w, const Vec& g, Vec& ms, Vec& mom, Vec& mg, double lr, double rho, double momentum, double eps,
                  double wd, double scale, bool centered, bool keras);

// Depthwise conv2d on NHWC with Keras weights [kh, kw, ic, m] (ConvDims with oc = ic * m): output
// channel c * m + j is input channel c convolved with filter j of that channel.
Vec depthwise_conv2d_forward(const ConvDims& d, const Vec& x, const Vec& w, const Vec* b);
void depthwise_conv2d_backward(const ConvDims& d, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw,
                               Vec& db);

// Zero padding of NHWC x [n, h, w, c] by top/bottom rows and left/right columns; backward crops.
struct PadDims {
  int64_t n, h, w, c;
  int top, bottom, left, right;
};
Vec pad2d_forward(const PadDims& d, const Vec& x);
Vec pad2d_backward(const PadDims& d, const Vec& dy);

}  // namespace trainer::ref
