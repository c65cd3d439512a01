// The gradient reduction of data parallelism: the worker threads' bucket reducer (LocalComm) and
// the bucket plan. Named "data parallel: ..." so that scripts/test-tsan.sh runs them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "core/dist/local_comm.h"
#include "core/runtime/data_parallel/grad_buckets.h"

using namespace trainer;

namespace {

// Rank r's gradient at element i in step s: inexact floats, different on every rank and step.
float grad_value(int rank, int step, int64_t i) { return float(rank + 1) / float(i + 3 * step + 1) + float(i % 7); }  // no a*b+c: no FMA contraction

// The rank-order float sum every element must hold.
float expected(int ranks, int step, int64_t i) {
  float s = grad_value(0, step, i);
  for (int r = 1; r < ranks; ++r) s += grad_value(r, step, i);
  return s;
}

struct Group {
  std::vector<std::unique_ptr<OpContext>> ctxs;
  std::vector<std::unique_ptr<Communicator>> comms;
  explicit Group(int n) {
    std::vector<OpContext*> raw;
    for (int r = 0; r < n; ++r) {
      ctxs.push_back(make_context(Device::cpu(r), {1}));
      raw.push_back(ctxs.back().get());
    }
    comms = make_local_comms(raw);
  }
};

}  // namespace

TEST_CASE("data parallel: the worker threads' bucket reducer sums every bucket in rank order, the same bits on every rank, step after step") {
  const int64_t n = 200003;  // pieces of 16384 floats: buckets of one piece, many pieces, a partial one, an empty one
  const std::vector<BucketRange> buckets = {{0, 5}, {5, 5}, {5, 16389}, {16389, 120000}, {120000, 200003}};
  for (int ranks : {2, 3}) {
    SECTION(std::to_string(ranks) + " ranks") {
      Group g(ranks);
      std::vector<Tensor> grads;
      for (int r = 0; r < ranks; ++r) grads.push_back(g.ctxs[size_t(r)]->empty(Shape{n}));
      std::vector<std::unique_ptr<BucketReducer>> red;
      for (int r = 0; r < ranks; ++r) red.push_back(g.comms[size_t(r)]->make_bucket_reducer(grads[size_t(r)], buckets));
      for (auto& p : red) REQUIRE(p != nullptr);
      const int steps = 4;
      std::atomic<int> wrong{0}, pieces_taken{0};
      std::vector<std::thread> threads;
      for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
          std::mt19937 rng(unsigned(r * 7 + 1));
          float* x = grads[size_t(r)].f32();
          for (int step = 1; step <= steps; ++step) {
            // No barrier between steps: a rank leaves a step only when every bucket is reduced,
            // so nobody reads this buffer any more.
            for (int64_t i = 0; i < n; ++i) x[i] = grad_value(r, step, i);
            red[size_t(r)]->start_step();
            for (size_t b = buckets.size(); b-- > 0;) {
              red[size_t(r)]->post(b);
              // Ranks out of step: some layers take longer on one rank than on another.
              if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
              red[size_t(r)]->progress();
            }
            // The optimizer's order: the last bucket first.
            for (size_t b = buckets.size(); b-- > 0;) red[size_t(r)]->wait(b);
            for (int64_t i = 0; i < n; ++i)
              if (x[i] != expected(ranks, step, i)) ++wrong;
            int here = 0;
            for (const BucketTrace& t : red[size_t(r)]->trace()) {
              here += t.pieces_here;
              if (!(t.ready >= 0 && t.start >= 0 && t.end >= t.start)) ++wrong;
            }
            pieces_taken += here;
          }
        });
      for (auto& t : threads) t.join();
      CHECK(wrong == 0);
      // Pieces: 1 + 1 (an empty bucket is one piece of nothing) + 1 + 7 + 5, each taken once per step.
      CHECK(pieces_taken == steps * 15);
      for (int r = 1; r < ranks; ++r) CHECK(std::memcmp(grads[0].data(), grads[size_t(r)].data(), grads[0].bytes()) == 0);
    }
  }
}

