// The cuDNN attention graphs (attention_graph.h) evaluated on the host: every operation in double by cuDNN's semantics (broadcast operands, reductions to size-1 axes, batched matmuls, reshapes through strides), low-type tensors rounded where cuDNN stores them, against the float64 reference.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <stdexcept>

#include "core/ops/math/attention_graph.h"
#include "core/ops/math/half_bits.h"
#include "kernel_math_util.h"
#include "reference_transformer.h"

using namespace trainer;
using namespace trainer::test;
using attn_graph::Op;
using attn_graph::Type;

namespace {

using Index = std::array<int64_t, 4>;

// A tensor's elements in memory order: element idx at Σ idx·stride (virtual ones too, so a reshape
// reads the same memory through other strides).
struct Buffer {
  const attn_graph::Tensor* t = nullptr;
  std::vector<double> v;
  int64_t offset(const Index& i) const {
    int64_t o = 0;
    for (int a = 0; a < 4; ++a) {
      if (i[size_t(a)] < 0 || i[size_t(a)] >= t->dims[size_t(a)]) throw std::out_of_range("index outside " + t->name);
      o += i[size_t(a)] * t->strides[size_t(a)];
    }
    return o;
  }
  // The element an operand broadcast over its size-1 axes gives at index i of the result.
  double at(const Index& i) const {
    Index j;
    for (int a = 0; a < 4; ++a) j[size_t(a)] = t->dims[size_t(a)] == 1 ? 0 : i[size_t(a)];
    return v[size_t(offset(j))];
  }
};

int64_t span(const attn_graph::Tensor& t) {
  int64_t n = 1;
  for (int a = 0; a < 4; ++a) n += (t.dims[size_t(a)] - 1) * t.strides[size_t(a)];
  return n;
}

double stored(double x, Type t, bool bf16) {
  if (t == Type::Bool) return x != 0 ? 1.0 : 0.0;
  if (t == Type::I32) return std::nearbyint(x);
  if (t == Type::Low) {
    const float f = float(x);
    return bf16 ? half_bits::f32_from_bf16(half_bits::bf16_from_f32(f)) : half_bits::f32_from_f16(half_bits::f16_from_f32(f));
  }
  return x;  // f32 intermediates in double: the bound counts the low type's roundings only
}

template <class F>
void for_each(const Index& dims, F&& f) {
  for (int64_t a = 0; a < dims[0]; ++a)
    for (int64_t b = 0; b < dims[1]; ++b)
      for (int64_t c = 0; c < dims[2]; ++c)
        for (int64_t d = 0; d < dims[3]; ++d) f(Index{a, b, c, d});
}

// Runs the graph's nodes in order over `inputs` (by uid: the non-virtual tensors no node writes,
// by-value scalars included); returns every buffer by uid.
std::map<int64_t, Buffer> evaluate(const attn_graph::Graph& g, const std::map<int64_t, ref::Vec>& inputs, bool bf16) {
  std::vector<Buffer> bufs(g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const attn_graph::Tensor& t = g.tensors[i];
    bufs[i].t = &t;
    bufs[i].v.assign(size_t(span(t)), NAN);
    if (const auto in = inputs.find(t.uid); in != inputs.end()) {
      REQUIRE(!t.is_virtual);
      REQUIRE(int64_t(in->second.size()) >= span(t));
      for (size_t e = 0; e < bufs[i].v.size(); ++e) bufs[i].v[e] = stored(in->second[e], t.type, bf16);
    }
  }
  for (const attn_graph::Node& n : g.nodes) {
    Buffer& y = bufs[size_t(n.y)];
    const Buffer& x = bufs[size_t(n.x)];
    const Index yd = y.t->dims;
    switch (n.op) {
      case Op::Matmul: {
        const Buffer& b = bufs[size_t(n.b)];
        const int64_t K = x.t->dims[3];
        REQUIRE(b.t->dims[2] == K);
        for_each(yd, [&](const Index& i) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += x.at({i[0], i[1], i[2], k}) * b.at({i[0], i[1], k, i[3]});
          y.v[size_t(y.offset(i))] = stored(s, y.t->type, bf16);
        });
        break;
      }
      case Op::ReduceMax:
      case Op::ReduceAdd: {
        for_each(yd, [&](const Index& i) { y.v[size_t(y.offset(i))] = n.op == Op::ReduceMax ? -INFINITY : 0.0; });
        for_each(x.t->dims, [&](const Index& i) {
          Index j;
          for (int a = 0; a < 4; ++a) j[size_t(a)] = yd[size_t(a)] == 1 ? 0 : i[size_t(a)];
          double& r = y.v[size_t(y.offset(j))];
          r = n.op == Op::ReduceMax ? std::max(r, x.v[size_t(x.offset(i))]) : r + x.v[size_t(x.offset(i))];
        });
        for_each(yd, [&](const Index& i) { y.v[size_t(y.offset(i))] = stored(y.v[size_t(y.offset(i))], y.t->type, bf16); });
        break;
      }
      case Op::Reshape:
        REQUIRE(y.v.size() == x.v.size());
        for (size_t e = 0; e < y.v.size(); ++e) y.v[e] = stored(x.v[e], y.t->type, bf16);
        break;
      default:
        for_each(yd, [&](const Index& i) {
          const double a = x.at(i), b = n.b >= 0 ? bufs[size_t(n.b)].at(i) : 0.0;
          double r = 0;
          switch (n.op) {
            case Op::Mul: r = a * b; break;
            case Op::Add: r = a + b; break;
            case Op::Sub: r = a - b; break;
            case Op::Div: r = a / b; break;
            case Op::Exp: r = std::exp(a); break;
            case Op::Log: r = std::log(a); break;
            case Op::GenIndex: r = double(i[size_t(n.axis)]); break;
            case Op::CmpGe: r = a >= b ? 1.0 : 0.0; break;
            case Op::Select: r = bufs[size_t(n.t)].at(i) != 0 ? a : b; break;
            default: throw std::logic_error("unknown operation");
          }
          y.v[size_t(y.offset(i))] = stored(r, y.t->type, bf16);
        });
    }
  }
  std::map<int64_t, Buffer> out;
  for (const Buffer& b : bufs) out[b.t->uid] = b;
  return out;
}

