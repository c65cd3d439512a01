// The weight gradient of a bf16 convolution on AVX512-BF16 dot products, where Debian 12's oneDNN has no brgemm kernel.
#pragma once
#include <cstdint>

#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"

namespace trainer::cpu {

// dw = Σ x ⊗ dy (and db = Σ dy) of one plain (ungrouped) convolution with bf16 NHWC activations,
// written in f32 as the user's HWIO weights, dw[kh][kw][ic][oc]; any window (kernel, stride,
// dilation, padding), batch, and channel count.
//
// Why: oneDNN 2.6 (Debian 12) computes bf16 weight gradients with its older jit_bf16 kernels, at
// 0.47-0.89 of its own forward convolution's speed (brgemm), which made them the largest single
// loss of a bf16 step (MiniGoogLeNet: 86 ms of weight gradients against 65 ms of forward).
//
// How: VDPBF16PS multiplies two pairs of bf16 values and adds both products to an f32 lane. The
// pairs are two images: each chunk of image pairs and output rows is packed with the images'
// channels interleaved (x with its padding as zeros, dy with its channels padded to 16) into a
// per-thread buffer that stays in L2. A micro-kernel keeps a block of up to 64 output channels ×
// 6-12 input channels of dw in 24 registers: per output position, one load of dy per 16 output
// channels and one broadcast x pair per input channel. Each thread accumulates its share of the
// image pairs into its own f32 dw, and the shares are summed in thread order at the end: the
// result does not depend on timing (it does on the thread count, like oneDNN's).
//
// f32 accumulation of exact bf16 products, as oneDNN's; like every AVX512-BF16 instruction,
// VDPBF16PS treats bf16 inputs and f32 results below 2^-126 as zero.
class ConvWgradBf16 {
 public:
  struct Window {
    int kh, kw, sh, sw, dh, dw;  // dilation as Keras' (1 = dense)
  };

  // Whether this CPU has AVX512_BF16, as oneDNN sees it (ONEDNN_MAX_CPU_ISA can lower it).
  static bool available();

  // Sizes the per-thread buffers for one geometry (g.n, g.oh, g.ow > 0) and the context's threads.
  // They live in the calling worker's oneDNN scratch (thread_scratch), which the convolution's
  // weight-gradient primitive would use: they grow on the first call only.
  ConvWgradBf16(const CpuContext& c, const ConvGeometry& g, const Window& w);

  // x [N,IH,IW,IC] and dy [N,OH,OW,OC] bf16; dw [KH,KW,IC,OC] f32 overwritten; db [OC] f32
  // overwritten when not null.
  void run(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db);

 private:
  struct Chunk;
  void pack(const uint16_t* x, const uint16_t* dy, const Chunk& ch, uint16_t* xp, uint16_t* dyp, float* dbp) const;
  void accumulate(const Chunk& ch, const uint16_t* xp, const uint16_t* dyp, float* dwp, bool first) const;

  ConvGeometry g_;
  Window w_;
  int64_t ocp_;         // output channels padded to 16
  int64_t wp_, xrows_;  // packed x: columns (the padded row), rows per chunk of `rows_` output rows
  int64_t rows_, pairs_per_chunk_;
  int64_t dw_elems_, x_elems_, dy_elems_;  // per thread: f32 dw, packed x and dy (uint16)
  int threads_;
  int64_t thread_bytes_;  // per thread, in the worker's oneDNN scratch: dw [KH*KW*IC*OCP] f32, db [OCP] f32, packed x, packed dy
};

}  // namespace trainer::cpu
