// FastPaths: which of the backends' fast paths a context takes, each beside the slower reference path that computes the same thing.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace trainer {

// Every fast path below was added for speed and keeps a reference path beside it; with the path off
// the reference runs. Tests compare the two on random inputs (tests/unit/ops/fastpath_*_test.cpp,
// tests/unit/core/fast_paths_training_test.cpp); users turn them off to rule them out
// (TRAINER_FAST_PATHS, README "Fast paths"). The names are those of TRAINER_FAST_PATHS.
enum class FastPath : uint32_t {
  ConvWgrad = 1u << 0,    // conv_wgrad: plain convolutions' weight gradients from our AVX-512 kernel (else oneDNN's)
  Conv1x1 = 1u << 1,      // conv_1x1: f32 1x1 convolutions at stride 1 as GEMMs (else oneDNN's convolution)
  AddDx = 1u << 2,        // add_dx: a 1x1 convolution or a layer norm adds its input gradient into a shared one (else the executor sums)
  BnGate = 1u << 3,       // bn_gate: batch norm's backward decides its fused activation's gate from x (else reads y)
  BnSiblings = 1u << 4,   // bn_siblings: batch norms filling one concat run as one pass (else one by one)
  Slices = 1u << 5,       // slices: a concat's inputs written in place as its channel slices (else copied)
  BnAct = 1u << 6,        // bn_act: batch norm applies the ReLU/ReLU6 that follows it (else the activation layer runs)
  Gelu = 1u << 7,         // gelu: GELU (both forms, f32 and bf16) forward and backward by oneDNN's eltwise (else libm's erff/tanhf loop)
  AttnBlocks = 1u << 8,   // attn_blocks: CPU attention by blocks of query rows, each against the keys it sees (else all rows against all keys)
  AttnGemm = 1u << 9,     // attn_gemm: CUDA attention as batched cuBLAS GEMMs around a kernel of the rows' softmax (else one block per query row)
  AttnCudnn = 1u << 10,   // attn_cudnn: bf16/fp16 CUDA attention by cuDNN's fused flash-attention engines (else attn_gemm)
  PadFold = 1u << 11,     // pad_fold: a zero_pad2d read only by a 'valid' depthwise convolution is folded into its windows (else padded copies)
  SoftmaxExp = 1u << 12,  // softmax_exp: the CPU's softmax exponentials (attention's, the cross-entropy's) by a vectorised polynomial, row sums in lanes (else libm's, in order)
  AttnKernel = 1u << 13,  // attn_kernel: the CPU attention's products by our AVX-512 micro-kernel, in registers (else oneDNN's sgemm per product)
  AttnBf16 = 1u << 14,    // attn_bf16: with attn_kernel, a bf16 attention's products by AVX512_BF16 dot products, probabilities and score gradients rounded to bf16 (else f32 FMAs on the widened values)
  AttnSoftmax = 1u << 15, // attn_softmax: the CPU attention's softmax rows in AVX-512, one exponential per score in forward (else softmax_exp's rows, or libm's)
  DenseWgrad = 1u << 16,  // dense_wgrad: a bf16 CPU dense layer's weight gradient xᵀ·dy from x transposed by our AVX-512 copy, oneDNN's matmul on plain operands (else the matmul reads x transposed)
  DwTiled = 1u << 17,     // dw_tiled: CUDA depthwise 3x3/5x5 convolutions at stride 1/2 by kernels specialised to the window, 16 bytes of channels a thread, the filter gradient by blocks of rows (else the general kernels)
  Conv1x1Gemm = 1u << 18, // conv_1x1_gemm: CUDA bf16/f16 1x1 convolutions at stride 1 as the dense layer's cuBLAS GEMMs (no weight transposes, dw in f32; else cuDNN)
};

class FastPaths {
 public:
  static constexpr uint32_t kAll = (1u << 19) - 1;
  // What runs when nothing says otherwise: every path but those not yet run on their hardware.
  // attn_cudnn started off and joined after the H200 run of 2026-11-30
  // (docs/gpu-runs/2026-11-30-h200.md); dw_tiled (written 2026-12-01 without a GPU, its arithmetic
  // tested on the host) and conv_1x1_gemm (the same day, the dense layer's GEMMs) stay off until a
  // GPU run has compared them with their reference paths and timed them (scripts/gpu-check.sh's
  // ops and bench-mnv2 phases).
  static constexpr uint32_t kDefault = kAll & ~uint32_t(FastPath::DwTiled) & ~uint32_t(FastPath::Conv1x1Gemm);
  static FastPaths all() { return FastPaths(kAll); }
  static FastPaths defaults() { return FastPaths(kDefault); }
  static FastPaths none() { return FastPaths(0); }
  // A spec: comma-separated items applied left to right from the defaults: "all", "none",
  // "default", a name (on) or "-name" (off). E.g. "none,conv_wgrad" (only that one),
  // "-slices,-bn_siblings", "attn_cudnn" (the defaults and that one). Throws
  // std::invalid_argument naming the unknown item and the known names.
  static FastPaths parse(std::string_view spec);
  // TRAINER_FAST_PATHS (unset: the defaults), then the older single switches: TRAINER_CONV_1X1=onednn turns
  // conv_1x1 off, TRAINER_CONV_WGRAD=onednn conv_wgrad (=ours forces our kernel where the rule
  // would not take it: ConvWgrad::preferred).
  static FastPaths from_env();

  bool has(FastPath p) const { return (on_ & uint32_t(p)) != 0; }
  FastPaths with(FastPath p, bool on) const { return FastPaths(on ? on_ | uint32_t(p) : on_ & ~uint32_t(p)); }
  uint32_t bits() const { return on_; }
  bool operator==(const FastPaths& o) const { return on_ == o.on_; }
  // "all", "default", "none", or the names that are on ("conv_wgrad,bn_gate").
  std::string str() const;

  static const char* name(FastPath p);

 private:
  explicit FastPaths(uint32_t on) : on_(on) {}
  uint32_t on_;
};

}  // namespace trainer
