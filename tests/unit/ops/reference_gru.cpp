// Float64 reference for the GRU op (Keras's reset_after form): forward and backpropagation through time, one sample, step and unit at a time.
#include <cmath>

#include "reference_rnn.h"

namespace trainer::ref {

namespace {

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Every step's gates z, r, hh, the recurrent h projection m_h (with its bias), h_{t-1} and h_t,
// [n, t, u] each.
struct GruTrace {
  Vec z, r, hh, mh, hprev, h;
};

GruTrace gru_trace(const Vec& x, const Vec& w, const Vec& rk, const Vec* b, int64_t n, int64_t t, int64_t f,
                   int64_t u) {
  const size_t size = size_t(n * t * u);
  GruTrace s{Vec(size), Vec(size), Vec(size), Vec(size), Vec(size), Vec(size)};
  const int64_t G = 3 * u;
  for (int64_t s_n = 0; s_n < n; ++s_n) {
    Vec h(size_t(u), 0.0);
    for (int64_t step = 0; step < t; ++step) {
      Vec a(size_t(G), 0.0), m(size_t(G), 0.0);  // x·W + b_in, h·R + b_rec
      for (int64_t k = 0; k < G; ++k) {
        double av = b ? (*b)[size_t(k)] : 0.0, mv = b ? (*b)[size_t(G + k)] : 0.0;
        for (int64_t q = 0; q < f; ++q) av += x[size_t((s_n * t + step) * f + q)] * w[size_t(q * G + k)];
        for (int64_t q = 0; q < u; ++q) mv += h[size_t(q)] * rk[size_t(q * G + k)];
        a[size_t(k)] = av;
        m[size_t(k)] = mv;
      }
      Vec next(static_cast<size_t>(u));
      for (int64_t j = 0; j < u; ++j) {
        const size_t at = size_t((s_n * t + step) * u + j);
        s.z[at] = sig(a[size_t(j)] + m[size_t(j)]);
        s.r[at] = sig(a[size_t(u + j)] + m[size_t(u + j)]);
        s.mh[at] = m[size_t(2 * u + j)];
        s.hh[at] = std::tanh(a[size_t(2 * u + j)] + s.r[at] * s.mh[at]);
        s.hprev[at] = h[size_t(j)];
        next[size_t(j)] = s.z[at] * h[size_t(j)] + (1 - s.z[at]) * s.hh[at];
        s.h[at] = next[size_t(j)];
      }
      h = next;
    }
  }
  return s;
}

}  // namespace

Vec gru_forward(const Vec& x, const Vec& w, const Vec& r, const Vec* b, int64_t n, int64_t t, int64_t f, int64_t u) {
  return gru_trace(x, w, r, b, n, t, f, u).h;
}

void gru_backward(const Vec& x, const Vec& w, const Vec& rk, const Vec* b, const Vec& dh, int64_t n, int64_t t,
                  int64_t f, int64_t u, Vec& dx, Vec& dw, Vec& dr, Vec& db) {
  const GruTrace s = gru_trace(x, w, rk, b, n, t, f, u);
  const int64_t G = 3 * u;
  dx.assign(size_t(n * t * f), 0.0);
  dw.assign(size_t(f * G), 0.0);
  dr.assign(size_t(u * G), 0.0);
  db.assign(b ? size_t(2 * G) : 0, 0.0);
  for (int64_t s_n = 0; s_n < n; ++s_n) {
    Vec carry(size_t(u), 0.0);  // dL/dh_t from the steps after t
    for (int64_t step = t - 1; step >= 0; --step) {
      Vec da(static_cast<size_t>(G)), dm(static_cast<size_t>(G)), next(static_cast<size_t>(u), 0.0);
      for (int64_t j = 0; j < u; ++j) {
        const size_t at = size_t((s_n * t + step) * u + j);
        const double gh = carry[size_t(j)] + dh[at];
        const double z = s.z[at], r = s.r[at], hh = s.hh[at];
        const double dah = gh * (1 - z) * (1 - hh * hh);
        const double daz = gh * (s.hprev[at] - hh) * z * (1 - z);
        const double dar = dah * s.mh[at] * r * (1 - r);
        da[size_t(j)] = dm[size_t(j)] = daz;
        da[size_t(u + j)] = dm[size_t(u + j)] = dar;
        da[size_t(2 * u + j)] = dah;
        dm[size_t(2 * u + j)] = dah * r;
        next[size_t(j)] = gh * z;
      }
      const size_t row = size_t(s_n * t + step);
      for (int64_t k = 0; k < G; ++k) {
        for (int64_t q = 0; q < f; ++q) {
          dx[row * size_t(f) + size_t(q)] += da[size_t(k)] * w[size_t(q * G + k)];
          dw[size_t(q * G + k)] += x[row * size_t(f) + size_t(q)] * da[size_t(k)];
        }
        for (int64_t q = 0; q < u; ++q) {
          next[size_t(q)] += dm[size_t(k)] * rk[size_t(q * G + k)];
          dr[size_t(q * G + k)] += s.hprev[row * size_t(u) + size_t(q)] * dm[size_t(k)];
        }
        if (b) {
          db[size_t(k)] += da[size_t(k)];
          db[size_t(G + k)] += dm[size_t(k)];
        }
      }
      carry = next;
    }
  }
}

}  // namespace trainer::ref
