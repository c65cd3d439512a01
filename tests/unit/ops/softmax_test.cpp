// softmax tests: forward/backward and cross-entropy (index and one-hot/probability labels, label smoothing) against float64 references.
#include "core/ops/softmax.h"
#include "core/ops/math/softmax_math.h"

#include <cstring>
#include <tuple>

#include "backends.h"
#include "fastpath_fuzz.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("softmax forward and backward match float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(51);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    for (Shape s : {Shape{1, 1}, Shape{3, 10}, Shape{64, 1000}, Shape{2, 3, 7}, Shape{0, 5}}) {
      INFO("shape [" << s.str() << "]");
      int64_t C = s.back(), rows = s.numel() / C;
      Tensor hx = random_tensor(s, rng, -20.0, 20.0), y = be.nan(s);
      k->forward(be.upload(hx), y);
      ref::Vec ry = ref::softmax_forward(to_vec(hx), rows, C);
      be.check("y", y, ry);
      Tensor hdy = random_tensor(s, rng), dx = be.nan(s);
      k->backward(y, be.upload(hdy), dx);
      be.check("dx", dx, ref::softmax_backward(ry, to_vec(hdy), rows, C));
    }
    Tensor big = be.upload(from_vec({1, 3}, {1000.0, 1000.0, -1000.0})), y = be.nan({1, 3});
    k->forward(big, y);  // no overflow
    be.check("y of large logits", y, {0.5, 0.5, 0.0});
  }
}

TEST_CASE("softmax cross_entropy with index labels matches float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(52);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    for (auto [N, C] : {std::pair<int64_t, int64_t>{1, 1}, {7, 10}, {64, 10}, {5, 1000}, {300, 3}}) {
      INFO(N << " samples, " << C << " classes");
      Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0);
      Tensor hlabels = Tensor::empty({N}, DType::I32);
      ref::Vec onehot(size_t(N * C), 0.0);
      for (int64_t i = 0; i < N; ++i) {
        hlabels.i32()[i] = int32_t(uniform_int(rng, 0, C - 1));
        onehot[size_t(i * C + hlabels.i32()[i])] = 1.0;
      }
      if (N > 2) {  // make sure some predictions are right
        int64_t best = 0;
        for (int64_t j = 1; j < C; ++j)
          if (hlogits.f32()[j] > hlogits.f32()[best]) best = j;
        hlabels.i32()[0] = int32_t(best);
        std::fill(onehot.begin(), onehot.begin() + C, 0.0);
        onehot[size_t(best)] = 1.0;
      }
      float scale = 1.0f / float(N);
      ref::Xent want = ref::cross_entropy(to_vec(hlogits), onehot, N, C, scale);
      Tensor logits = be.upload(hlogits), labels = be.upload(hlabels);
      Tensor dl = be.nan({N, C});
      LossStats got = k->cross_entropy(logits, labels, dl, scale);
      CHECK(got.count == N);
      CHECK(got.correct == want.correct);
      check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want.loss_sum}, be.tol);
      be.check("dlogits", dl, want.dlogits);
      Tensor none;  // evaluation: no gradient
      LossStats eval = k->cross_entropy(logits, labels, none, scale);
      if (be.is_cpu())
        CHECK(eval.loss_sum == got.loss_sum);  // the same reduction order, bit for bit
      else
        check_close("loss_sum without dlogits", ref::Vec{eval.loss_sum}, ref::Vec{want.loss_sum}, be.tol);
      CHECK(eval.correct == got.correct);
    }
  }
}

