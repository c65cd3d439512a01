// run_recorded (core/runtime/recorded_step.h) on a context that "records" on the CPU: its modes, and
// that nothing is allocated inside a capture when another kind made a shared buffer again.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/ops/context.h"
#include "core/runtime/recorded_step.h"

using namespace trainer;

namespace {

// run_recorded's modes on a context that "records" on the CPU (no GPU needed): its allocator
// refuses to allocate while capturing and counts the blocks handed back, as CudaAllocator does; a
// capture runs the work (nothing checks that it did not) and its replays are counted.
class CountingAllocator final : public Allocator {
 public:
  bool capturing = false;
  uint64_t releases = 0;
  void deallocate(void* p, size_t) override {
    ++releases;
    std::free(p);
  }
  Device device() const override { return Device::cpu(); }

 private:
  void* do_allocate(size_t bytes) override {
    if (capturing) throw DeviceError("an allocation of " + std::to_string(bytes) + " bytes while a CUDA graph is captured");
    return std::malloc(bytes > 0 ? bytes : 1);
  }
};

class RecordingContext final : public OpContext {
 public:
  RecordingContext() : OpContext(Device::cpu()) {}
  Allocator& allocator() override { return alloc_; }
  void copy_from_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { std::memcpy(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { std::memmove(d, s, n); }
  void fill_zero(void* d, size_t n) override { std::memset(d, 0, n); }
  bool can_capture() const override { return true; }
  void begin_capture() override { alloc_.capturing = true; }
  std::unique_ptr<CapturedWork> end_capture() override {
    alloc_.capturing = false;
    return std::make_unique<Replays>(replays);
  }
  void abort_capture() noexcept override { alloc_.capturing = false; }
  bool capturing() const override { return alloc_.capturing; }
  uint64_t released_blocks() const override { return alloc_.releases; }
  int replays = 0;

 private:
  struct Replays final : CapturedWork {
    explicit Replays(int& n) : n_(n) {}
    void replay() override { ++n_; }
    int& n_;
  };
  CountingAllocator alloc_;
};

}  // namespace

TEST_CASE("recorded step: a kind whose buffer another kind made again since its launched call runs launched again "
          "before it records (nothing allocated inside the capture)") {
  // Two kinds (batch sizes 6 and 4) sharing one buffer made again whenever the size changes, as a
  // dropout layer's mask: 6 launched, recorded, replayed; 4 launched (the mask made again: 6's
  // recording is dropped); 6 launched again; then 4 — recorded now, it would make its mask inside
  // the capture (the recording refused, every later step launched): launched again, then recorded.
  RecordingContext ctx;
  Tensor mask;
  std::map<int64_t, RecordedStep> kinds;
  std::string failed;
  std::vector<int> replayed;
  for (const int64_t n : {6, 6, 6, 4, 6, 4, 4, 4}) {
    replayed.push_back(run_recorded(ctx, kinds[n], true, failed, [&] {
      if (mask.shape() != Shape{n * 512}) mask = ctx.empty(Shape{n * 512}, DType::U8);
    }) ? 1 : 0);
    INFO("batch " << n << ": " << failed);
    REQUIRE(failed.empty());
  }
  CHECK(replayed == std::vector<int>{0, 1, 1, 0, 0, 0, 1, 1});
  CHECK(ctx.replays == 4);
  CHECK(kinds[4].work != nullptr);
  CHECK(kinds[6].work == nullptr);  // dropped at its second launch, not recorded since
}
