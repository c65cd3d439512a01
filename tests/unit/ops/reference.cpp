// Float64 reference implementations (plain loops, no cleverness) for the op tests.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace trainer::ref {

Vec conv2d_forward(const ConvDims& d, const Vec& x, const Vec& w, const Vec* b) {
  Vec y(size_t(d.n * d.oh * d.ow * d.oc), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t co = 0; co < d.oc; ++co) {
          double s = b ? (*b)[co] : 0.0;
          for (int ky = 0; ky < d.kh; ++ky)
            for (int kx = 0; kx < d.kw; ++kx) {
              int64_t iy = oy * d.sh - d.pt + ky * d.dh, ix = ox * d.sw - d.pl + kx * d.dw;
              if (iy < 0 || iy >= d.ih || ix < 0 || ix >= d.iw) continue;
              for (int64_t ci = 0; ci < d.ic; ++ci)
                s += x[((n * d.ih + iy) * d.iw + ix) * d.ic + ci] * w[((ky * d.kw + kx) * d.ic + ci) * d.oc + co];
            }
          y[((n * d.oh + oy) * d.ow + ox) * d.oc + co] = s;
        }
  return y;
}

void conv2d_backward(const ConvDims& d, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw, Vec& db) {
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(size_t(d.oc), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t co = 0; co < d.oc; ++co) {
          double g = dy[((n * d.oh + oy) * d.ow + ox) * d.oc + co];
          db[co] += g;
          for (int ky = 0; ky < d.kh; ++ky)
            for (int kx = 0; kx < d.kw; ++kx) {
              int64_t iy = oy * d.sh - d.pt + ky * d.dh, ix = ox * d.sw - d.pl + kx * d.dw;
              if (iy < 0 || iy >= d.ih || ix < 0 || ix >= d.iw) continue;
              for (int64_t ci = 0; ci < d.ic; ++ci) {
                size_t xi = size_t(((n * d.ih + iy) * d.iw + ix) * d.ic + ci);
                size_t wi = size_t(((ky * d.kw + kx) * d.ic + ci) * d.oc + co);
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
            }
        }
}

static void channel_stats(const Vec& x, int64_t m, int64_t C, Vec& mean, Vec& var) {
  mean.assign(size_t(C), 0.0);
  var.assign(size_t(C), 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) mean[c] += x[r * C + c];
  for (auto& v : mean) v /= double(m);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) var[c] += (x[r * C + c] - mean[c]) * (x[r * C + c] - mean[c]);
  for (auto& v : var) v /= double(m);  // biased
}

BnTrain batchnorm_train(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& beta, const Vec& running_mean,
                        const Vec& running_var, double momentum, double eps, bool unbiased) {
  BnTrain o;
  Vec var;
  channel_stats(x, m, C, o.mean, var);
  o.invstd.resize(size_t(C));
  o.running_mean.resize(size_t(C));
  o.running_var.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) {
    o.invstd[c] = 1.0 / std::sqrt(var[c] + eps);
    o.running_mean[c] = momentum * running_mean[c] + (1 - momentum) * o.mean[c];
    const double batch_var = !unbiased ? var[c] : m > 1 ? var[c] * double(m) / double(m - 1) : 0.0;
    o.running_var[c] = momentum * running_var[c] + (1 - momentum) * batch_var;
  }
  o.y.resize(x.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) o.y[r * C + c] = gamma[c] * (x[r * C + c] - o.mean[c]) * o.invstd[c] + beta[c];
  return o;
}

Vec batchnorm_infer(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& beta, const Vec& running_mean,
                    const Vec& running_var, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = gamma[c] * (x[r * C + c] - running_mean[c]) / std::sqrt(running_var[c] + eps) + beta[c];
  return y;
}

