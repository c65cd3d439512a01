// elementwise and dropout tests: add/accumulate/scale, transpose, last-axis concat/split, steps reversed, Philox dropout masks (of elements and of whole channels).
#include "core/ops/elementwise.h"

#include <map>

#include "core/ops/math/philox.h"
#include "backends.h"

using namespace trainer;
using namespace trainer::test;

TEST_CASE("elementwise add, accumulate and scale match float64 reference", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(41);
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    for (Shape s : {Shape{1}, Shape{3, 5, 7}, Shape{64, 16, 16, 48}}) {
      INFO("shape [" << s.str() << "]");
      std::vector<ref::Vec> hs;
      std::vector<Tensor> xs;
      // Sums of many inputs (a tensor feeding many layers: its gradient's parts) on the small shapes:
      // past the CUDA kernel's 8 inputs a launch (its wide form), and past 32 (chained launches).
      const bool small = s.numel() < 1000;
      for (int i = 0; i < (small ? 40 : 4); ++i) {
        Tensor h = random_tensor(s, rng);
        hs.push_back(to_vec(h));
        xs.push_back(be.upload(h));
      }
      for (size_t n : {1, 2, 3, 4, 9, 12, 33, 40}) {
        if (n > xs.size()) continue;
        std::vector<const Tensor*> in;
        ref::Vec want(size_t(s.numel()), 0.0);
        for (size_t i = 0; i < n; ++i) {
          in.push_back(&xs[i]);
          for (size_t j = 0; j < want.size(); ++j) want[j] += hs[i][j];
        }
        Tensor y = be.nan(s);
        k->add(in, y);
        be.check("add of " + std::to_string(n), y, want);
      }
      // add where the output is one of the first two inputs
      const ref::Vec &a = hs[0], &b = hs[1];
      ref::Vec sum(a.size());
      for (size_t j = 0; j < a.size(); ++j) sum[j] = a[j] + b[j];
      Tensor y = be.upload(from_vec(s, a));
      k->add({&y, &xs[1]}, y);
      be.check("add in place", y, sum);

      Tensor acc = be.upload(from_vec(s, a));
      k->accumulate(xs[1], acc);
      be.check("accumulate", acc, sum);
      k->scale(acc, -0.5f);
      for (auto& v : sum) v *= -0.5;
      be.check("scale", acc, sum);
    }
    Tensor a = be.empty({2, 3}), b = be.empty({3, 2});
    CHECK_THROWS_AS(k->accumulate(a, b), std::invalid_argument);
    CHECK_THROWS_AS(k->add({&a}, b), std::invalid_argument);
  }
}

TEST_CASE("elementwise transpose moves every element exactly, odd shapes and empty ones included", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(43);
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {33, 65}, {64, 1}, {1, 70}, {0, 4}, {257, 128}}) {
      INFO(R << " x " << C);
      const Tensor hx = random_tensor({R, C}, rng);
      Tensor y = be.nan({C, R});
      k->transpose(be.upload(hx), y);
      ref::Vec want(size_t(R * C));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) want[size_t(c * R + r)] = hx.f32()[r * C + c];
      be.check("y", y, want, 0.0);  // a copy: exact
    }
    Tensor x = be.upload(random_tensor({2, 3}, rng)), wrong = be.nan({2, 3});
    CHECK_THROWS_WITH(k->transpose(x, wrong), Catch::Contains("transpose") && Catch::Contains("y"));
  }
}

