// Softmax and cross-entropy arithmetic shared by the CPU and CUDA kernels: row maximum, shifted exponentials, log-sum-exp, loss, gradient, and the argmax (accuracy) rule.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/ops/math/hd.h"

// One row of C logits x (softmax.h, cpu_softmax.cpp, cuda_softmax.cu):
//   mx = max_j x_j;  softmax_j = exp(x_j - mx) / Σ exp(x - mx) (float);
//   lse = log(Σ_j exp(double(x_j - mx))) (summed in double, rounded to float);
//   loss = lse - (x_label - mx) (index label), or -Σ_{t_j != 0} t_j·((x_j - mx) - lse) (probabilities);
//   dlogits_j = (exp(x_j - mx - lse) - target_j)·scale; hit: argmax(x) == label (resp. argmax(t)),
//   the argmax being the first index of the maximum, a NaN counting as the maximum (the first
//   NaN's index, as torch.argmax and numpy.argmax: a row with a NaN logit predicts that class on
//   every backend).
// Label smoothing ls (Keras's label_smoothing, PyTorch's CrossEntropyLoss(label_smoothing)): the
//   target of class j is t_j·(1-ls) + ls/C (t one-hot for an index label), in the loss and in the
//   gradient; an index label's loss is then (1-ls)·(lse - (x_label - mx)) + ls·(lse - Σ_j(x_j - mx)/C).
// The row reductions' order is each backend's (the CPU's sequential loop; the GPU's fixed block
// tree, cuda_util.cuh); the per-element and per-row arithmetic is here.

namespace trainer::softmax_math {

// One step of the row-maximum scan (x > m: a NaN value is skipped).
TRAINER_HD_INLINE float max_step(float m, float x) { return x > m ? x : m; }

TRAINER_HD_INLINE float exp_shifted(float x, float mx) { return expf(x - mx); }

// softmax backward: dx = y·(dy - Σ dy·y).
TRAINER_HD_INLINE float softmax_grad(float y, float dy, float dot) { return y * (dy - dot); }

// A term of the log-sum-exp's sum, and the log of the sum.
TRAINER_HD_INLINE double lse_term(float x, float mx) { return exp(double(x - mx)); }
TRAINER_HD_INLINE float lse_of(double sum) { return float(log(sum)); }

// An index label's per-sample loss.
TRAINER_HD_INLINE double sparse_loss(float lse, float x_label, float mx) { return double(lse) - double(x_label - mx); }

// A probability label's loss: adds class j's share (target t, logit x) into l.
TRAINER_HD_INLINE void dense_loss_add(double& l, float t, float x, float mx, float lse) {
  if (t != 0.0f) l -= double(t) * (double(x - mx) - double(lse));
}

// Label smoothing's target: t·(1-ls) + ls/C (t itself when ls is 0).
TRAINER_HD_INLINE float smooth(float t, float ls, int64_t C) { return ls == 0.0f ? t : t * (1.0f - ls) + ls / float(C); }

// A term of an index label's smoothed loss: Σ_j double(x_j - mx) is summed from these.
TRAINER_HD_INLINE double shift_term(float x, float mx) { return double(x - mx); }
// An index label's smoothed loss from its unsmoothed one and shift_sum = Σ_j (x_j - mx).
TRAINER_HD_INLINE double smoothed_sparse_loss(double sparse, float lse, double shift_sum, float ls, int64_t C) {
  if (ls == 0.0f) return sparse;
  return (1.0 - double(ls)) * sparse + double(ls) * (double(lse) - shift_sum / double(C));
}

// dlogits_j for target t (1 or 0 for an index label; smooth()'s value under label smoothing).
TRAINER_HD_INLINE float xent_grad(float x, float mx, float lse, float t, float scale) {
  return (expf(x - mx - lse) - t) * scale;
}

// Whether (v2, k2) beats the current best (v, k) of an argmax: a larger value, or an equal one at a
// smaller index, a NaN above every number (the smaller index among NaNs). A total order, so any
// order of combination (the CPU's scan, the GPU's tree) gives the same index: the first NaN's, else
// the first index of the maximum.
TRAINER_HD_INLINE bool argmax_better(float v2, int64_t k2, float v, int64_t k) {
  const bool n2 = v2 != v2, n = v != v;
  if (n2 || n) return n2 && (!n || k2 < k);
  return v2 > v || (v2 == v && k2 < k);
}

TRAINER_HD_INLINE bool label_in_range(int64_t label, int64_t C) { return label >= 0 && label < C; }

// A row's class weight (Keras's fit(class_weight=)): w[cls] of the row's class (its index label,
// the argmax of its probability label, a binary label), 1 without weights. It multiplies the
// row's loss and its gradient's scale; the count and hits are not weighted.
TRAINER_HD_INLINE float class_weight(const float* w, int64_t cls) { return w ? w[cls] : 1.0f; }

// An index label not scored (ignore_class: Keras's, PyTorch's ignore_index): no loss, no hit, a
// zero gradient row, not counted.
TRAINER_HD_INLINE bool label_ignored(int64_t label, bool ignore, int32_t ignore_class) {
  return ignore && label == int64_t(ignore_class);
}

}  // namespace trainer::softmax_math
