// Float64 references for the transformer ops: layer norm.
#pragma once
#include <cstdint>

#include "reference.h"

namespace trainer::ref {

// Keras LayerNormalization over the last axis of x [rows, C]: (x - mean) / sqrt(var + eps) · gamma
// + beta, var biased; gamma / beta null: 1 / 0.
Vec layer_norm_forward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec* beta, double eps);
// dx, dgamma (Σ dy·x̂ over rows) and dbeta (Σ dy), overwritten, by the chain rule written out
// element by element (not the kernels' closed form): dx_j = Σ_k dy_k·gamma_k·∂x̂_k/∂x_j.
void layer_norm_backward(const Vec& x, int64_t rows, int64_t C, const Vec* gamma, const Vec& dy, double eps, Vec& dx,
                         Vec& dgamma, Vec& dbeta);

}  // namespace trainer::ref
