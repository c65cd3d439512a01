// Float64 references for the sequence ops (LSTM, GRU, embedding) and the sigmoid binary cross-entropy.
#pragma once
#include <cstdint>
#include <vector>

#include "reference.h"

namespace trainer::ref {

// Keras LSTM (gates i, f, c, o; zero initial state) on x [n, t, f] with w [f, 4u], r [u, 4u] and
// b [4u] (or none). Returns every step's h, [n, t, u].
Vec lstm_forward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, int64_t n, int64_t t, int64_t f, int64_t u);
// Backpropagation through time from dh [n, t, u], the loss gradient with respect to every step's
// h (zero for the steps a last-step-only output does not expose). Gradients overwrite dx, dw, dr,
// db (db only when b is given).
void lstm_backward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, const Vec& dh, int64_t n, int64_t t,
                   int64_t f, int64_t u, Vec& dx, Vec& dw, Vec& dr, Vec& db);

// Keras GRU (reset_after: gates z, r, h; zero initial state) on x [n, t, f] with w [f, 3u], r [u, 3u]
// and b [2, 3u] (the input row, then the recurrent one; or none). Returns every step's h, [n, t, u].
Vec gru_forward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, int64_t n, int64_t t, int64_t f, int64_t u);
// Backpropagation through time from dh [n, t, u], as lstm_backward; db is [2, 3u] when b is given.
void gru_backward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, const Vec& dh, int64_t n, int64_t t,
                  int64_t f, int64_t u, Vec& dx, Vec& dw, Vec& dr, Vec& db);

// A recurrent layer's output from every step's h [n, t, u]: all of it (return_sequences) or the
// last step's [n, u]; and the gradient with respect to every step's h from the output's dy.
inline Vec rnn_output(const Vec& h, int64_t n, int64_t t, int64_t u, bool seq) {
  if (seq) return h;
  Vec y(size_t(n * u));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t j = 0; j < u; ++j) y[size_t(s * u + j)] = h[size_t((s * t + t - 1) * u + j)];
  return y;
}
inline Vec rnn_dh(const Vec& dy, int64_t n, int64_t t, int64_t u, bool seq) {
  if (seq) return dy;
  Vec dh(size_t(n * t * u), 0.0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t j = 0; j < u; ++j) dh[size_t((s * t + t - 1) * u + j)] = dy[size_t(s * u + j)];
  return dh;
}

// Embedding lookup of integer ids (any count) in w [vocab, d]: [ids, d]; backward sums each
// position's dy row into its id's row of dw [vocab, d].
Vec embedding_forward(const Vec& ids, const Vec& w, int64_t d);
Vec embedding_backward(const Vec& ids, const Vec& dy, int64_t vocab, int64_t d);

// Binary cross-entropy of sigmoid(logits) against 0/1 labels, per sample
// log(1 + e^{-x}) for z = 1 and log(1 + e^{x}) for z = 0; correct: (x > 0) == z;
// dlogits = (sigmoid(x) - z) · grad_scale. With label smoothing ls the target is t = z(1-ls) + ls/2:
// loss t·log(1 + e^{-x}) + (1-t)·log(1 + e^{x}), dlogits (sigmoid(x) - t) · grad_scale.
struct Bce {
  double loss_sum = 0;
  int64_t correct = 0;
  Vec dlogits;
};
Bce sigmoid_xent(const Vec& logits, const std::vector<int>& labels, double grad_scale, double ls = 0);

}  // namespace trainer::ref