// The graphs' structure: every operand defined before it is read, every tensor written once, uids
// unique, the variant pack's tensors not virtual and among those the CUDA path provides, the virtual
// ones written by a node.
void check_structure(const attn_graph::Graph& g) {
  std::vector<int> writes(g.tensors.size(), 0);
  for (const attn_graph::Node& n : g.nodes) {
    for (int in : {n.x, n.b, n.t})
      if (in >= 0) {
        const attn_graph::Tensor& t = g.tensors[size_t(in)];
        INFO(t.name);
        CHECK((!t.is_virtual || writes[size_t(in)] == 1));
      }
    ++writes[size_t(n.y)];
  }
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    INFO(g.tensors[i].name);
    CHECK(writes[i] <= 1);
    for (size_t j = 0; j < i; ++j) CHECK(g.tensors[j].uid != g.tensors[i].uid);  // uids are unique
    // The variant pack's tensors are those AttentionCudnn hands over.
    if (!g.tensors[i].is_virtual) CHECK((g.tensors[i].uid >= attn_graph::kQ && g.tensors[i].uid <= attn_graph::kSoftmaxSum));
    CHECK(g.tensors[i].is_virtual == (g.tensors[i].uid >= attn_graph::kVirtual));
    if (g.tensors[i].is_virtual) CHECK(writes[i] == 1);
  }
}

}  // namespace

// Each output relative to its scale, as the attn_gemm plan's host test bounds its bf16 path: the
// scores' error from rounding q and k (2^-p·scale·Σ|q||k|), which exp carries into p and the
// stats, plus a rounding of each matmul's two operands (2^-p), 4x for the chain to dq and dk;
// p = 8 (bf16) or 11 (f16).
TEST_CASE("attention's cuDNN graphs evaluated on the host match float64 (causal or not, cross-attention, bf16 and "
          "f16)") {
  std::mt19937_64 rng(0xC0DE);
  for (int n = 0; n < 40; ++n) {
    const int64_t B = uniform_int(rng, 1, 3), H = uniform_int(rng, 1, 3), D = uniform_int(rng, 1, 16),
                  T = uniform_int(rng, 1, 24);
    const int64_t S = uniform_int(rng, 0, 1) ? T : uniform_int(rng, 1, 24);
    const bool causal = uniform_int(rng, 0, 1) == 1, bf16 = n % 2 == 0;
    INFO("case " << n << ": B " << B << ", T " << T << ", S " << S << ", H " << H << ", D " << D
                 << (causal ? ", causal" : "") << (bf16 ? ", bf16" : ", f16"));
    AttentionDims d;
    d.B = B, d.T = T, d.S = S, d.H = H, d.Dk = D, d.Dv = D, d.causal = causal;
    d.scale = float(1.0 / std::sqrt(double(D)));
    const ref::Vec q = kmath::random_floats(size_t(B * T * H * D), rng, -2, 2);
    const ref::Vec k = kmath::random_floats(size_t(B * S * H * D), rng, -2, 2);
    const ref::Vec v = kmath::random_floats(size_t(B * S * H * D), rng), g = kmath::random_floats(size_t(B * T * H * D), rng);
    const std::vector<ref::Vec> want = ref::attention_outputs(q, k, v, g, B, T, S, H, D, D, causal);

    const attn_graph::Graph fwd = attn_graph::forward(d);
    check_structure(fwd);
    std::map<int64_t, ref::Vec> in{{attn_graph::kQ, q}, {attn_graph::kK, k}, {attn_graph::kV, v},
                                   {attn_graph::kScale, {d.scale}}, {attn_graph::kMaskFill, {attn_graph::kFillValue}}};
    std::map<int64_t, Buffer> f = evaluate(fwd, in, bf16);
    const ref::Vec o = f.at(attn_graph::kO).v, stats = f.at(attn_graph::kStats).v;

    const attn_graph::Graph bwd = attn_graph::backward(d);
    check_structure(bwd);
    in[attn_graph::kO] = o, in[attn_graph::kStats] = stats, in[attn_graph::kDO] = g, in[attn_graph::kOne] = {1.0};
    std::map<int64_t, Buffer> b = evaluate(bwd, in, bf16);
    const std::vector<ref::Vec> got{o, b.at(attn_graph::kDQ).v, b.at(attn_graph::kDK).v, b.at(attn_graph::kDV).v};

    const double u = std::ldexp(1.0, bf16 ? -8 : -11);
    const double tol = 4 * (u * d.scale * ref::attention_largest_qk(q, k, B, T, S, H, D) + u);
    const std::vector<double> errs = ref::attention_errors(got, want, q, k, v, g, D, 0.0f);
    for (int t = 0; t < 4; ++t) {
      INFO("output " << t << " (o, dq, dk, dv): error " << errs[size_t(t)] << " of the scale, bound " << tol);
      CHECK(errs[size_t(t)] <= tol);
    }
  }
}