void batchnorm_backward(const Vec& x, int64_t m, int64_t C, const Vec& gamma, const Vec& dy, double eps, Vec& dx,
                        Vec& dgamma, Vec& dbeta) {
  Vec mean, var;
  channel_stats(x, m, C, mean, var);
  dgamma.assign(size_t(C), 0.0);
  dbeta.assign(size_t(C), 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[r * C + c] - mean[c]) / std::sqrt(var[c] + eps);
      dbeta[c] += dy[r * C + c];
      dgamma[c] += dy[r * C + c] * xhat;
    }
  // dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat))
  dx.resize(x.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < C; ++c) {
      double is = 1.0 / std::sqrt(var[c] + eps);
      double xhat = (x[r * C + c] - mean[c]) * is;
      dx[r * C + c] = gamma[c] * is / double(m) * (double(m) * dy[r * C + c] - dbeta[c] - xhat * dgamma[c]);
    }
}

// Calls f(iy, ix) for each in-bounds input position of output (oy, ox)'s window.
template <class F>
static void window(const PoolDims& d, int64_t oy, int64_t ox, F&& f) {
  for (int ky = 0; ky < d.kh; ++ky)
    for (int kx = 0; kx < d.kw; ++kx) {
      int64_t iy = oy * d.sh - d.pt + ky, ix = ox * d.sw - d.pl + kx;
      if (iy >= 0 && iy < d.ih && ix >= 0 && ix < d.iw) f(iy, ix);
    }
}

Vec pool2d_forward(const PoolDims& d, const Vec& x, bool max) {
  Vec y(size_t(d.n * d.oh * d.ow * d.c));
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t c = 0; c < d.c; ++c) {
          double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
          int cnt = 0;
          window(d, oy, ox, [&](int64_t iy, int64_t ix) {
            double v = x[((n * d.ih + iy) * d.iw + ix) * d.c + c];
            if (!max) acc += v;
            else if (!std::isnan(acc) && (std::isnan(v) || v > acc)) acc = v;  // a NaN, once seen, stays
            ++cnt;
          });
          y[((n * d.oh + oy) * d.ow + ox) * d.c + c] = max ? acc : acc / cnt;
        }
  return y;
}

NanMatch match_with_nans(const Vec& got, const Vec& want) {
  NanMatch m;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    m.nans += std::isnan(want[i]);
    m.wrong += std::isnan(want[i]) ? !std::isnan(got[i]) : got[i] != want[i];
  }
  m.wrong += int64_t(got.size() > want.size() ? got.size() - want.size() : want.size() - got.size());
  return m;
}

Vec pool2d_backward(const PoolDims& d, const Vec& x, const Vec& dy, bool max) {
  Vec dx(x.size(), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t c = 0; c < d.c; ++c) {
          double g = dy[((n * d.oh + oy) * d.ow + ox) * d.c + c];
          int cnt = 0;
          double best = -std::numeric_limits<double>::infinity();
          size_t arg = 0;
          window(d, oy, ox, [&](int64_t iy, int64_t ix) {
            size_t i = size_t(((n * d.ih + iy) * d.iw + ix) * d.c + c);
            if (x[i] > best) best = x[i], arg = i;
            ++cnt;
          });
          if (max) {
            dx[arg] += g;
          } else {
            window(d, oy, ox, [&](int64_t iy, int64_t ix) { dx[((n * d.ih + iy) * d.iw + ix) * d.c + c] += g / cnt; });
          }
        }
  return dx;
}

Vec global_pool_forward(const Vec& x, int64_t n, int64_t hw, int64_t c, bool max) {
  Vec y(size_t(n * c));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) {
      double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t s = 0; s < hw; ++s) {
        double v = x[(i * hw + s) * c + k];
        acc = max ? std::max(acc, v) : acc + v;
      }
      y[i * c + k] = max ? acc : acc / double(hw);
    }
  return y;
}

Vec global_pool_backward(const Vec& x, const Vec& dy, int64_t n, int64_t hw, int64_t c, bool max) {
  Vec dx(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) {
      if (max) {
        int64_t arg = 0;
        for (int64_t s = 1; s < hw; ++s)
          if (x[(i * hw + s) * c + k] > x[(i * hw + arg) * c + k]) arg = s;
        dx[(i * hw + arg) * c + k] = dy[i * c + k];
      } else {
        for (int64_t s = 0; s < hw; ++s) dx[(i * hw + s) * c + k] = dy[i * c + k] / double(hw);
      }
    }
  return dx;
}