// The prediction (accuracy's argmax) is the first index of the row's maximum, ties, ±0 and ±inf
// included, or the first NaN's (softmax_math::argmax_better's order, scanned here one element at a
// time as the reference): rows drawn from a few values so that ties are common, every row labelled
// with that index (all correct) and then with another (none), 1 to 300 classes.
TEST_CASE("softmax cross_entropy's prediction is argmax_better's first index on rows full of ties, signed zeros, infinities and NaNs, on every backend",
          "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(58);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, INFINITY, -INFINITY, NAN};
    for (int rep = 0; rep < 30; ++rep) {
      const int64_t C = rep < 4 ? rep + 1 : uniform_int(rng, 1, 300), N = 16;
      INFO(C << " classes, draw " << rep);
      Tensor hlogits = Tensor::empty({N, C});
      Tensor right = Tensor::empty({N}, DType::I32), wrong = Tensor::empty({N}, DType::I32);
      for (int64_t i = 0; i < N; ++i) {
        float* row = hlogits.f32() + i * C;
        const int64_t kinds = i % 4 == 0 ? 7 : i % 4 == 1 ? 6 : 8;  // no NaN, nor +inf, or all
        for (int64_t j = 0; j < C; ++j) row[j] = pool[uniform_int(rng, 0, kinds - 1)];
        int64_t best = 0;
        for (int64_t j = 1; j < C; ++j)
          if (softmax_math::argmax_better(row[j], j, row[best], best)) best = j;
        right.i32()[i] = int32_t(best);
        wrong.i32()[i] = int32_t((best + 1) % C);
      }
      Tensor logits = be.upload(hlogits), none;
      Tensor r = be.upload(right), w = be.upload(wrong);
      CHECK(k->cross_entropy(logits, r, none, 1.0f).correct == N);
      if (C > 1) CHECK(k->cross_entropy(logits, w, none, 1.0f).correct == 0);
    }
  }
}

TEST_CASE("softmax cross_entropy counts a NaN logit as its row's maximum (the first NaN's class), on every backend",
          "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(57);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    for (int64_t C : {int64_t(1), int64_t(5), int64_t(70), int64_t(1000), int64_t(3001)}) {
      INFO(C << " classes");
      const int64_t N = 24;
      Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0);
      Tensor hlabels = Tensor::empty({N}, DType::I32);
      int64_t want = 0;
      for (int64_t i = 0; i < N; ++i) {
        float* row = hlogits.f32() + i * C;
        // NaNs at the row's start, at a random place, at two (the first wins), or none.
        const int64_t a = uniform_int(rng, 0, C - 1), b = uniform_int(rng, 0, C - 1);
        if (i % 4 == 0) row[0] = NAN;
        if (i % 4 == 1) row[a] = NAN;
        if (i % 4 == 2) row[a] = row[b] = NAN;
        int64_t nan_at = -1, best = 0;
        for (int64_t j = 0; j < C; ++j) {
          if (nan_at < 0 && std::isnan(row[j])) nan_at = j;
          if (!std::isnan(row[j]) && (std::isnan(row[best]) || row[j] > row[best])) best = j;
        }
        // Half the rows labelled with the argmax, half with the best number (a miss where a NaN
        // comes first: the old GPU rule could count it, the CPU's could not).
        const int64_t pred = nan_at >= 0 ? nan_at : best;
        const int64_t label = i % 8 < 4 ? pred : best;
        hlabels.i32()[i] = int32_t(label);
        want += label == pred;
      }
      Tensor logits = be.upload(hlogits), labels = be.upload(hlabels), none;
      LossStats got = k->cross_entropy(logits, labels, none, 1.0f);
      CHECK(got.count == N);
      CHECK(got.correct == want);
    }
  }
}