TEST_CASE("data parallel: a rank waiting in the bucket reducer is woken by an abort, with its reason") {
  Group g(2);
  Tensor a = g.ctxs[0]->zeros(Shape{100}), b = g.ctxs[1]->zeros(Shape{100});
  const std::vector<BucketRange> buckets = {{0, 100}};
  auto r0 = g.comms[0]->make_bucket_reducer(a, buckets);
  auto r1 = g.comms[1]->make_bucket_reducer(b, buckets);
  r0->start_step();
  r1->start_step();
  r0->post(0);  // rank 1 never posts: rank 0 would wait for ever
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g.comms[1]->abort("replica 1 failed: out of memory");
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(r0->wait(0), Catch::Contains("replica 1 failed: out of memory"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  aborter.join();
  // A reducer made after the abort fails at once too.
  CHECK_THROWS_AS(g.comms[0]->make_bucket_reducer(a, buckets)->post(0), CommError);
}

TEST_CASE("data parallel: ranks whose gradient buckets differ are refused, and GPU memory takes the communication thread") {
  Group g(2);
  Tensor a = g.ctxs[0]->zeros(Shape{100}), b = g.ctxs[1]->zeros(Shape{100});
  auto r0 = g.comms[0]->make_bucket_reducer(a, {{0, 50}, {50, 100}});
  CHECK_THROWS_WITH(g.comms[1]->make_bucket_reducer(b, {{0, 100}}), Catch::Contains("differ"));
  CHECK_THROWS_WITH(g.comms[1]->make_bucket_reducer(b, {{0, 101}}), Catch::Contains("outside"));
  SoloComm solo;
  CHECK(solo.make_bucket_reducer(a, {{0, 100}}) == nullptr);
}

TEST_CASE("data parallel: bucket plans cover the gradients, never split a parameter, and size by the reduction path") {
  auto check_cover = [](const std::vector<BucketRange>& p, int64_t n, const std::vector<int64_t>& cuts) {
    REQUIRE(!p.empty());
    CHECK(p.front().begin == 0);
    CHECK(p.back().end == n);
    for (size_t i = 1; i < p.size(); ++i) CHECK(p[i].begin == p[i - 1].end);
    for (const BucketRange& b : p) CHECK((b.begin == 0 || std::find(cuts.begin(), cuts.end(), b.begin) != cuts.end()));
  };
  // 100 parameters of 40,000 floats: 4 M floats (16 MB).
  std::vector<int64_t> cuts;
  for (int i = 0; i < 100; ++i) cuts.push_back(int64_t(i) * 40000);
  const int64_t n = 4000000;
  SECTION("worker threads (auto): about 1/16 of the model, clamped to [64 Ki, 256 Ki] floats") {
    auto p = plan_buckets(n, cuts, 0, true);
    check_cover(p, n, cuts);
    for (size_t i = 1; i < p.size(); ++i) CHECK(p[i].size() == 280000);  // the first cut past 256 Ki floats
  }
  SECTION("communication thread (auto): DDP's 1 MiB first bucket, then 25 MiB") {
    // 100 parameters of 400,000 floats (160 MB).
    std::vector<int64_t> big;
    for (int i = 0; i < 100; ++i) big.push_back(int64_t(i) * 400000);
    auto p = plan_buckets(40000000, big, 0, false);
    check_cover(p, 40000000, big);
    CHECK(p.back().size() == 400000);  // the first to be reduced: one parameter >= 1 MiB
    for (size_t i = 1; i + 1 < p.size(); ++i) CHECK(p[i].size() == 6800000);  // 17 parameters >= 25 MiB
  }
  SECTION("a size in MB: every bucket at least that large, the one at offset 0 what remains") {
    auto p = plan_buckets(n, cuts, 1000000, true);
    check_cover(p, n, cuts);
    for (size_t i = 1; i < p.size(); ++i) CHECK(p[i].size() >= 1000000);
  }
  SECTION("one parameter larger than a bucket stays whole; no gradients at all is one empty bucket") {
    auto p = plan_buckets(10, {0}, 3, true);
    REQUIRE(p.size() == 1);
    CHECK(p[0].size() == 10);
    auto e = plan_buckets(0, {}, 0, true);
    REQUIRE(e.size() == 1);
    CHECK(e[0].size() == 0);
  }
}

TEST_CASE("data parallel: an all-gather copies every rank's part byte for byte to every rank (NaN payloads and "
          "subnormals kept), and refuses a buffer of unequal parts") {
  for (int ranks : {1, 2, 3}) {
    INFO(ranks << " ranks");
    Group g(ranks);
    const int64_t part = 10;  // a LossSums' 40 bytes
    std::vector<Tensor> bufs;
    for (int r = 0; r < ranks; ++r) bufs.push_back(g.ctxs[size_t(r)]->empty(Shape{part * ranks}));
    // Rank r's bytes: patterns no float sum would keep (a signalling NaN's payload, a subnormal).
    auto word = [](int r, int64_t i) { return uint32_t(0x7f800001u + 977u * uint32_t(r) + uint32_t(i)) ^ (i % 3 == 0 ? 0x7f000000u : 0u); };
    for (int r = 0; r < ranks; ++r) {
      auto* w = static_cast<uint32_t*>(bufs[size_t(r)].data());
      for (int64_t i = 0; i < part * ranks; ++i) w[i] = 0xdeadbeefu;  // the others' parts: to be overwritten
      for (int64_t i = 0; i < part; ++i) w[r * part + i] = word(r, i);
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { g.comms[size_t(r)]->issue_all_gather(bufs[size_t(r)]); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
      const auto* w = static_cast<const uint32_t*>(bufs[size_t(r)].data());
      int wrong = 0;
      for (int q = 0; q < ranks; ++q)
        for (int64_t i = 0; i < part; ++i) wrong += w[q * part + i] != word(q, i);
      CHECK(wrong == 0);
    }
  }
  Group g(2);
  Tensor odd = g.ctxs[0]->empty(Shape{7});
  CHECK_THROWS_AS(g.comms[0]->issue_all_gather(odd), std::logic_error);
}

TEST_CASE("data parallel: the issued all-reduce and broadcast (a recorded step's, meeting between pieces) give the "
          "waiting collectives' bits on every rank, back to back, repeatedly, odd and empty sizes") {
  for (int ranks : {1, 2, 3, 4})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)}) {
      INFO(ranks << " ranks, " << n << " floats");
      Group g(ranks);
      // Per rank: an all-reduce's, a broadcast's and another all-reduce's buffers, issued back to
      // back (each rank's inbox rewritten by the next while the others may still read it, were the
      // ranks not to meet again), and the same through the waiting collectives.
      std::vector<std::vector<Tensor>> issued(static_cast<size_t>(ranks)), waited(static_cast<size_t>(ranks));
      for (int r = 0; r < ranks; ++r)
        for (int k = 0; k < 3; ++k) {
          issued[size_t(r)].push_back(g.ctxs[size_t(r)]->empty(Shape{n}));
          waited[size_t(r)].push_back(g.ctxs[size_t(r)]->empty(Shape{n}));
        }
      int differ = 0, unequal = 0;
      for (int round = 0; round < 6; ++round) {
        for (int r = 0; r < ranks; ++r)
          for (int k = 0; k < 3; ++k)
            for (int64_t i = 0; i < n; ++i)
              issued[size_t(r)][size_t(k)].f32()[i] = waited[size_t(r)][size_t(k)].f32()[i] = grad_value(r, 3 * round + k, i);
        const int root = round % ranks;
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r)
          threads.emplace_back([&, r] {
            Communicator& c = *g.comms[size_t(r)];
            std::vector<Tensor>& a = issued[size_t(r)];
            std::vector<Tensor>& b = waited[size_t(r)];
            c.issue_all_reduce_sum(a[0]);
            c.issue_broadcast(a[1], root);
            c.issue_all_reduce_sum(a[2]);
            c.all_reduce_sum(b[0]);
            c.broadcast(b[1], root);
            c.all_reduce_sum(b[2]);
          });
        for (auto& t : threads) t.join();
        for (int r = 0; r < ranks; ++r)
          for (int k = 0; k < 3; ++k) {
            const Tensor& x = issued[size_t(r)][size_t(k)];
            differ += n > 0 && std::memcmp(x.data(), waited[size_t(r)][size_t(k)].data(), x.bytes()) != 0;
            unequal += n > 0 && std::memcmp(x.data(), issued[0][size_t(k)].data(), x.bytes()) != 0;
          }
        if (n > 0) CHECK(issued[0][2].f32()[n - 1] == expected(ranks, 3 * round + 2, n - 1));
      }
      CHECK(differ == 0);
      CHECK(unequal == 0);
      if (ranks > 1) CHECK_THROWS_AS(g.comms[0]->issue_broadcast(issued[0][0], ranks), CommError);  // no such root
      CHECK_FALSE(g.comms[0]->records());  // CPU memory: the collectives run as called
    }
}

