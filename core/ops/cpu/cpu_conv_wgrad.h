// A plain convolution's weight gradient on AVX-512 (f32 FMAs or AVX512-BF16 dot products): Debian 12's oneDNN has no brgemm one.
#pragma once
#include <cstdint>

#include "core/ops/conv2d.h"
#include "core/ops/cpu/cpu_context.h"

namespace trainer::cpu {

// dw = Σ x ⊗ dy (and db = Σ dy) of one plain (ungrouped) convolution with f32 or bf16 NHWC
// activations, written in f32 as the user's HWIO weights, dw[kh][kw][ic][oc]; any window (kernel,
// stride, dilation, padding), batch, and channel count.
//
// Why: oneDNN 2.6 (Debian 12) computes weight gradients with its older jit kernels. In bf16 they
// ran at 0.47-0.89 of its own forward convolution's speed (brgemm), the largest single loss of a
// bf16 step (MiniGoogLeNet: 86 ms of weight gradients against 65 ms of forward). In f32 they run at
// 0.40-0.88 of the machine's ceiling on MiniGoogLeNet's strided layers and those with few input
// channels (its forward and data-gradient convolutions: 1.04-1.05), but faster than this kernel on
// the others: see preferred().
//
// How: each chunk of images and output rows is packed into a per-thread buffer that stays in L2,
// one 32-bit word per channel and position: x with its padding as zeros, dy with its channels
// padded to 16. In bf16 a word holds one channel of two images (VDPBF16PS multiplies two pairs of
// bf16 values and adds both products to an f32 lane), in f32 one image's value. A micro-kernel
// keeps a block of up to 64 output channels × 6-12 input channels of dw in 24 registers: per
// output position, one load of dy per 16 output channels and one broadcast x word per input
// channel; it starts from zero for each chunk and adds the chunk's sum to dw. Each thread
// accumulates its share of the images into its own f32 dw, and the shares are summed in thread
// order at the end: the result does not depend on timing (it does on the thread count, like
// oneDNN's).
//
// f32 accumulation in either type (bf16: of exact bf16 products, as oneDNN's; like every
// AVX512-BF16 instruction, VDPBF16PS treats bf16 inputs and f32 results below 2^-126 as zero).
class ConvWgrad {
 public:
  struct Window {
    int kh, kw, sh, sw, dh, dw;  // dilation as Keras' (1 = dense)
  };

  // Whether this CPU runs the kernel for activations of type t (F32: AVX-512; BF16: AVX512_BF16),
  // as oneDNN sees it (ONEDNN_MAX_CPU_ISA can lower it).
  static bool available(DType t);

  // Whether a plain convolution's weight gradient should come from here rather than oneDNN (where
  // available): in bf16 always; in f32 where oneDNN 2.6's kernel is the slower one. Measured inside
  // MiniGoogLeNet on a 2-core EPYC (`bench --layers`, both kernels, two runs each): oneDNN's ran at
  // 0.52-0.77 of the ceiling on the strided windows and 0.40-0.88 on inputs of at most
  // kFewInputChannels channels, and ours took 0.2-1.8 ms less per layer there; on the others
  // (160-336 input channels, stride 1) oneDNN's took up to 2.4 ms less. TRAINER_CONV_WGRAD=ours or
  // onednn overrides the choice in both types (to compare them on another machine); it is read when
  // a shape's plan is made, never in the step.
  static constexpr int64_t kFewInputChannels = 96;
  static bool preferred(DType t, const ConvGeometry& g, const Window& w);

  // Sizes the per-thread buffers for one geometry (g.n, g.oh, g.ow > 0), activation type (F32 or
  // BF16) and the context's threads. They live in the calling worker's oneDNN scratch
  // (thread_scratch), which the convolution's weight-gradient primitive would use: they grow on the
  // first call only.
  ConvWgrad(const CpuContext& c, const ConvGeometry& g, const Window& w, DType t);

  // x [N,IH,IW,IC] and dy [N,OH,OW,OC] of the constructor's type; dw [KH,KW,IC,OC] f32
  // overwritten; db [OC] f32 overwritten when not null.
  void run(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db);

 private:
  struct Chunk;
  template <class L>
  void pack(const typename L::T* x, const typename L::T* dy, const Chunk& ch, uint32_t* xp, uint32_t* dyp,
            float* dbp) const;
  template <class L>
  void accumulate(const Chunk& ch, const uint32_t* xp, const uint32_t* dyp, float* dwp, bool first) const;
  template <class L>
  void run_as(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db);

  ConvGeometry g_;
  Window w_;
  DType type_;
  int images_;          // images per packed word: 2 in bf16, 1 in f32
  int64_t ocp_;         // output channels padded to 16
  int64_t wp_, xrows_;  // packed x: columns (the padded row), rows per chunk of `rows_` output rows
  int64_t rows_, groups_per_chunk_;
  int64_t dw_elems_, x_words_, dy_words_;  // per thread: f32 dw, packed x and dy (32-bit words)
  int threads_;
  // Per thread, in the worker's oneDNN scratch: dw [KH*KW*IC*OCP] f32, db [OCP] f32, packed x, packed dy.
  int64_t thread_bytes_;
};

}  // namespace trainer::cpu