TEST_CASE("elementwise reverse_steps moves each step's row whole, f32 and bf16, odd widths and empty shapes included", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(47);
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    // [N, T, F...]: batch 1, one step, one feature, odd widths (no 16-byte rows), an image per step,
    // empty batches and empty steps.
    for (Shape s : {Shape{1, 1, 1}, Shape{2, 5, 3}, Shape{3, 7, 8}, Shape{1, 9, 33}, Shape{4, 6}, Shape{2, 3, 4, 5},
                    Shape{0, 4, 3}, Shape{3, 0, 2}, Shape{5, 2, 0}}) {
      INFO("x [" << s.str() << "]");
      const Tensor hx = random_tensor(s, rng);
      const int64_t N = s[0], T = s[1], W = N * T != 0 ? s.numel() / (N * T) : 0;
      ref::Vec want(size_t(s.numel()));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < W; ++j) want[size_t((n * T + t) * W + j)] = hx.f32()[(n * T + T - 1 - t) * W + j];
      Tensor y = be.nan(s);
      k->reverse_steps(be.upload(hx), y);
      be.check("y", y, want, 0.0);  // a copy: exact
      // bf16: the same rows of 2-byte elements; reversed twice is the input's bits.
      Tensor x16 = be.empty(s, DType::BF16), r16 = be.empty(s, DType::BF16), back = be.empty(s, DType::BF16);
      k->convert(be.upload(hx), x16);
      k->reverse_steps(x16, r16);
      k->reverse_steps(r16, back);
      const Tensor hx16 = be.download(x16), hr16 = be.download(r16), hb16 = be.download(back);
      for (int64_t i = 0; i < s.numel(); ++i) {
        const int64_t n = i / std::max<int64_t>(T * W, 1), t = (i / std::max<int64_t>(W, 1)) % std::max<int64_t>(T, 1),
                      j = i % std::max<int64_t>(W, 1);
        REQUIRE(hr16.as<uint16_t>()[i] == hx16.as<uint16_t>()[(n * T + T - 1 - t) * W + j]);
        REQUIRE(hb16.as<uint16_t>()[i] == hx16.as<uint16_t>()[i]);
      }
    }
    Tensor x = be.upload(random_tensor({2, 3, 4}, rng)), wrong = be.nan({2, 4, 3}), flat = be.upload(random_tensor({6}, rng));
    CHECK_THROWS_WITH(k->reverse_steps(x, wrong), Catch::Contains("reverse_steps") && Catch::Contains("y"));
    CHECK_THROWS_WITH(k->reverse_steps(x, x), Catch::Contains("share memory"));
    Tensor flat_y = be.nan({6});
    CHECK_THROWS_WITH(k->reverse_steps(flat, flat_y), Catch::Contains("rank >= 2"));
  }
}

TEST_CASE("elementwise concat and split along the last axis are inverse", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(42);
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    for (std::vector<int64_t> lead : {std::vector<int64_t>{1}, {2, 3, 5}, {64, 15, 15}, {0, 4, 4}}) {
      std::vector<int64_t> widths = {3, 1, 17, 8};
      std::vector<ref::Vec> hparts;
      std::vector<Tensor> parts;
      int64_t total = 0;
      for (int64_t w : widths) {
        std::vector<int64_t> d = lead;
        d.push_back(w);
        Tensor h = random_tensor(Shape(d), rng);
        hparts.push_back(to_vec(h));
        parts.push_back(be.upload(h));
        total += w;
      }
      std::vector<int64_t> yd = lead;
      yd.push_back(total);
      Shape ys(yd);
      INFO("y [" << ys.str() << "]");
      int64_t rows = ys.numel() / total;
      ref::Vec want(size_t(ys.numel()));
      for (int64_t r = 0, off = 0; r < rows; ++r, off = 0)
        for (size_t i = 0; i < parts.size(); ++i) {
          for (int64_t j = 0; j < widths[i]; ++j)
            want[size_t(r * total + off + j)] = hparts[i][size_t(r * widths[i] + j)];
          off += widths[i];
        }
      Tensor y = be.nan(ys);
      std::vector<const Tensor*> in;
      for (auto& p : parts) in.push_back(&p);
      k->concat(in, y);
      be.check("concat", y, want, 0.0);

      std::vector<Tensor> back;
      for (auto& p : parts) back.push_back(be.nan(p.shape()));
      // Part 1 is skipped: an undefined tensor that still carries its shape.
      back[1] = be.undefined(parts[1].shape());
      std::vector<Tensor*> outs;
      for (auto& b : back) outs.push_back(&b);
      k->split(y, outs);
      for (size_t i : {0, 2, 3}) be.check("split part " + std::to_string(i), back[i], hparts[i], 0.0);
      // A single skipped part without a shape takes the remaining width.
      Tensor none;
      outs[1] = &none;
      for (size_t i : {0, 2, 3}) back[i] = be.nan(parts[i].shape());
      k->split(y, outs);
      for (size_t i : {0, 2, 3}) be.check("split part " + std::to_string(i), back[i], hparts[i], 0.0);
    }
    Tensor a = be.empty({2, 3}), b = be.empty({3, 2}), y = be.empty({2, 5});
    CHECK_THROWS_AS(k->concat({&a, &b}, y), std::invalid_argument);
    Tensor c = be.empty({2, 3});
    CHECK_THROWS_AS(k->concat({&a, &c}, y), std::invalid_argument);  // 6 channels into 5
    Tensor n1, n2;
    CHECK_THROWS_AS(k->split(y, {&a, &n1, &n2}), std::invalid_argument);  // two unknown widths
  }
}