namespace {

// A CPU context that "captures" as a GPU's does, for LocalComm's recorded collectives: between
// begin_capture and end_capture host steps are kept, not run, and copies do nothing (the ranks'
// inboxes are not written while another rank's capture reads them; the sums still run at once, on
// what the inboxes hold: only the rendezvous protocol is under test), and the recording's replay
// runs the host steps.
class CapturingCpu final : public OpContext {
 public:
  explicit CapturingCpu(int index) : OpContext(Device::cpu(index)), base_(make_context(Device::cpu(index), {1})) {}
  Allocator& allocator() override { return base_->allocator(); }
  void copy_from_host(void* d, const void* s, size_t n) override { base_->copy_from_host(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { base_->copy_to_host(d, s, n); }
  void copy(void* d, const void* s, size_t n) override {
    if (!capturing_) base_->copy(d, s, n);
  }
  void fill_zero(void* d, size_t n) override {
    if (!capturing_) base_->fill_zero(d, n);
  }
  bool can_capture() const override { return true; }
  bool capturing() const override { return capturing_; }
  void begin_capture() override { capturing_ = true; }
  std::unique_ptr<CapturedWork> end_capture() override {
    capturing_ = false;
    return std::make_unique<Steps>(std::move(steps_));
  }
  void abort_capture() noexcept override {
    capturing_ = false;
    steps_.clear();
  }
  void host_step(const std::function<void()>& step) override {
    if (capturing_)
      steps_.push_back(step);
    else
      step();
  }

 private:
  struct Steps final : CapturedWork {
    explicit Steps(std::vector<std::function<void()>> s) : steps(std::move(s)) {}
    void replay() override {
      for (auto& s : steps) s();
    }
    std::vector<std::function<void()>> steps;
  };
  std::unique_ptr<OpContext> base_;
  bool capturing_ = false;
  std::vector<std::function<void()>> steps_;
};

}  // namespace

TEST_CASE("data parallel: a recorded all-reduce meets nobody while capturing (a rank whose capture fails leaves none "
          "waiting), its replays meet, and a replay after an inbox moved is refused") {
  std::vector<std::unique_ptr<OpContext>> ctxs;
  std::vector<OpContext*> raw;
  for (int r = 0; r < 2; ++r) {
    ctxs.push_back(std::make_unique<CapturingCpu>(0));  // one device, as `--gpus 0,0`
    raw.push_back(ctxs.back().get());
  }
  auto comms = make_local_comms(raw);
  CHECK(comms[0]->records());  // every rank's context captures, all on one device
  std::vector<Tensor> bufs{ctxs[0]->empty(Shape{5}), ctxs[1]->empty(Shape{5})};
  auto on_both = [&](const std::function<void(int)>& f) {
    std::thread t([&] { f(1); });
    f(0);
    t.join();
  };
  on_both([&](int r) { comms[size_t(r)]->issue_all_reduce_sum(bufs[size_t(r)]); });  // as called: inboxes registered
  // Rank 0 records alone — rank 1's capture "fails" before its collective: rank 0 does not wait.
  ctxs[0]->begin_capture();
  comms[0]->issue_all_reduce_sum(bufs[0]);
  CHECK(ctxs[0]->end_capture() != nullptr);
  // Both record, then replay together: the replays meet (a rank replaying alone would wait).
  std::vector<std::unique_ptr<CapturedWork>> work(2);
  on_both([&](int r) {
    ctxs[size_t(r)]->begin_capture();
    comms[size_t(r)]->issue_all_reduce_sum(bufs[size_t(r)]);
    work[size_t(r)] = ctxs[size_t(r)]->end_capture();
  });
  for (int i = 0; i < 3; ++i) on_both([&](int r) { work[size_t(r)]->replay(); });
  // A larger all-reduce as called grows and moves both inboxes: the recordings are refused.
  std::vector<Tensor> big{ctxs[0]->empty(Shape{4096}), ctxs[1]->empty(Shape{4096})};
  on_both([&](int r) { comms[size_t(r)]->issue_all_reduce_sum(big[size_t(r)]); });
  int refused = 0;
  std::mutex mu;
  on_both([&](int r) {
    try {
      work[size_t(r)]->replay();
    } catch (const CommError& e) {
      std::lock_guard<std::mutex> lock(mu);
      refused += std::string(e.what()).find("other inboxes") != std::string::npos;
    }
  });
  CHECK(refused == 2);
}