// A recorded step's form: the gradient scale read from StepScalars in the context's memory, times
// scale_mul (1/T for a loss averaged over T positions), and the statistics added to LossSums there.
TEST_CASE("softmax cross_entropy_into scales by the step's loss_scale times scale_mul and adds its sums", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(53);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    for (auto [N, C, mul] : {std::tuple<int64_t, int64_t, float>{1, 1, 1.0f}, {6, 7, 0.25f}, {40, 256, 1.0f / 33}}) {
      INFO(N << " rows, " << C << " classes, scale_mul " << mul);
      Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0), hlabels = Tensor::empty({N}, DType::I32);
      ref::Vec onehot(size_t(N * C), 0.0);
      for (int64_t i = 0; i < N; ++i) {
        hlabels.i32()[i] = int32_t(uniform_int(rng, 0, C - 1));
        onehot[size_t(i * C + hlabels.i32()[i])] = 1.0;
      }
      StepScalars step;
      step.loss_scale = 1.0f / 3;
      Tensor hstep = Tensor::empty({int64_t(sizeof step / sizeof(float))});
      std::memcpy(hstep.data(), &step, sizeof step);
      LossSums before;
      before.loss_sum = 1.5, before.correct = 2, before.count = 3;  // sums of earlier batches
      Tensor hsums = Tensor::empty({int64_t(sizeof before / sizeof(float))});
      std::memcpy(hsums.data(), &before, sizeof before);
      Tensor dstep = be.upload(hstep), dsums = be.upload(hsums), dl = be.nan({N, C});
      k->cross_entropy_into(be.upload(hlogits), be.upload(hlabels), dl, static_cast<const StepScalars*>(dstep.data()),
                            static_cast<LossSums*>(dsums.data()), mul);
      const ref::Xent want = ref::cross_entropy(to_vec(hlogits), onehot, N, C, double(step.loss_scale) * mul);
      be.check("dlogits", dl, want.dlogits);
      LossSums got;
      std::memcpy(&got, to_host(be.ctx(), dsums).data(), sizeof got);
      CHECK(got.count == 3 + N);
      CHECK(got.correct == 2 + want.correct);
      check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{1.5 + want.loss_sum}, be.tol);
    }
  }
}

TEST_CASE("softmax cross_entropy with one-hot and probability labels matches float64 reference", "[backends]") {
  int64_t N = 33, C = 12;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(53);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    Tensor hlogits = random_tensor({N, C}, rng, -5.0, 5.0), logits = be.upload(hlogits);
    // One-hot rows
    ref::Vec onehot(size_t(N * C), 0.0);
    for (int64_t i = 0; i < N; ++i) onehot[size_t(i * C + uniform_int(rng, 0, C - 1))] = 1.0;
    // Label-smoothed probability rows (argmax is still the hot class)
    ref::Vec soft(onehot.size());
    for (size_t i = 0; i < soft.size(); ++i) soft[i] = double(float(onehot[i]) * 0.9f + 0.1f / float(C));
    for (const ref::Vec* rlabels : {&onehot, &soft}) {
      Tensor hlabels = from_vec({N, C}, *rlabels);
      ref::Xent want = ref::cross_entropy(to_vec(hlogits), to_vec(hlabels), N, C, 0.25);
      Tensor dl = be.nan({N, C});
      LossStats got = k->cross_entropy(logits, be.upload(hlabels), dl, 0.25f);
      CHECK(got.count == N);
      CHECK(got.correct == want.correct);
      check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want.loss_sum}, be.tol);
      be.check("dlogits", dl, want.dlogits);
    }
  }
}

TEST_CASE("softmax cross_entropy with label smoothing matches float64 reference (index and probability labels)", "[backends]") {
  // Targets t·(1-ls) + ls/C in double; the loss is the smoothed loss, accuracy the labels' argmax.
  const int64_t N = 40;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(54);
    for (float ls : {0.1f, 0.5f, 1.0f})
      for (int64_t C : {1, 3, 10, 1000})
        for (bool sparse : {true, false}) {
          INFO("label_smoothing " << ls << ", " << C << " classes, " << (sparse ? "index" : "probability") << " labels");
          auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{ls});
          Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0), logits = be.upload(hlogits);
          Tensor hidx = Tensor::empty({N}, DType::I32);
          ref::Vec t(size_t(N * C), 0.0);
          for (int64_t i = 0; i < N; ++i) {
            hidx.i32()[i] = int32_t(uniform_int(rng, 0, C - 1));
            if (sparse) {
              t[size_t(i * C + hidx.i32()[i])] = 1.0;
            } else {  // probability rows on a few classes (floats, as the kernel reads them)
              double sum = 0;
              for (int r = 0; r < 3; ++r) {
                const double w = double(uniform_int(rng, 1, 9));
                t[size_t(i * C + uniform_int(rng, 0, C - 1))] += w;
                sum += w;
              }
              for (int64_t j = 0; j < C; ++j) t[size_t(i * C + j)] = double(float(t[size_t(i * C + j)] / sum));
            }
          }
          Tensor labels = sparse ? be.upload(hidx) : be.upload(from_vec({N, C}, t));
          ref::Vec smooth(t.size());
          for (size_t i = 0; i < t.size(); ++i) smooth[i] = t[i] * (1 - double(ls)) + double(ls) / double(C);
          const ref::Xent want = ref::cross_entropy(to_vec(hlogits), smooth, N, C, 0.5);
          const ref::Xent plain = ref::cross_entropy(to_vec(hlogits), t, N, C, 0.5);
          Tensor dl = be.nan({N, C});
          const LossStats got = k->cross_entropy(logits, labels, dl, 0.5f);
          CHECK(got.count == N);
          CHECK(got.correct == plain.correct);  // the labels' classes, not the smoothed targets'
          check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want.loss_sum}, be.tol);
          if (C > 1) CHECK(std::fabs(plain.loss_sum - want.loss_sum) > be.tol * std::max(1.0, std::fabs(want.loss_sum)));
          be.check("dlogits", dl, want.dlogits);
        }
    // Out of [0, 1]: refused when the kernel is made.
    CHECK_THROWS_AS(make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{-0.1f}), std::invalid_argument);
    CHECK_THROWS_AS(make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{1.5f}), std::invalid_argument);
  }
}

