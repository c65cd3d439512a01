// Statistics read late: OpContext::read_back's tickets, StepStats and the PendingSteps window; the host's call times.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/runtime/step_stats.h"
#include "test_devices.h"

using namespace trainer;

namespace {

// A fixed step's memory in the context's memory with `loss` as its sum, read back.
uint64_t read_back_sum(OpContext& ctx, Tensor& mem, double loss, long long bad = -1) {
  StepMemory m;
  m.sums.loss_sum = loss;
  m.sums.correct = 2;
  m.sums.count = 3;
  m.sums.bad_sample = bad;
  m.sums.bad_label = 7;
  m.scalars.unscale = 0.5f;
  m.check.sum_squares = 16 * (loss + 1) * (loss + 1);
  m.state.scale = float(loss) + 2;
  ctx.copy_from_host(mem.data(), &m, sizeof m);
  return ctx.read_back(mem.data(), sizeof m);
}

}  // namespace

TEST_CASE("read_back: each ticket keeps its own bytes until kReadBackSlots later ones, then refuses", "[backends]") {
  for (const test::TestDevice& d : test::test_devices()) {
    SECTION(d.name) {
      auto ctx = make_context(d.device);
      ctx->bind_thread();
      Tensor mem = ctx->empty(Shape{int64_t(sizeof(StepMemory))}, DType::U8);
      std::vector<StepStats> stats;
      for (int i = 0; i < OpContext::kReadBackSlots; ++i)
        stats.emplace_back(*ctx, read_back_sum(*ctx, mem, 1.5 * i), "cross_entropy");
      // Every one read after all were queued: each its own value (the memory was rewritten between).
      for (int i = OpContext::kReadBackSlots - 1; i >= 0; --i) {
        const LossStats s = stats[size_t(i)].get();
        CHECK(s.loss_sum == 1.5 * i);
        CHECK(s.correct == 2);
        CHECK(s.count == 3);
        CHECK_FALSE(stats[size_t(i)].pending());
        CHECK(std::isnan(stats[size_t(i)].grad_norm()));  // not asked for
      }
      // What a step reports, from the same bytes: the norm of its unscaled gradients, the scale after it.
      StepStats reported(*ctx, read_back_sum(*ctx, mem, 3), "cross_entropy", nullptr, {true, true});
      reported.get();
      CHECK(reported.grad_norm() == 8.0);  // sqrt(16·4²)·0.5
      CHECK(reported.loss_scale() == 5.0);
      // One more than the slots: the oldest ticket is gone, and says so.
      const uint64_t first = read_back_sum(*ctx, mem, 1);
      for (int i = 0; i < OpContext::kReadBackSlots; ++i) read_back_sum(*ctx, mem, 2);
      CHECK_THROWS_AS(ctx->read_back_done(first), std::logic_error);
      CHECK_THROWS_AS(ctx->read_back_wait(first), std::logic_error);
      CHECK_THROWS_AS(ctx->read_back(mem.data(), OpContext::kReadBackBytes + 1), std::logic_error);
      // An out-of-range label noted by the loss kernel is thrown when the statistics are read.
      StepStats bad(*ctx, read_back_sum(*ctx, mem, 0, 4), "cross_entropy");
      CHECK_THROWS_AS(bad.get(), std::out_of_range);
    }
  }
}

TEST_CASE("PendingSteps: oldest first, landed ones at once, at most `lag` unread, all on demand") {
  struct E {
    StepStats stats;
    int id = 0;
  };
  auto ctx = make_context(Device::cpu());
  Tensor mem = ctx->empty(Shape{int64_t(sizeof(StepMemory))}, DType::U8);
  SECTION("known statistics are read as soon as they are pushed") {
    PendingSteps<E> p(2);
    E e;
    p.push({LossStats{1, 1, 1}, 1});
    REQUIRE(p.next(e, false));
    CHECK(e.id == 1);
    CHECK_FALSE(p.next(e, false));
  }
  SECTION("held to its lag: read only behind `lag` newer ones, in order, then the rest with all") {
    PendingSteps<E> p(2, true);
    std::vector<int> order;
    E e;
    for (int i = 0; i < 5; ++i) {
      p.push({StepStats(*ctx, read_back_sum(*ctx, mem, i), "cross_entropy"), i});
      while (p.next(e, false)) {
        order.push_back(e.id);
        CHECK(e.stats.get().loss_sum == e.id);
      }
    }
    CHECK(order == std::vector<int>{0, 1, 2});
    while (p.next(e, true)) order.push_back(e.id);
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(p.empty());
  }
  SECTION("only statistics on their way count toward the lag: known ones (an accumulated step's earlier micro-batches) pass at once") {
    PendingSteps<E> p(1, true);
    std::vector<int> order;
    E e;
    auto drain = [&](bool all) {
      while (p.next(e, all)) order.push_back(e.id);
    };
    p.push({StepStats(*ctx, read_back_sum(*ctx, mem, 0), "cross_entropy"), 0});
    p.push({LossStats{}, 1});
    p.push({LossStats{}, 2});
    drain(false);
    CHECK(order.empty());  // one unread: within the lag, and the known ones wait behind it
    p.push({StepStats(*ctx, read_back_sum(*ctx, mem, 3), "cross_entropy"), 3});
    drain(false);
    CHECK(order == std::vector<int>{0, 1, 2});  // two unread: the oldest goes, the known ones with it
    p.push({LossStats{}, 4});
    drain(false);
    CHECK(order == std::vector<int>{0, 1, 2});
    drain(true);
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  }
  SECTION("a lag past the slots a context keeps is held below them") {
    PendingSteps<E> p(100, true);
    E e;
    int read = 0;
    for (int i = 0; i < 3 * OpContext::kReadBackSlots; ++i) {
      p.push({StepStats(*ctx, read_back_sum(*ctx, mem, i), "cross_entropy"), i});
      while (p.next(e, false)) {  // never a ticket overwritten
        CHECK(e.stats.get().loss_sum == e.id);
        ++read;
      }
    }
    CHECK(read == 3 * OpContext::kReadBackSlots - (OpContext::kReadBackSlots / 2 - 1));
  }
}

TEST_CASE("HostCallTimes: a timer adds its lifetime to its own thread's field, a host wait to its thread's count") {
  const HostCallTimes before = host_call_times();
  const uint64_t global = host_waits();
  {
    HostCallTimer timed(&HostCallTimes::launch_ns);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  count_host_wait();
  const HostCallTimes after = host_call_times();
  CHECK(after.launch_ns - before.launch_ns >= 20'000'000);
  CHECK(after.launch_ns - before.launch_ns < 2'000'000'000);
  CHECK(after.staging_ns == before.staging_ns);
  CHECK(after.waits == before.waits + 1);
  CHECK(host_waits() >= global + 1);  // every thread's
  // Another thread's timers and waits are its own.
  HostCallTimes other;
  std::thread t([&] {
    {
      HostCallTimer timed(&HostCallTimes::staging_ns);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    count_host_wait();
    other = host_call_times();
  });
  t.join();
  CHECK(other.staging_ns >= 5'000'000);
  CHECK(other.launch_ns == 0);
  CHECK(other.waits == 1);
  const HostCallTimes mine = host_call_times();
  CHECK(mine.staging_ns == after.staging_ns);
  CHECK(mine.launch_ns == after.launch_ns);
  CHECK(mine.waits == after.waits);
}
