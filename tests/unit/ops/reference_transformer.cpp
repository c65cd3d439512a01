// Float64 references for the transformer ops (reference_transformer.h).
#include "reference_transformer.h"

#include <algorithm>
#include <cmath>

#include "core/ops/math/philox.h"

namespace trainer::ref {
namespace {

struct Stats {
  double mean, rstd;
};

Stats row_stats(const Vec& x, int64_t r, int64_t C, double eps) {
  double s = 0, q = 0;
  for (int64_t j = 0; j < C; ++j) s += x[size_t(r * C + j)];
  const double mean = s / double(C);
  for (int64_t j = 0; j < C; ++j) q += (x[size_t(r * C + j)] - mean) * (x[size_t(r * C + j)] - mean);
  return {mean, 1.0 / std::sqrt(q / double(C) + eps)};
}

}  // namespace

Vec layer_norm_forward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec* beta, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const Stats s = row_stats(x, r, C, eps);
    for (int64_t j = 0; j < C; ++j) {
      const size_t i = size_t(r * C + j);
      y[i] = (x[i] - s.mean) * s.rstd * (gamma ? (*gamma)[size_t(j)] : 1.0) + (beta ? (*beta)[size_t(j)] : 0.0);
    }
  }
  return y;
}

void layer_norm_backward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec& dy, double eps, Vec& dx,
                         Vec& dgamma, Vec& dbeta) {
  dx.assign(x.size(), 0.0);
  dgamma.assign(size_t(C), 0.0);
  dbeta.assign(size_t(C), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const Stats s = row_stats(x, r, C, eps);
    auto at = [&](int64_t j) { return size_t(r * C + j); };
    for (int64_t k = 0; k < C; ++k) {
      const double xhat_k = (x[at(k)] - s.mean) * s.rstd;
      dgamma[size_t(k)] += dy[at(k)] * xhat_k;
      dbeta[size_t(k)] += dy[at(k)];
      const double g_k = dy[at(k)] * (gamma ? (*gamma)[size_t(k)] : 1.0);
      // ∂x̂_k/∂x_j = rstd·(δ_kj - 1/C - x̂_k·x̂_j/C)
      for (int64_t j = 0; j < C; ++j) {
        const double xhat_j = (x[at(j)] - s.mean) * s.rstd;
        dx[at(j)] += g_k * s.rstd * ((k == j ? 1.0 : 0.0) - 1.0 / double(C) - xhat_k * xhat_j / double(C));
      }
    }
  }
}

namespace {

// The probabilities p [T][S] of head (b, h) in double.
std::vector<Vec> attention_probs(const Vec& q, const Vec& k, int64_t b, int64_t h, int64_t T, int64_t S, int64_t H,
                                 int64_t Dk, bool causal) {
  std::vector<Vec> p(size_t(T), Vec(size_t(S), 0.0));
  const double scale = 1.0 / std::sqrt(double(Dk));
  for (int64_t i = 0; i < T; ++i) {
    const int64_t keys = causal ? std::min(i + 1, S) : S;
    double m = -INFINITY, sum = 0;
    Vec s(static_cast<size_t>(keys));
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < Dk; ++c)
        dot += q[size_t(((b * T + i) * H + h) * Dk + c)] * k[size_t(((b * S + j) * H + h) * Dk + c)];
      s[size_t(j)] = dot * scale;
      m = std::max(m, s[size_t(j)]);
    }
    for (int64_t j = 0; j < keys; ++j) sum += std::exp(s[size_t(j)] - m);
    for (int64_t j = 0; j < keys; ++j) p[size_t(i)][size_t(j)] = std::exp(s[size_t(j)] - m) / sum;
  }
  return p;
}

}  // namespace

Vec attention_forward(const Vec& q, const Vec& k, const Vec& v, int64_t B, int64_t T, int64_t S, int64_t H,
                      int64_t Dk, int64_t Dv, bool causal, const Vec* drop) {
  auto m = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return drop ? (*drop)[size_t(((b * H + h) * T + i) * S + j)] : 1.0;
  };
  Vec o(size_t(B * T * H * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<Vec> p = attention_probs(q, k, b, h, T, S, H, Dk, causal);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < Dv; ++c)
            o[size_t(((b * T + i) * H + h) * Dv + c)] +=
                p[size_t(i)][size_t(j)] * m(b, h, i, j) * v[size_t(((b * S + j) * H + h) * Dv + c)];
    }
  return o;
}