TEST_CASE("elementwise concat and split leave an input already in its columns alone, refuse other strided views", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(9);
    auto k = make_kernel<ElementwiseKernel>(be.ctx(), ElementwiseParams{});
    const Shape ys{3, 5, 9}, s0{3, 5, 4}, s1{3, 5, 5};
    // y's columns [0, 4) were written in place (a producer's channel slice); x1 is copied into [4, 9).
    const Tensor yh = random_tensor(ys, rng), x1h = random_tensor(s1, rng);
    Tensor y = be.upload(yh), x1 = be.upload(x1h);
    Tensor x0 = Tensor::strided_view(y.data(), s0, DType::F32, y.device(), 9);
    ref::Vec want = to_vec(yh);
    for (int64_t r = 0; r < 15; ++r)
      for (int64_t j = 0; j < 5; ++j) want[size_t(r * 9 + 4 + j)] = x1h.f32()[r * 5 + j];
    k->concat({&x0, &x1}, y);
    be.check("concat", y, want, 0.0);
    // split: the in-place part is left as it is, the other copied out.
    Tensor d1 = be.nan(s1);
    std::vector<Tensor*> outs{&x0, &d1};
    k->split(y, outs);
    be.check("split part 1", d1, to_vec(x1h), 0.0);
    be.check("split leaves dy", y, want, 0.0);
    // A strided view elsewhere than its own columns is refused: the kernels copy contiguous parts.
    Tensor other = be.upload(random_tensor(ys, rng));
    Tensor moved = Tensor::strided_view(other.data(), s0, DType::F32, other.device(), 9);
    CHECK_THROWS_WITH(k->concat({&moved, &x1}, y), Catch::Contains("input 0 is a strided view"));
    Tensor shifted = Tensor::strided_view(static_cast<float*>(y.data()) + 1, s0, DType::F32, y.device(), 9);
    CHECK_THROWS_WITH(k->concat({&shifted, &x1}, y), Catch::Contains("input 0 is a strided view"));
    std::vector<Tensor*> bad{&moved, &d1};
    CHECK_THROWS_WITH(k->split(y, bad), Catch::Contains("output 0 is a strided view"));
    // ... as is any strided tensor by the other element-wise ops.
    CHECK_THROWS_WITH(k->accumulate(x1, x0), Catch::Contains("accumulate: y is a strided view"));
    CHECK_THROWS_WITH(k->convert(x0, d1), Catch::Contains("convert: x is a strided view"));
  }
}

