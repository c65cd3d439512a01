// Class weights (Keras's fit(class_weight=)) in the fused losses: each row's loss and gradient weighted by its class, against float64 on every backend; unweighted without a gradient.
#include <cmath>
#include <cstring>

#include "backends.h"
#include "core/ops/sigmoid_xent.h"
#include "core/ops/softmax.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;

namespace {

Tensor host_f32(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())});
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

// Rows of index labels (some ignored) and of probability labels (the class is the label's argmax),
// weights with zeros, fractions and large values: the loss Σ w·loss_i and the rows' gradients
// w·(softmax - t)·scale, each against the float64 reference of its row.
TEST_CASE("softmax cross_entropy weights each training row by its class's weight, against float64", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(61);
    for (int64_t C : {1, 2, 7, 300})
      for (bool sparse : {true, false}) {
        INFO(C << " classes, " << (sparse ? "index" : "probability") << " labels");
        const int64_t N = 37;
        std::vector<float> w(static_cast<size_t>(C));
        for (int64_t c = 0; c < C; ++c) w[size_t(c)] = c % 5 == 1 ? 0.0f : float(uniform_int(rng, 1, 40)) / 8.0f;
        const Tensor weights = be.upload(host_f32(w));
        const SoftmaxParams p{0.0f, sparse && C > 2, 1, weights.f32()};
        auto k = make_kernel<SoftmaxKernel>(be.ctx(), p);
        auto plain = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{0.0f, p.ignore, 1});
        Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0);
        Tensor hidx = Tensor::empty({N}, DType::I32);
        ref::Vec t(size_t(N * C), 0.0);
        std::vector<int64_t> cls(static_cast<size_t>(N));
        for (int64_t i = 0; i < N; ++i) {
          cls[size_t(i)] = uniform_int(rng, 0, C - 1);
          hidx.i32()[i] = int32_t(cls[size_t(i)]);
          t[size_t(i * C + cls[size_t(i)])] = sparse ? 1.0 : 0.75;
          if (!sparse && C > 1) t[size_t(i * C + (cls[size_t(i)] + 1) % C)] = 0.25;  // the argmax stays cls
        }
        const Tensor hlabels = sparse ? hidx : from_vec({N, C}, t);
        const float scale = 1.0f / float(N);
        double want_loss = 0;
        int64_t want_count = 0;
        ref::Vec want_d(size_t(N * C), 0.0);
        const ref::Vec x = to_vec(hlogits);
        for (int64_t i = 0; i < N; ++i) {
          if (p.ignore && cls[size_t(i)] == 1) continue;  // ignored: no loss, a zero row, not counted
          const double wi = w[size_t(cls[size_t(i)])];
          const ref::Xent r = ref::cross_entropy(ref::Vec(x.begin() + i * C, x.begin() + (i + 1) * C),
                                                 ref::Vec(t.begin() + i * C, t.begin() + (i + 1) * C), 1, C,
                                                 double(scale * float(wi)));
          want_loss += wi * r.loss_sum;
          ++want_count;
          std::copy(r.dlogits.begin(), r.dlogits.end(), want_d.begin() + i * C);
        }
        const Tensor logits = be.upload(hlogits), labels = be.upload(hlabels);
        Tensor dl = be.nan({N, C});
        const LossStats got = k->cross_entropy(logits, labels, dl, scale);
        CHECK(got.count == want_count);
        check_close("weighted loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want_loss}, be.tol);
        be.check("weighted dlogits", dl, want_d);
        // Without a gradient (evaluation) the same kernel scores unweighted: the plain kernel's sums.
        Tensor none;
        const LossStats eval = k->cross_entropy(logits, labels, none, scale);
        const LossStats unweighted = plain->cross_entropy(logits, labels, none, scale);
        CHECK(eval.loss_sum == unweighted.loss_sum);
        CHECK(eval.correct == unweighted.correct);
        CHECK(eval.count == got.count);
        // The recorded step's form adds the same weighted sums.
        StepScalars step;
        step.loss_scale = 1.0f;
        Tensor hstep = Tensor::empty({int64_t(sizeof step / sizeof(float))});
        std::memcpy(hstep.data(), &step, sizeof step);
        LossSums zero;
        Tensor hsums = Tensor::empty({int64_t(sizeof zero / sizeof(float))});
        std::memcpy(hsums.data(), &zero, sizeof zero);
        Tensor dstep = be.upload(hstep), dsums = be.upload(hsums), dl2 = be.nan({N, C});
        k->cross_entropy_into(logits, labels, dl2, static_cast<const StepScalars*>(dstep.data()),
                              static_cast<LossSums*>(dsums.data()), scale);
        LossSums into;
        std::memcpy(&into, to_host(be.ctx(), dsums).data(), sizeof into);
        check_close("recorded weighted loss_sum", ref::Vec{into.loss_sum}, ref::Vec{want_loss}, be.tol);
        be.check("recorded weighted dlogits", dl2, want_d);
      }
  }
}

