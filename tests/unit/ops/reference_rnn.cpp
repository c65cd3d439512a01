// Float64 references for the LSTM, embedding and sigmoid cross-entropy ops: plain loops, one step and one element at a time.
#include "reference_rnn.h"

#include <cmath>

namespace trainer::ref {

namespace {

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// log(1 + e^v) without overflow.
double softplus(double v) { return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); }

// Every step's activated gates (i, f, g, o) and cell state, [n, t, u] each.
struct LstmTrace {
  Vec i, f, g, o, c, h;
};

LstmTrace lstm_trace(const Vec& x, const Vec& w, const Vec& r, const Vec* b, int64_t n, int64_t t, int64_t f,
                     int64_t u) {
  const size_t size = size_t(n * t * u);
  LstmTrace s{Vec(size), Vec(size), Vec(size), Vec(size), Vec(size), Vec(size)};
  const int64_t G = 4 * u;
  for (int64_t s_n = 0; s_n < n; ++s_n) {
    Vec h(size_t(u), 0.0), c(size_t(u), 0.0);
    for (int64_t step = 0; step < t; ++step) {
      Vec z(size_t(G), 0.0);
      for (int64_t k = 0; k < G; ++k) {
        double a = b ? (*b)[size_t(k)] : 0.0;
        for (int64_t q = 0; q < f; ++q) a += x[size_t((s_n * t + step) * f + q)] * w[size_t(q * G + k)];
        for (int64_t q = 0; q < u; ++q) a += h[size_t(q)] * r[size_t(q * G + k)];
        z[size_t(k)] = a;
      }
      for (int64_t j = 0; j < u; ++j) {
        const size_t at = size_t((s_n * t + step) * u + j);
        s.i[at] = sig(z[size_t(j)]);
        s.f[at] = sig(z[size_t(u + j)]);
        s.g[at] = std::tanh(z[size_t(2 * u + j)]);
        s.o[at] = sig(z[size_t(3 * u + j)]);
        c[size_t(j)] = s.f[at] * c[size_t(j)] + s.i[at] * s.g[at];
        s.c[at] = c[size_t(j)];
      }
      for (int64_t j = 0; j < u; ++j) {
        const size_t at = size_t((s_n * t + step) * u + j);
        h[size_t(j)] = s.o[at] * std::tanh(c[size_t(j)]);
        s.h[at] = h[size_t(j)];
      }
    }
  }
  return s;
}

}  // namespace

Vec lstm_forward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, int64_t n, int64_t t, int64_t f, int64_t u) {
  return lstm_trace(x, w, r, b, n, t, f, u).h;
}

void lstm_backward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, const Vec& dh, int64_t n, int64_t t,
                   int64_t f, int64_t u, Vec& dx, Vec& dw, Vec& dr, Vec& db) {
  const LstmTrace s = lstm_trace(x, w, r, b, n, t, f, u);
  const int64_t G = 4 * u;
  dx.assign(size_t(n * t * f), 0.0);
  dw.assign(size_t(f * G), 0.0);
  dr.assign(size_t(u * G), 0.0);
  db.assign(b ? size_t(G) : 0, 0.0);
  for (int64_t s_n = 0; s_n < n; ++s_n) {
    Vec gh_next(size_t(u), 0.0), gc_next(size_t(u), 0.0);  // from step + 1
    for (int64_t step = t - 1; step >= 0; --step) {
      Vec dz(size_t(G), 0.0);
      for (int64_t j = 0; j < u; ++j) {
        const size_t at = size_t((s_n * t + step) * u + j);
        const double c_prev = step > 0 ? s.c[at - size_t(u)] : 0.0;
        const double tc = std::tanh(s.c[at]);
        const double gh = dh[at] + gh_next[size_t(j)];
        const double gc = gc_next[size_t(j)] + gh * s.o[at] * (1 - tc * tc);
        dz[size_t(j)] = gc * s.g[at] * s.i[at] * (1 - s.i[at]);
        dz[size_t(u + j)] = gc * c_prev * s.f[at] * (1 - s.f[at]);
        dz[size_t(2 * u + j)] = gc * s.i[at] * (1 - s.g[at] * s.g[at]);
        dz[size_t(3 * u + j)] = gh * tc * s.o[at] * (1 - s.o[at]);
        gc_next[size_t(j)] = gc * s.f[at];
      }
      for (int64_t q = 0; q < u; ++q) {  // h_{step-1} feeds z through r
        double a = 0;
        for (int64_t k = 0; k < G; ++k) a += dz[size_t(k)] * r[size_t(q * G + k)];
        gh_next[size_t(q)] = a;
        if (step > 0)
          for (int64_t k = 0; k < G; ++k)
            dr[size_t(q * G + k)] += s.h[size_t((s_n * t + step - 1) * u + q)] * dz[size_t(k)];
      }
      for (int64_t q = 0; q < f; ++q) {
        const size_t xa = size_t((s_n * t + step) * f + q);
        double a = 0;
        for (int64_t k = 0; k < G; ++k) {
          a += dz[size_t(k)] * w[size_t(q * G + k)];
          dw[size_t(q * G + k)] += x[xa] * dz[size_t(k)];
        }
        dx[xa] = a;
      }
      if (b)
        for (int64_t k = 0; k < G; ++k) db[size_t(k)] += dz[size_t(k)];
    }
  }
}

Vec embedding_forward(const Vec& ids, const Vec& w, int64_t d) {
  Vec y(ids.size() * size_t(d));
  for (size_t p = 0; p < ids.size(); ++p)
    for (int64_t j = 0; j < d; ++j) y[p * size_t(d) + size_t(j)] = w[size_t(int64_t(ids[p]) * d + j)];
  return y;
}

Vec embedding_backward(const Vec& ids, const Vec& dy, int64_t vocab, int64_t d) {
  Vec dw(size_t(vocab * d), 0.0);
  for (size_t p = 0; p < ids.size(); ++p)
    for (int64_t j = 0; j < d; ++j) dw[size_t(int64_t(ids[p]) * d + j)] += dy[p * size_t(d) + size_t(j)];
  return dw;
}

Bce sigmoid_xent(const Vec& logits, const std::vector<int>& labels, double grad_scale, double ls) {
  Bce out;
  out.dlogits.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const double x = logits[i], z = labels[i], t = z * (1 - ls) + 0.5 * ls;
    if (ls == 0) out.loss_sum += z == 1 ? softplus(-x) : softplus(x);
    else out.loss_sum += t * softplus(-x) + (1 - t) * softplus(x);
    out.correct += (x > 0) == (z == 1);
    out.dlogits[i] = (sig(x) - t) * grad_scale;
  }
  return out;
}

}  // namespace trainer::ref
