// Float64 references for the transformer ops (reference_transformer.h).
#include "reference_transformer.h"

#include <cmath>

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

}  // namespace trainer::ref