// Weights of 1 change no bit: the weighted kernel's multiplications by 1 are exact.
TEST_CASE("softmax cross_entropy with every class weight 1 is the unweighted kernel bit for bit", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(62);
    const int64_t N = 50, C = 19;
    const Tensor ones = be.upload(host_f32(std::vector<float>(size_t(C), 1.0f)));
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{0.1f, false, 0, ones.f32()});
    auto plain = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{0.1f});
    Tensor hidx = Tensor::empty({N}, DType::I32);
    for (int64_t i = 0; i < N; ++i) hidx.i32()[i] = int32_t(uniform_int(rng, 0, C - 1));
    const Tensor logits = be.upload(random_tensor({N, C}, rng, -9.0, 9.0)), labels = be.upload(hidx);
    Tensor a = be.nan({N, C}), b = be.nan({N, C});
    const LossStats wa = k->cross_entropy(logits, labels, a, 0.02f), wb = plain->cross_entropy(logits, labels, b, 0.02f);
    CHECK(wa.loss_sum == wb.loss_sum);
    CHECK(be.vec(a) == be.vec(b));
  }
}

TEST_CASE("sigmoid_xent weights each training sample by its label's class weight, against float64", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(63);
    for (std::vector<float> w : {std::vector<float>{0.5f, 3.0f}, {0.0f, 1.0f}, {1.0f, 1.0f}}) {
      INFO("weights " << w[0] << ", " << w[1]);
      const Tensor weights = be.upload(host_f32(w));
      auto k = make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{0.0f, weights.f32()});
      auto plain = make_kernel<SigmoidXentKernel>(be.ctx(), SigmoidXentParams{});
      const int64_t n = 301;
      Tensor hx = random_tensor({n, 1}, rng, -12.0, 12.0);
      std::vector<int> z(static_cast<size_t>(n));
      Tensor hz = Tensor::empty({n}, DType::I32);
      for (int64_t i = 0; i < n; ++i) hz.i32()[i] = z[size_t(i)] = int(uniform_int(rng, 0, 1));
      const float scale = 1.0f / float(n);
      double want_loss = 0;
      ref::Vec want_d(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const double wi = w[size_t(z[size_t(i)])];
        const ref::Bce r = ref::sigmoid_xent(ref::Vec{double(hx.f32()[i])}, {z[size_t(i)]}, double(scale * float(wi)));
        want_loss += wi * r.loss_sum;
        want_d[size_t(i)] = r.dlogits[0];
      }
      const Tensor x = be.upload(hx), labels = be.upload(hz);
      Tensor dx = be.nan({n, 1}), none;
      const LossStats got = k->loss(x, labels, dx, scale);
      CHECK(got.count == n);
      CHECK(std::fabs(got.loss_sum - want_loss) <= 1e-9 * std::max(1.0, want_loss));
      be.check("weighted dlogits", dx, want_d);
      CHECK(k->loss(x, labels, none, scale).loss_sum == plain->loss(x, labels, none, scale).loss_sum);
    }
  }
}
