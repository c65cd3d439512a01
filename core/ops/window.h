// Sliding-window geometry shared by convolution and pooling ("same"/"valid" as Keras computes them).
#pragma once
#include <cstdint>
#include <string>

namespace trainer {

enum class Padding { Valid, Same };

struct Window1d {
  int64_t out = 0;
  int pad_before = 0;
  int pad_after = 0;
};

// Keras/TensorFlow: valid -> out = floor((in - eff_k) / s) + 1; same -> out = ceil(in / s) with
// total padding max((out - 1) * s + eff_k - in, 0), the smaller half before (top/left). `before`
// and `after`: zeros added around the input first, with valid only (a ZeroPadding2D folded into
// the window that follows it: the padded input's valid windows).
inline Window1d window_1d(int64_t in, int k, int stride, int dilation, Padding p, int before = 0, int after = 0) {
  int64_t eff = int64_t(k - 1) * dilation + 1;
  Window1d w;
  if (p == Padding::Valid) {
    const int64_t padded = in + before + after;
    w.out = padded >= eff ? (padded - eff) / stride + 1 : 0;
    w.pad_before = before;
    w.pad_after = after;
  } else {
    w.out = (in + stride - 1) / stride;
    int64_t total = (w.out - 1) * stride + eff - in;
    if (total < 0) total = 0;
    w.pad_before = int(total / 2);
    w.pad_after = int(total - total / 2);
  }
  return w;
}

inline const char* padding_name(Padding p) { return p == Padding::Same ? "same" : "valid"; }

}  // namespace trainer