void attention_backward(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T, int64_t S,
                        int64_t H, int64_t Dk, int64_t Dv, bool causal, Vec& dq, Vec& dk, Vec& dv, const Vec* drop,
                        const Vec* o) {
  auto m = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return drop ? (*drop)[size_t(((b * H + h) * T + i) * S + j)] : 1.0;
  };
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(Dk));
  auto qi = [&](int64_t b, int64_t i, int64_t h, int64_t c) { return size_t(((b * T + i) * H + h) * Dk + c); };
  auto kj = [&](int64_t b, int64_t j, int64_t h, int64_t c) { return size_t(((b * S + j) * H + h) * Dk + c); };
  auto vj = [&](int64_t b, int64_t j, int64_t h, int64_t c) { return size_t(((b * S + j) * H + h) * Dv + c); };
  auto oi = [&](int64_t b, int64_t i, int64_t h, int64_t c) { return size_t(((b * T + i) * H + h) * Dv + c); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<Vec> p = attention_probs(q, k, b, h, T, S, H, Dk, causal);
      for (int64_t i = 0; i < T; ++i) {
        Vec dp(size_t(S), 0.0);
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < Dv; ++c) {
            dp[size_t(j)] += m(b, h, i, j) * dout[oi(b, i, h, c)] * v[vj(b, j, h, c)];
            dv[vj(b, j, h, c)] += p[size_t(i)][size_t(j)] * m(b, h, i, j) * dout[oi(b, i, h, c)];
          }
        double D = 0;  // do_i·o_i of the given outputs
        if (o)
          for (int64_t c = 0; c < Dv; ++c) D += dout[oi(b, i, h, c)] * (*o)[oi(b, i, h, c)];
        for (int64_t j = 0; j < S; ++j) {
          double ds = 0;  // Σ_l dp_l·∂p_l/∂s_j
          if (o)
            ds = p[size_t(i)][size_t(j)] * (dp[size_t(j)] - D);
          else
            for (int64_t l = 0; l < S; ++l)
              ds += dp[size_t(l)] * p[size_t(i)][size_t(l)] * ((l == j ? 1.0 : 0.0) - p[size_t(i)][size_t(j)]);
          for (int64_t c = 0; c < Dk; ++c) {
            dq[qi(b, i, h, c)] += ds * scale * k[kj(b, j, h, c)];
            dk[kj(b, j, h, c)] += ds * scale * q[qi(b, i, h, c)];
          }
        }
      }
    }
}

std::vector<Vec> attention_outputs(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T,
                                   int64_t S, int64_t H, int64_t Dk, int64_t Dv, bool causal, const Vec* drop) {
  std::vector<Vec> out(4);
  out[0] = attention_forward(q, k, v, B, T, S, H, Dk, Dv, causal, drop);
  attention_backward(q, k, v, dout, B, T, S, H, Dk, Dv, causal, out[1], out[2], out[3], drop);
  return out;
}

Vec attention_dropout_mask(size_t n, float rate, uint64_t seed) {
  Vec mask(n);
  for (size_t e = 0; e < n; ++e)
    mask[e] = dropout_keep(dropout_words(e / 4, seed).v[e % 4], dropout_threshold(rate)) ? double(dropout_scale(rate)) : 0.0;
  return mask;
}

double attention_largest_qk(const Vec& q, const Vec& k, int64_t B, int64_t T, int64_t S, int64_t H, int64_t Dk) {
  double most = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t c = 0; c < Dk; ++c)
            s += std::fabs(q[size_t((b * T + i) * H * Dk + h * Dk + c)] * k[size_t((b * S + j) * H * Dk + h * Dk + c)]);
          most = std::max(most, s);
        }
  return most;
}

std::vector<double> attention_errors(const std::vector<Vec>& got, const std::vector<Vec>& want, const Vec& q,
                                     const Vec& k, const Vec& v, const Vec& dout, int64_t Dk, float rate) {
  auto maxabs = [](const Vec& x) {
    double m = 0;
    for (double e : x) m = std::max(m, std::fabs(e));
    return m;
  };
  const double mg = maxabs(dout), mv = maxabs(v), r = 1.0 / (1.0 - double(rate)), c = mg * mv * r / std::sqrt(double(Dk));
  const double floor[4] = {mv * r, c * maxabs(k), c * maxabs(q), mg * r};
  std::vector<double> out;
  for (size_t t = 0; t < 4; ++t) {
    double e = 0, scale = floor[t];
    for (size_t i = 0; i < want[t].size(); ++i) {
      e = std::isnan(got[t][i]) ? INFINITY : std::max(e, std::fabs(got[t][i] - want[t][i]));
      scale = std::max(scale, std::fabs(want[t][i]));
    }
    out.push_back(e / scale);
  }
  return out;
}

}  // namespace trainer::ref