TEST_CASE("softmax cross_entropy rejects out-of-range labels and mismatched shapes", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(54);
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{});
    Tensor logits = be.upload(random_tensor({3, 4}, rng)), dl = be.empty({3, 4});
    Tensor hlabels = Tensor::empty({3}, DType::I32);
    hlabels.i32()[0] = 1, hlabels.i32()[1] = 4, hlabels.i32()[2] = 0;
    try {
      k->cross_entropy(logits, be.upload(hlabels), dl, 1.0f);
      FAIL("no exception for label 4 of 4 classes");
    } catch (const std::out_of_range& e) {
      CHECK_THAT(e.what(), Catch::Contains("label 4"));
    }
    hlabels.i32()[1] = -1;
    CHECK_THROWS_AS(k->cross_entropy(logits, be.upload(hlabels), dl, 1.0f), std::out_of_range);
    Tensor short_labels = be.zeros({2}, DType::I32);
    CHECK_THROWS_AS(k->cross_entropy(logits, short_labels, dl, 1.0f), std::invalid_argument);
    Tensor bad_onehot = be.zeros({3, 5});
    CHECK_THROWS_AS(k->cross_entropy(logits, bad_onehot, dl, 1.0f), std::invalid_argument);
    Tensor empty_logits = be.empty({0, 4}), empty_labels = be.empty({0}, DType::I32), none;
    LossStats s = k->cross_entropy(empty_logits, empty_labels, none, 1.0f);
    CHECK(s.count == 0);
    CHECK(s.loss_sum == 0.0);
  }
}

