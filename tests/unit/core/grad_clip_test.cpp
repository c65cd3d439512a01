// Gradient clipping's host side: the coefficient in both conventions, and what GradClip::begin records and returns.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/optim/grad_clip.h"

using namespace trainer;

TEST_CASE("gradient clipping: the coefficient in Keras's and PyTorch's forms") {
  CHECK(clip_coefficient(0.5, 1.0, true) == 1.0);       // under the limit: untouched
  CHECK(clip_coefficient(4.0, 1.0, true) == 0.25);      // max_norm / norm
  CHECK(clip_coefficient(1.0, 1.0, true) == 1.0);
  CHECK(clip_coefficient(0.5, 1.0, false) == 1.0);      // min(1, ...)
  CHECK(clip_coefficient(4.0, 1.0, false) == 1.0 / (4.0 + 1e-6));
  CHECK(clip_coefficient(1.0, 1.0, false) < 1.0);       // PyTorch's epsilon clips at the limit, by 1e-6
  // A NaN norm (NaN gradients without loss scaling) leaves the factor at 1: the NaN gradients stay
  // NaN and the loss says so (terminate_on_nan), rather than a factor hiding them.
  CHECK(clip_coefficient(NAN, 1.0, true) == 1.0);
  CHECK(clip_coefficient(NAN, 1.0, false) == 1.0);
}

TEST_CASE("gradient clipping: begin() records the unscaled norm and returns the update's gradient factor") {
  GradClipOptions o;
  o.mode = GradClipOptions::Mode::Norm;
  o.limit = 1.0;
  GradClip c(o);
  // Gradients scaled by 1024 with a sum of squares of 1024^2 * 16: the norm is 4, the factor 1/4.
  CHECK(c.begin(1024.0 * 1024.0 * 16.0, 1.0f / 1024) == 0.25f / 1024);
  CHECK(c.grad_norm() == 4.0);
  CHECK(c.begin(0.25, 1.0f) == 1.0f);  // under the limit
  CHECK(c.grad_norm() == 0.5);
  c.skipped();
  CHECK(std::isnan(c.grad_norm()));
  o.mode = GradClipOptions::Mode::Value;
  GradClip v(o);
  CHECK(v.begin(16.0, 0.5f) == 1.0f);  // clip() unscales the elements; the update takes them as they are
  CHECK(v.grad_norm() == 2.0);
  GradClip off;
  CHECK(off.begin(16.0, 0.5f) == 0.5f);
  CHECK(std::isnan(off.grad_norm()));
}