Vec dense_forward(const Vec& x, const Vec& w, const Vec* b, int64_t n, int64_t k, int64_t u) {
  Vec y(size_t(n * u));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < u; ++j) {
      double s = b ? (*b)[j] : 0.0;
      for (int64_t l = 0; l < k; ++l) s += x[i * k + l] * w[l * u + j];
      y[i * u + j] = s;
    }
  return y;
}

void dense_backward(const Vec& x, const Vec& w, const Vec& dy, int64_t n, int64_t k, int64_t u, Vec& dx, Vec& dw,
                    Vec& db) {
  dx.assign(size_t(n * k), 0.0);
  dw.assign(size_t(k * u), 0.0);
  db.assign(size_t(u), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < u; ++j) {
      double g = dy[i * u + j];
      db[j] += g;
      for (int64_t l = 0; l < k; ++l) {
        dx[i * k + l] += g * w[l * u + j];
        dw[l * u + j] += g * x[i * k + l];
      }
    }
}

static double act(int kind, double v, double alpha = 0) {
  constexpr double kSeluA = 1.67326324, kSeluS = 1.05070098;
  switch (kind) {
    case 1:
      return v > 0 ? v : 0;
    case 2:
      return std::min(std::max(v, 0.0), 6.0);
    case 3:
      return 1.0 / (1.0 + std::exp(-v));
    case 4:
      return std::tanh(v);
    case 5:  // gelu: x Φ(x)
      return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case 6:  // gelu, tanh form
      return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case 7:  // silu: x sigmoid(x)
      return v / (1.0 + std::exp(-v));
    case 8:  // leaky_relu
      return v > 0 ? v : alpha * v;
    case 9:  // elu
      return v > 0 ? v : alpha * std::expm1(v);
    case 10:  // selu
      return kSeluS * (v > 0 ? v : kSeluA * std::expm1(v));
    case 11:  // softplus
      return std::log1p(std::exp(v));
    case 12:  // hard_sigmoid: relu6(x + 3) / 6
      return std::min(std::max(v + 3, 0.0), 6.0) / 6;
    case 13:  // hard_silu
      return v * std::min(std::max(v + 3, 0.0), 6.0) / 6;
    case 14:  // mish: x tanh(softplus(x))
      return v * std::tanh(std::log1p(std::exp(v)));
    default:
      return v;
  }
}

static double act_grad(int kind, double v, double alpha = 0) {
  constexpr double kSeluA = 1.67326324, kSeluS = 1.05070098;
  switch (kind) {
    case 1:
      return v > 0 ? 1 : 0;
    case 2:
      return v > 0 && v < 6 ? 1 : 0;
    case 3: {
      double s = act(3, v);
      return s * (1 - s);
    }
    case 4: {
      double t = std::tanh(v);
      return 1 - t * t;
    }
    case 5:  // Φ(x) + x φ(x)
      return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    case 6: {
      const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (v + 0.044715 * v * v * v));
      return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
    }
    case 7: {  // s (1 + x (1 - s))
      const double s = 1.0 / (1.0 + std::exp(-v));
      return s * (1.0 + v * (1.0 - s));
    }
    case 8:
      return v > 0 ? 1 : alpha;
    case 9:
      return v > 0 ? 1 : alpha * std::exp(v);
    case 10:
      return v > 0 ? kSeluS : kSeluS * kSeluA * std::exp(v);
    case 11:  // sigmoid
      return 1.0 / (1.0 + std::exp(-v));
    case 12:
      return v > -3 && v < 3 ? 1.0 / 6 : 0;
    case 13:  // h + x h' (h' = 1/6 inside (-3, 3))
      return std::min(std::max(v + 3, 0.0), 6.0) / 6 + (v > -3 && v < 3 ? v / 6 : 0);
    case 14: {  // t + x sigmoid(x) (1 - t^2)
      const double t = std::tanh(std::log1p(std::exp(v)));
      return t + v / (1.0 + std::exp(-v)) * (1 - t * t);
    }
    default:
      return 1;
  }
}