TEST_CASE("dropout masks are a pure function of (seed, index) with the right keep rate", "[backends]") {
  DropoutParams p;
  p.rate = 0.3f;
  Shape s{64, 16, 16, 8};  // 131072 elements
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(43);
    auto k = make_kernel<DropoutKernel>(be.ctx(), p);
    Tensor hx = random_tensor(s, rng, 0.5, 1.5);
    Tensor x = be.upload(hx), y = be.nan(s), mask = be.empty(s, DType::U8);
    k->forward(x, y, mask, 1234);
    Tensor hy = be.download(y), hmask = be.download(mask);
    int64_t kept = 0;
    const uint8_t* m = hmask.as<uint8_t>();
    bool values_ok = true, binary = true;
    for (int64_t i = 0; i < x.numel(); ++i) {
      kept += m[i];
      double want = m[i] ? hx.f32()[i] / (1.0 - 0.3) : 0.0;
      values_ok = values_ok && std::fabs(hy.f32()[i] - want) <= 1e-6 * std::fabs(want) + 1e-12;
      binary = binary && (m[i] == 0 || m[i] == 1);
    }
    CHECK(values_ok);
    CHECK(binary);
    double rate = 1.0 - double(kept) / double(x.numel());
    // Binomial std of the drop fraction is sqrt(0.3*0.7/131072) ~ 0.0013: allow 5 sigma.
    CHECK(std::fabs(rate - 0.3) < 0.0065);

    // The mask of element i matches the documented Philox rule, whatever the tensor's size (and
    // so is the same on every backend).
    uint32_t thr = dropout_threshold(0.3f);
    for (int64_t i : {int64_t(0), int64_t(1), int64_t(5), int64_t(99999), x.numel() - 1}) {
      Philox4 r = dropout_words(uint64_t(i / 4), 1234);
      CHECK(m[i] == ((r.v[i % 4] >> 8) >= thr));
    }
    // A smaller tensor (not a multiple of 4) with the same seed gets the same leading mask.
    Tensor hsx = Tensor::empty({1021});
    std::memcpy(hsx.data(), hx.data(), hsx.bytes());
    Tensor sy = be.empty({1021}), sm = be.empty({1021}, DType::U8);
    k->forward(be.upload(hsx), sy, sm, 1234);
    CHECK(std::memcmp(be.download(sm).data(), hmask.data(), 1021) == 0);

    // Same seed -> same mask, different seed -> different mask.
    Tensor mask2 = be.empty(s, DType::U8), mask3 = be.empty(s, DType::U8);
    k->forward(x, y, mask2, 1234);
    CHECK(std::memcmp(hmask.data(), be.download(mask2).data(), size_t(x.numel())) == 0);
    k->forward(x, y, mask3, 1235);
    CHECK(std::memcmp(hmask.data(), be.download(mask3).data(), size_t(x.numel())) != 0);

    // Backward uses the saved mask and the same scale.
    Tensor hdy = random_tensor(s, rng), dx = be.nan(s);
    k->backward(be.upload(hdy), mask, dx);
    ref::Vec want(size_t(s.numel()));
    for (int64_t i = 0; i < s.numel(); ++i) want[size_t(i)] = m[i] ? hdy.f32()[i] / 0.7 : 0.0;
    be.check("dx", dx, want, 1e-6);
  }
}

TEST_CASE("dropout with rate 0 is the identity, bad rates and masks are rejected", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(44);
    auto k = make_kernel<DropoutKernel>(be.ctx(), DropoutParams{0.0f});
    Tensor hx = random_tensor({5, 7}, rng);
    Tensor x = be.upload(hx), y = be.nan({5, 7}), mask = be.empty({5, 7}, DType::U8);
    k->forward(x, y, mask, 99);
    be.check("y", y, to_vec(hx), 0.0);
    Tensor hdy = random_tensor({5, 7}, rng), dx = be.nan({5, 7});
    k->backward(be.upload(hdy), mask, dx);
    be.check("dx", dx, to_vec(hdy), 0.0);
    CHECK_THROWS_AS(make_kernel<DropoutKernel>(be.ctx(), DropoutParams{1.0f}), std::invalid_argument);
    CHECK_THROWS_AS(make_kernel<DropoutKernel>(be.ctx(), DropoutParams{-0.1f}), std::invalid_argument);
    Tensor bad_mask = be.empty({5, 7});
    CHECK_THROWS_AS(k->forward(x, y, bad_mask, 1), std::invalid_argument);
    Tensor x0 = be.empty({0, 7}), m0 = be.empty({0, 7}, DType::U8);
    auto k2 = make_kernel<DropoutKernel>(be.ctx(), DropoutParams{0.5f});
    REQUIRE_NOTHROW(k2->forward(x0, x0, m0, 1));
  }
}