// train.ignore_class (Keras's ignore_class, PyTorch's ignore_index): a row whose label is the
// ignored class scores nothing (no loss, no hit, a zero gradient row) and is not counted; every
// other row is the float64 reference's, alone. The ignored value may be a class (0) or outside the
// classes (-100: an out-of-range label that is not it still throws).
TEST_CASE("softmax cross_entropy with an ignore_class scores the other rows only (float64 reference)", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(55);
    for (auto [ignore, ls] : {std::pair<int32_t, float>{-100, 0.0f}, {0, 0.0f}, {-100, 0.1f}, {3, 0.2f}}) {
      auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{ls, true, ignore});
      for (auto [N, C, skip] : {std::tuple<int64_t, int64_t, double>{1, 5, 0.0}, {1, 5, 1.0}, {9, 7, 0.4},
                                {64, 256, 0.3}, {5, 4, 1.0}}) {
        INFO("ignore_class " << ignore << ", label_smoothing " << ls << ", " << N << " rows of " << C
                             << ", ignored share " << skip);
        Tensor hlogits = random_tensor({N, C}, rng, -6.0, 6.0), hlabels = Tensor::empty({N}, DType::I32);
        ref::Vec want_dl(size_t(N * C), 0.0);
        double want_loss = 0;
        int64_t want_correct = 0, want_count = 0;
        const float scale = 1.0f / 7;
        for (int64_t i = 0; i < N; ++i) {
          const bool ignored = std::uniform_real_distribution<double>(0, 1)(rng) < skip;
          int32_t label = int32_t(uniform_int(rng, 0, C - 1));
          if (!ignored && label == ignore) label = (label + 1) % int32_t(C);
          hlabels.i32()[i] = ignored ? ignore : label;
          if (ignored) continue;
          ref::Vec row(hlogits.f32() + i * C, hlogits.f32() + (i + 1) * C), target(static_cast<size_t>(C));
          for (int64_t j = 0; j < C; ++j) target[size_t(j)] = (j == label ? 1.0 - ls : 0.0) + double(ls) / double(C);
          const ref::Xent r = ref::cross_entropy(row, target, 1, C, scale);
          want_loss += r.loss_sum;
          // The accuracy rule is against the label, not the smoothed target's argmax.
          int64_t best = 0;
          for (int64_t j = 1; j < C; ++j)
            if (row[size_t(j)] > row[size_t(best)]) best = j;
          want_correct += best == label;
          ++want_count;
          std::copy(r.dlogits.begin(), r.dlogits.end(), want_dl.begin() + i * C);
        }
        Tensor logits = be.upload(hlogits), labels = be.upload(hlabels), dl = be.nan({N, C});
        const LossStats got = k->cross_entropy(logits, labels, dl, scale);
        CHECK(got.count == want_count);
        CHECK(got.correct == want_correct);
        check_close("loss_sum", ref::Vec{got.loss_sum}, ref::Vec{want_loss}, be.tol);
        be.check("dlogits", dl, want_dl);
        // The recorded step's form: the same rows, the count added to the running sums.
        StepScalars step;
        step.loss_scale = scale;
        Tensor hstep = Tensor::empty({int64_t(sizeof step / sizeof(float))});
        std::memcpy(hstep.data(), &step, sizeof step);
        LossSums zero;
        Tensor hsums = Tensor::empty({int64_t(sizeof zero / sizeof(float))});
        std::memcpy(hsums.data(), &zero, sizeof zero);
        Tensor dstep = be.upload(hstep), dsums = be.upload(hsums), dl2 = be.nan({N, C});
        k->cross_entropy_into(logits, labels, dl2, static_cast<const StepScalars*>(dstep.data()),
                              static_cast<LossSums*>(dsums.data()));
        be.check("dlogits (recorded form)", dl2, want_dl);
        LossSums sums;
        std::memcpy(&sums, to_host(be.ctx(), dsums).data(), sizeof sums);
        CHECK(sums.count == want_count);
        CHECK(sums.correct == want_correct);
        CHECK(sums.bad_sample == -1);
        check_close("loss_sum (recorded form)", ref::Vec{sums.loss_sum}, ref::Vec{want_loss}, be.tol);
      }
    }
    // A label outside the classes that is not the ignored one is still an error.
    auto k = make_kernel<SoftmaxKernel>(be.ctx(), SoftmaxParams{0.0f, true, -100});
    Tensor logits = be.upload(random_tensor({3, 4}, rng)), dl = be.empty({3, 4});
    Tensor hlabels = Tensor::empty({3}, DType::I32);
    hlabels.i32()[0] = -100, hlabels.i32()[1] = -1, hlabels.i32()[2] = 0;
    try {
      k->cross_entropy(logits, be.upload(hlabels), dl, 1.0f);
      FAIL("no exception for label -1 with ignore_class -100");
    } catch (const std::out_of_range& e) {
      CHECK_THAT(e.what(), Catch::Contains("label -1 (sample 1)"));
    }
  }
}