Vec activation_forward(int kind, const Vec& x, double alpha) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = act(kind, x[i], alpha);
  return y;
}

Vec activation_backward(int kind, const Vec& x, const Vec& dy, double alpha) {
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = dy[i] * act_grad(kind, x[i], alpha);
  return dx;
}

Vec softmax_forward(const Vec& x, int64_t rows, int64_t C) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = *std::max_element(x.begin() + r * C, x.begin() + (r + 1) * C), s = 0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[r * C + j] - mx);
    for (int64_t j = 0; j < C; ++j) y[r * C + j] = std::exp(x[r * C + j] - mx) / s;
  }
  return y;
}

Vec softmax_backward(const Vec& y, const Vec& dy, int64_t rows, int64_t C) {
  Vec dx(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t j = 0; j < C; ++j) dot += y[r * C + j] * dy[r * C + j];
    for (int64_t j = 0; j < C; ++j) dx[r * C + j] = y[r * C + j] * (dy[r * C + j] - dot);
  }
  return dx;
}

Xent cross_entropy(const Vec& logits, const Vec& targets, int64_t rows, int64_t C, double grad_scale) {
  Xent o;
  Vec p = softmax_forward(logits, rows, C);
  o.dlogits.resize(logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t pred = 0, lab = 0;
    for (int64_t j = 0; j < C; ++j) {
      size_t i = size_t(r * C + j);
      if (targets[i] != 0) o.loss_sum -= targets[i] * std::log(p[i]);
      if (logits[i] > logits[r * C + pred]) pred = j;
      if (targets[i] > targets[r * C + lab]) lab = j;
      o.dlogits[i] = (p[i] - targets[i]) * grad_scale;
    }
    o.correct += pred == lab;
  }
  return o;
}

// keras: Keras 3's definitions (decoupled weight decay first, w -= lr*wd*w); else PyTorch's.
void sgd_step(Vec& w, const Vec& g, Vec& v, double lr, double momentum, double wd, double scale, bool nesterov,
              bool keras) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (keras) {
      const double gi = g[i] * scale;
      w[i] -= lr * wd * w[i];
      v[i] = momentum * v[i] - lr * gi;
      w[i] += nesterov ? momentum * v[i] - lr * gi : v[i];
      continue;
    }
    double gi = g[i] * scale + wd * w[i];
    v[i] = momentum * v[i] + gi;
    w[i] -= lr * (nesterov ? gi + momentum * v[i] : v[i]);
  }
}

void adam_step(Vec& w, const Vec& g, Vec& m, Vec& v, double lr, double b1, double b2, double eps, double wd,
               double scale, bool decoupled, int t, bool keras) {
  double bias1 = 1 - std::pow(b1, t), bias2 = 1 - std::pow(b2, t);
  for (size_t i = 0; i < w.size(); ++i) {
    double gi = g[i] * scale + (decoupled ? 0.0 : wd * w[i]);
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    double step = keras ? lr * std::sqrt(bias2) / bias1 * m[i] / (std::sqrt(v[i]) + eps)
                        : lr * (m[i] / bias1) / (std::sqrt(v[i] / bias2) + eps);
    if (decoupled) w[i] -= lr * wd * w[i];
    w[i] -= step;
  }
}