// Keras's SpatialDropout1D/2D: a mask [N, C] whose bit (n, c) keeps or drops channel c of sample n
// at every position, the bit an elements' mask of an [N, C] tensor has with that seed (so the same
// on every backend); forward and backward apply it with the same scale. Batch 1, one channel, one
// position, odd sizes, an empty batch; a mask of neither form is refused.
TEST_CASE("dropout of whole channels: mask [N, C] as the elements' mask of [N, C], every position alike", "[backends]") {
  DropoutParams p;
  p.rate = 0.4f;
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(45);
    auto k = make_kernel<DropoutKernel>(be.ctx(), p);
    for (Shape s : {Shape{6, 9, 5}, Shape{3, 4, 5, 7}, Shape{1, 3, 1}, Shape{2, 1, 3}, Shape{1, 5, 5, 1}, Shape{0, 4, 3},
                    Shape{64, 33, 17}}) {
      INFO("x [" << s.str() << "]");
      const int64_t N = s[0], C = s.back(), P = N * C != 0 ? s.numel() / (N * C) : 0;
      const Tensor hx = random_tensor(s, rng, 0.5, 1.5), hdy = random_tensor(s, rng);
      Tensor y = be.nan(s), mask = be.empty({N, C}, DType::U8), dx = be.nan(s);
      k->forward(be.upload(hx), y, mask, 777);
      k->backward(be.upload(hdy), mask, dx);
      // The elements' mask of an [N, C] tensor with the same seed.
      Tensor flat_y = be.empty({N, C}), flat_m = be.empty({N, C}, DType::U8);
      k->forward(be.upload(random_tensor({N, C}, rng)), flat_y, flat_m, 777);
      const Tensor hm = be.download(mask);
      REQUIRE(std::memcmp(hm.data(), be.download(flat_m).data(), size_t(N * C)) == 0);
      const uint8_t* m = hm.as<uint8_t>();
      ref::Vec want_y(size_t(s.numel())), want_dx(size_t(s.numel()));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t q = 0; q < P; ++q)
          for (int64_t c = 0; c < C; ++c) {
            const int64_t i = (n * P + q) * C + c;
            const float scale = dropout_scale(0.4f);
            want_y[size_t(i)] = dropout_apply(m[n * C + c] != 0, hx.f32()[i], scale);
            want_dx[size_t(i)] = dropout_apply(m[n * C + c] != 0, hdy.f32()[i], scale);
          }
      be.check("y", y, want_y, 0.0);
      be.check("dx", dx, want_dx, 0.0);
      if (s.numel() > 10000) {  // the keep rate over 64·17 channels: binomial std 0.015, 5 sigma
        int64_t kept = 0;
        for (int64_t i = 0; i < N * C; ++i) kept += m[i];
        CHECK(std::fabs(1.0 - double(kept) / double(N * C) - 0.4) < 0.075);
      }
    }
    Tensor x = be.upload(random_tensor({2, 3, 4}, rng)), y = be.nan({2, 3, 4});
    Tensor wrong = be.empty({2, 3}, DType::U8), wrong2 = be.empty({3, 4}, DType::U8);
    CHECK_THROWS_WITH(k->forward(x, y, wrong, 1), Catch::Contains("neither x's size nor [N, C]"));
    CHECK_THROWS_WITH(k->forward(x, y, wrong2, 1), Catch::Contains("neither x's size nor [N, C]"));
  }
}

TEST_CASE("dropout Philox-4x32-10 matches the Random123 known-answer vectors") {
  // Host only: the generator every backend shares (philox.h is host and device code).
  // From Random123's kat_vectors: philox4x32 10 rounds.
  Philox4 a = philox4x32(0, 0, 0, 0, 0, 0);
  CHECK(a.v[0] == 0x6627e8d5u);
  CHECK(a.v[1] == 0xe169c58du);
  CHECK(a.v[2] == 0xbc57ac4cu);
  CHECK(a.v[3] == 0x9b00dbd8u);
  Philox4 b = philox4x32(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
  Philox4 c = philox4x32(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(c.v[0] == 0xd16cfe09u);
  CHECK(c.v[1] == 0x94fdccebu);
  CHECK(c.v[2] == 0x5001e420u);
  CHECK(c.v[3] == 0x24126ea1u);
}
