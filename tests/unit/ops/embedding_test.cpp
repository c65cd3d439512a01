// embedding tests: lookup and the accumulated gradient (repeated ids) against float64 on every backend, bad ids named.
#include <cmath>

#include "backends.h"
#include "core/ops/embedding.h"
#include "reference_rnn.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// Ids 0..vocab-1 as floats, drawn so that most of them repeat.
Tensor random_ids(const Shape& s, int64_t vocab, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(uniform_int(rng, 0, vocab - 1));
  return t;
}

}  // namespace

TEST_CASE("embedding forward and backward match float64 reference, repeated ids accumulate", "[backends]") {
  struct Case {
    Shape ids;
    int64_t vocab, dim;
  };
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(81);
    const std::vector<Case> cases = {{{1, 1}, 1, 1},       {{3, 7}, 5, 4},     {{8, 50}, 3, 33},
                                     {{1, 200}, 1000, 8},  {{16}, 7, 129},     {{4, 9, 2}, 11, 5},
                                     {{64, 100}, 20, 64}};
    for (const Case& c : cases) {
      INFO("ids [" << c.ids.str() << "], vocab " << c.vocab << ", dim " << c.dim);
      auto k = make_kernel<EmbeddingKernel>(be.ctx(), EmbeddingParams{c.vocab, c.dim});
      Tensor hids = random_ids(c.ids, c.vocab, rng), hw = random_tensor({c.vocab, c.dim}, rng);
      Tensor ids = be.upload(hids), w = be.upload(hw);
      const Shape out = embedding::output_shape(c.ids, {c.vocab, c.dim});
      Tensor y = be.nan(out);
      k->forward(ids, w, y);
      be.check("y", y, ref::embedding_forward(to_vec(hids), to_vec(hw), c.dim), 0.0);  // a copy: exact
      Tensor hdy = random_tensor(out, rng), dw = be.nan({c.vocab, c.dim});
      k->backward(ids, be.upload(hdy), dw);
      be.check("dw", dw, ref::embedding_backward(to_vec(hids), to_vec(hdy), c.vocab, c.dim));
    }
  }
}

TEST_CASE("embedding gradient is the same bit for bit on every call", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    std::mt19937_64 rng(82);
    auto k = make_kernel<EmbeddingKernel>(be.ctx(), EmbeddingParams{4, 16});
    Tensor ids = be.upload(random_ids({32, 40}, 4, rng)), dy = be.upload(random_tensor({32, 40, 16}, rng));
    Tensor dw = be.empty({4, 16});
    k->backward(ids, dy, dw);
    const ref::Vec first = be.vec(dw);
    for (int i = 0; i < 3; ++i) {
      k->backward(ids, dy, dw);
      be.check("dw", dw, first, 0.0);
    }
  }
}

TEST_CASE("embedding rejects an id outside the vocabulary or not an integer, naming it and its position", "[backends]") {
  for (const Backend& be : backends()) SECTION(be.name) {
    auto k = make_kernel<EmbeddingKernel>(be.ctx(), EmbeddingParams{10, 3});
    Tensor w = be.upload(Tensor::empty({10, 3}));
    Tensor y = be.empty({2, 4, 3});
    struct Bad {
      float v;
      const char* message;
    };
    for (const Bad& bad : {Bad{10.0f, "embedding: id 10 at [1, 2] is outside the vocabulary [0, 10)"},
                           Bad{-1.0f, "embedding: id -1 at [1, 2] is outside the vocabulary [0, 10)"},
                           Bad{2.5f, "embedding: id 2.5 at [1, 2] is not an integer"}}) {
      ref::Vec v = {0, 1, 2, 3, 4, 5, bad.v, 9};
      v[7] = 10;  // a second bad id later: the first is the one named
      Tensor ids = be.upload(from_vec({2, 4}, v));
      CHECK_THROWS_WITH(k->forward(ids, w, y), bad.message);
      CHECK_THROWS_AS(k->forward(ids, w, y), std::runtime_error);
    }
    Tensor nan_ids = be.upload(from_vec({1}, {std::nan("")})), y1 = be.empty({1, 3});
    CHECK_THROWS_AS(k->forward(nan_ids, w, y1), std::runtime_error);
    Tensor ok = be.upload(from_vec({2}, {0, 9})), bad_w = be.upload(Tensor::empty({9, 3})), y2 = be.empty({2, 3});
    CHECK_THROWS_AS(k->forward(ok, bad_w, y2), std::invalid_argument);
    Tensor bad_y = be.empty({2, 4});
    CHECK_THROWS_AS(k->forward(ok, w, bad_y), std::invalid_argument);
  }
}