void rmsprop_step(Vec& w, const Vec& g, Vec& ms, Vec& mom, Vec& mg, double lr, double rho, double momentum, double eps,
                  double wd, double scale, bool centered, bool keras) {
  for (size_t i = 0; i < w.size(); ++i) {
    double gi = g[i] * scale + (keras ? 0.0 : wd * w[i]);
    if (keras) w[i] -= lr * wd * w[i];
    ms[i] = rho * ms[i] + (1 - rho) * gi * gi;
    double var = ms[i];
    if (centered) {
      mg[i] = rho * mg[i] + (1 - rho) * gi;
      var -= mg[i] * mg[i];
    }
    // keras: lr g / sqrt(var + eps), the rate inside the momentum; pytorch: g / (sqrt(var) + eps),
    // the rate outside.
    double q = keras ? gi / std::sqrt(var + eps) : gi / (std::sqrt(var) + eps);
    if (momentum != 0) {
      mom[i] = momentum * mom[i] + (keras ? lr * q : q);
      w[i] -= keras ? mom[i] : lr * mom[i];
    } else {
      w[i] -= lr * q;
    }
  }
}

Vec depthwise_conv2d_forward(const ConvDims& d, const Vec& x, const Vec& w, const Vec* b) {
  const int64_t m = d.oc / d.ic;
  Vec y(size_t(d.n * d.oh * d.ow * d.oc), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t c = 0; c < d.ic; ++c)
          for (int64_t j = 0; j < m; ++j) {
            const int64_t co = c * m + j;
            double s = b ? (*b)[co] : 0.0;
            for (int ky = 0; ky < d.kh; ++ky)
              for (int kx = 0; kx < d.kw; ++kx) {
                int64_t iy = oy * d.sh - d.pt + ky * d.dh, ix = ox * d.sw - d.pl + kx * d.dw;
                if (iy < 0 || iy >= d.ih || ix < 0 || ix >= d.iw) continue;
                s += x[((n * d.ih + iy) * d.iw + ix) * d.ic + c] * w[((ky * d.kw + kx) * d.ic + c) * m + j];
              }
            y[((n * d.oh + oy) * d.ow + ox) * d.oc + co] = s;
          }
  return y;
}

void depthwise_conv2d_backward(const ConvDims& d, const Vec& x, const Vec& w, const Vec& dy, Vec& dx, Vec& dw,
                               Vec& db) {
  const int64_t m = d.oc / d.ic;
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(size_t(d.oc), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t c = 0; c < d.ic; ++c)
          for (int64_t j = 0; j < m; ++j) {
            const int64_t co = c * m + j;
            double g = dy[((n * d.oh + oy) * d.ow + ox) * d.oc + co];
            db[co] += g;
            for (int ky = 0; ky < d.kh; ++ky)
              for (int kx = 0; kx < d.kw; ++kx) {
                int64_t iy = oy * d.sh - d.pt + ky * d.dh, ix = ox * d.sw - d.pl + kx * d.dw;
                if (iy < 0 || iy >= d.ih || ix < 0 || ix >= d.iw) continue;
                size_t xi = size_t(((n * d.ih + iy) * d.iw + ix) * d.ic + c);
                size_t wi = size_t(((ky * d.kw + kx) * d.ic + c) * m + j);
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
          }
}

Vec pad2d_forward(const PadDims& d, const Vec& x) {
  const int64_t oh = d.h + d.top + d.bottom, ow = d.w + d.left + d.right;
  Vec y(size_t(d.n * oh * ow * d.c), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t iy = 0; iy < d.h; ++iy)
      for (int64_t ix = 0; ix < d.w; ++ix)
        for (int64_t c = 0; c < d.c; ++c)
          y[((n * oh + iy + d.top) * ow + ix + d.left) * d.c + c] = x[((n * d.h + iy) * d.w + ix) * d.c + c];
  return y;
}

Vec pad2d_backward(const PadDims& d, const Vec& dy) {
  const int64_t oh = d.h + d.top + d.bottom, ow = d.w + d.left + d.right;
  Vec dx(size_t(d.n * d.h * d.w * d.c), 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t iy = 0; iy < d.h; ++iy)
      for (int64_t ix = 0; ix < d.w; ++ix)
        for (int64_t c = 0; c < d.c; ++c)
          dx[((n * d.h + iy) * d.w + ix) * d.c + c] = dy[((n * oh + iy + d.top) * ow + ix + d.left) * d.c + c];
  return dx;
}

}  // namespace trainer::ref