// The softmax_exp fast path (the cross-entropy's exponentials by cpu::exp_poly, vectorised, the
// row's sum in double lanes) against the reference (libm's exp, summed in order), on random shapes
// (one row, one class, odd widths, a GPT-2-sized vocabulary), index labels with label smoothing and
// an ignored class, 1-4 threads: both against float64 — the loss within the CPU bound of its
// magnitude, the gradient within it of its largest value — the fast path within 4x the reference's
// own error plus 16 ulp, the same predictions (argmax does not depend on the path). Seed printed.
TEST_CASE("softmax cross_entropy: softmax_exp against libm's exponentials, random shapes, 1-4 threads, float64 as the judge",
          "[fuzz]") {
  const fuzz::Budget budget(30);
  fuzz::Tally tally("softmax_exp");
  for (int64_t c = 0; budget.more(c); ++c) {
    if (budget.skip(c)) continue;
    std::mt19937_64 rng = budget.rng(c, 0x5E7);
    const int64_t N = uniform_int(rng, 1, 40);
    const int64_t C = c == 0 ? 50257 : uniform_int(rng, 0, 3) == 0 ? uniform_int(rng, 1, 8) : uniform_int(rng, 9, 3000);
    const float ls = uniform_int(rng, 0, 2) == 0 ? 0.1f : 0.0f;
    const bool ignore = uniform_int(rng, 0, 2) == 0;
    const int threads = int(uniform_int(rng, 1, 4));
    INFO(budget.repro(c) << ": N " << N << ", C " << C << ", smoothing " << ls << (ignore ? ", class 0 ignored" : "")
                         << ", " << threads << " threads");
    Tensor logits = random_tensor({N, C}, rng, -12.0, 12.0), labels = Tensor::empty({N}, DType::I32);
    ref::Vec target(size_t(N * C), 0.0);
    int64_t scored = 0;
    for (int64_t i = 0; i < N; ++i) {
      const int32_t lab = int32_t(uniform_int(rng, 0, C - 1));
      labels.i32()[i] = lab;
      if (ignore && lab == 0) continue;
      ++scored;
      for (int64_t j = 0; j < C; ++j) target[size_t(i * C + j)] = (j == lab ? 1.0 - ls : 0.0) + double(ls) / double(C);
    }
    const float scale = 1.0f / float(std::max<int64_t>(scored, 1));
    ref::Xent want = ref::cross_entropy(to_vec(logits), target, N, C, scale);
    if (ignore)  // the ignored rows: no loss, no gradient
      for (int64_t i = 0; i < N; ++i)
        if (labels.i32()[i] == 0) std::fill(want.dlogits.begin() + i * C, want.dlogits.begin() + (i + 1) * C, 0.0);
    double grad_max = 0;
    for (double v : want.dlogits) grad_max = std::max(grad_max, std::abs(v));
    double err[2][2];  // [path][loss, gradient], relative to the loss's magnitude and the gradient's largest value
    int64_t correct[2];
    for (int fast = 0; fast < 2; ++fast) {
      OpContext& ctx = fuzz::cpu_context_for(threads, Precision::FP32, FastPaths::all().with(FastPath::SoftmaxExp, fast == 1));
      auto k = make_kernel<SoftmaxKernel>(ctx, SoftmaxParams{ls, ignore, 0});
      Tensor d = Tensor::empty({N, C});
      const LossStats s = k->cross_entropy(logits, labels, d, scale);
      CHECK(s.count == scored);
      correct[fast] = s.correct;
      double worst = 0;
      for (int64_t e = 0; e < N * C; ++e) worst = std::max(worst, std::abs(double(d.f32()[e]) - want.dlogits[size_t(e)]));
      err[fast][0] = std::abs(s.loss_sum - want.loss_sum) / std::max(1.0, std::abs(want.loss_sum));
      err[fast][1] = grad_max > 0 ? worst / grad_max : worst;
    }
    CHECK(correct[0] == correct[1]);
    const double ulp = std::ldexp(1.0, -24);
    double ratio = 0;
    for (int t = 0; t < 2; ++t) {
      INFO((t == 0 ? "loss" : "gradient") << ": reference path error " << err[0][t] << ", softmax_exp " << err[1][t]);
      CHECK(err[0][t] <= kCpuTolerance);
      CHECK(err[1][t] <= 4 * err[0][t] + 16 * ulp);
      ratio = std::max(ratio, err[1][t] / (4 * err[0][t] + 16 * ulp));
    }
    tally.wide(threads, ratio, "case " + std::to_string(c) + (C > 256 ? " (several chunks)" : ""));
  }
  tally.report(budget);
}
