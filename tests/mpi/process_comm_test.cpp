// process_comm_test: make_process_communicators across MPI processes x threads (sums, broadcast, host sums, barrier, two groups at once).
// Run by mpirun (tests/CMakeLists.txt): process_comm_test [local ranks per process, default 2].
// Prints one line per check (process 0) and exits non-zero when a check failed on any rank.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/mpi_world.h"
#include "core/dist/process_comm.h"
#include "core/ops/context.h"

using namespace trainer;

namespace {

int g_processes = 1, g_process = 0, g_locals = 2;
int world_size() { return g_processes * g_locals; }
int global_rank(int local) { return g_process * g_locals + local; }

std::mutex g_mu;
std::vector<std::string> g_failures;  // this process's failures in the current check

void fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_failures.push_back(what);
}

// Runs fn(local rank) on one thread per local rank. An exception ends the whole run at once: the
// other processes would otherwise wait in a collective until the test's timeout.
void on_threads(const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < g_locals; ++r)
    threads.emplace_back([&fn, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "process_comm_test: global rank %d: %s\n", global_rank(r), e.what());
        mpi::abort(3);
      }
    });
  for (auto& t : threads) t.join();
}

// Process 0 prints "ok: <name>" or "FAIL: <name>" with the first failures of every process.
bool report(const std::string& name) {
  std::string mine;
  for (size_t i = 0; i < g_failures.size() && i < 3; ++i) mine += "\n    process " + std::to_string(g_process) + ": " + g_failures[i];
  if (g_failures.size() > 3) mine += "\n    process " + std::to_string(g_process) + ": ... " + std::to_string(g_failures.size()) + " failures";
  g_failures.clear();
  std::vector<std::string> all = mpi::allgather(mine);
  std::string details;
  for (const std::string& s : all) details += s;
  if (g_process == 0) std::printf("%s: %s%s\n", details.empty() ? "ok" : "FAIL", name.c_str(), details.c_str());
  std::fflush(stdout);
  return details.empty();
}

Tensor filled(OpContext& ctx, int64_t n, const std::function<float(int64_t)>& f) {
  Tensor t = ctx.empty(Shape{n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = f(i);
  return t;
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Exact sums of rank-dependent integers (odd length); then inexact floats over a long buffer (MPI's
// large-message path), close to the float64 sum and bit-identical on every global rank.
void check_all_reduce_sum(Comms& comms, std::vector<std::unique_ptr<OpContext>>& ctxs) {
  const int64_t n = 1001, m = 300007;
  const int S = world_size();
  std::vector<uint64_t> hashes(static_cast<size_t>(g_locals));
  on_threads([&](int r) {
    int g = global_rank(r);
    Tensor a = filled(*ctxs[size_t(r)], n, [&](int64_t i) { return float(g * 1000 + i); });
    comms[size_t(r)]->all_reduce_sum(a);
    for (int64_t i = 0; i < n; ++i) {
      float want = float(1000 * S * (S - 1) / 2 + S * i);
      if (a.f32()[i] != want) return fail("rank " + std::to_string(g) + ": exact sum [" + std::to_string(i) + "] = " +
                                          std::to_string(a.f32()[i]) + ", want " + std::to_string(want));
    }
    auto value = [](int q, int64_t i) { return float(std::sin(0.37 * double(i) + q) * (q + 1) / 3.0); };
    Tensor b = filled(*ctxs[size_t(r)], m, [&](int64_t i) { return value(g, i); });
    comms[size_t(r)]->all_reduce_sum(b);
    for (int64_t i = 0; i < m; ++i) {
      double want = 0;
      for (int q = 0; q < S; ++q) want += double(value(q, i));
      if (std::fabs(b.f32()[i] - want) > 1e-5 * S) return fail("rank " + std::to_string(g) + ": float sum [" + std::to_string(i) +
                                                                  "] = " + std::to_string(b.f32()[i]) + ", want " + std::to_string(want));
    }
    hashes[size_t(r)] = fnv1a(b);
  });
  std::string mine;
  for (uint64_t h : hashes) mine += std::to_string(h) + " ";
  // Every rank's hash equals global rank 0's.
  std::vector<std::string> all = mpi::allgather(mine);
  std::string first = all[0].substr(0, all[0].find(' '));
  std::string expect;
  for (int r = 0; r < g_locals; ++r) expect += first + " ";
  if (mine != expect) fail("float sums differ between global ranks (hashes " + mine + "vs rank 0's " + first + ")");
}

void check_broadcast(Comms& comms, std::vector<std::unique_ptr<OpContext>>& ctxs, int root) {
  const int64_t n = 1001;
  on_threads([&](int r) {
    int g = global_rank(r);
    Tensor t = filled(*ctxs[size_t(r)], n, [&](int64_t i) { return g == root ? 0.5f + 3.0f * float(i) : -1.0f; });
    comms[size_t(r)]->broadcast(t, root);
    for (int64_t i = 0; i < n; ++i)
      if (t.f32()[i] != 0.5f + 3.0f * float(i))
        return fail("rank " + std::to_string(g) + ": [" + std::to_string(i) + "] = " + std::to_string(t.f32()[i]));
  });
}

void check_all_reduce_host(Comms& comms) {
  const int S = world_size();
  on_threads([&](int r) {
    int g = global_rank(r);
    std::vector<double> v = {double(g), 1.0, 0.25 * g, -double(g) * g};
    comms[size_t(r)]->all_reduce_host(v);
    double sg = S * (S - 1) / 2.0, sg2 = 0;
    for (int q = 0; q < S; ++q) sg2 += double(q) * q;
    std::vector<double> want = {sg, double(S), 0.25 * sg, -sg2};
    if (v != want) fail("rank " + std::to_string(g) + ": got " + std::to_string(v[0]) + " " + std::to_string(v[1]) + " " +
                        std::to_string(v[2]) + " " + std::to_string(v[3]));
  });
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The last global rank enters late; nobody may leave before it entered (CLOCK_MONOTONIC is one
// clock for every process of this machine).
void check_barrier(Comms& comms) {
  on_threads([&](int r) {
    int g = global_rank(r);
    double entered = 0;
    if (g == world_size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      entered = now_s();
    }
    comms[size_t(r)]->barrier();
    double left = now_s();
    std::vector<double> v = {entered};
    comms[size_t(r)]->all_reduce_host(v);
    if (left < v[0]) fail("rank " + std::to_string(g) + " left the barrier " + std::to_string(v[0] - left) + " s before the last rank entered");
  });
}

// Two groups at once, as a replica's gradient thread and worker thread use them.
void check_two_groups(Comms& grad, Comms& ctl, std::vector<std::unique_ptr<OpContext>>& ctxs) {
  const int iterations = 100, S = world_size();
  on_threads([&](int r) {
    int g = global_rank(r);
    std::thread grad_thread([&] {
      try {
        for (int it = 0; it < iterations; ++it) {
          Tensor t = filled(*ctxs[size_t(r)], 1001, [&](int64_t i) { return float(g + it + i); });
          grad[size_t(r)]->all_reduce_sum(t);
          for (int64_t i = 0; i < 1001; ++i)
            if (t.f32()[i] != float(S * (S - 1) / 2 + S * (it + i)))
              return fail("grad group, rank " + std::to_string(g) + ", iteration " + std::to_string(it));
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "process_comm_test: global rank %d, grad group: %s\n", g, e.what());
        mpi::abort(3);
      }
    });
    for (int it = 0; it < iterations; ++it) {
      std::vector<double> v = {double(it), 1.0};
      ctl[size_t(r)]->all_reduce_host(v);
      if (v[0] != double(S * it) || v[1] != double(S)) fail("control group, rank " + std::to_string(g) + ", iteration " + std::to_string(it));
      Tensor t = filled(*ctxs[size_t(r)], 7, [&](int64_t i) { return g == it % S ? float(it * 10 + i) : -1.0f; });
      ctl[size_t(r)]->broadcast(t, it % S);
      if (t.f32()[6] != float(it * 10 + 6)) fail("control group broadcast, rank " + std::to_string(g));
      if (it % 10 == 0) ctl[size_t(r)]->barrier();
    }
    grad_thread.join();
  });
}

// The worker threads' bucket reducer across processes: a local sum by pieces, then local rank 0's
// MPI exchange. Buckets of exact integer values (sum known) and of inexact floats (identical
// bits on every rank), 5 steps, posted from the last bucket down with progress() between posts.
// In the last step the processes after the first post bucket 0 kLate later: process 0's ranks
// count that wait as skew (another process behind), and its exchange as started that much later.
void check_bucket_reducer(Comms& comms, std::vector<std::unique_ptr<OpContext>>& ctxs) {
  constexpr std::chrono::milliseconds kLate{60};
  const int S = world_size(), steps = 5;
  const int64_t n = 100003;
  const std::vector<BucketRange> buckets = {{0, 7}, {7, 7}, {7, 40000}, {40000, 100003}};
  std::vector<std::vector<uint64_t>> hashes(size_t(g_locals), std::vector<uint64_t>(size_t(steps), 0));
  on_threads([&](int r) {
    const int g = global_rank(r);
    Tensor t = ctxs[size_t(r)]->empty(Shape{n});
    auto reducer = comms[size_t(r)]->make_bucket_reducer(t, buckets);
    if (!reducer) return fail("rank " + std::to_string(g) + ": no bucket reducer for CPU memory");
    for (int step = 1; step <= steps; ++step) {
      // Integers below 2^24 in the first 40000 (exact), inexact floats after.
      for (int64_t i = 0; i < n; ++i) t.f32()[i] = i < 40000 ? float(g + step + i % 1000) : float(g + 1) / float(i + step);
      reducer->start_step();
      for (size_t b = buckets.size(); b-- > 0;) {
        if (step == steps && b == 0 && g_process > 0) std::this_thread::sleep_for(kLate);
        reducer->post(b);
        reducer->progress();
        if (g % 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // ranks out of step
      }
      for (size_t b = 0; b < buckets.size(); ++b) reducer->wait(b);
      for (int64_t i = 0; i < 40000; ++i)
        if (t.f32()[i] != float(S * (S - 1) / 2 + S * (step + i % 1000)))
          return fail("rank " + std::to_string(g) + ", step " + std::to_string(step) + ": element " + std::to_string(i));
      hashes[size_t(r)][size_t(step - 1)] = fnv1a(t.slice(40000, n));
    }
    if (g_process == 0 && g_processes > 1) {
      const double skew = reducer->skew_seconds(), lag = reducer->trace()[0].exchange_all - reducer->trace()[0].ready;
      const double late = std::chrono::duration<double>(kLate).count();
      if (skew < 0.6 * late || lag < 0.6 * late)
        return fail("rank " + std::to_string(g) + ": the other processes posted " + std::to_string(late * 1000) +
                    " ms late, but skew " + std::to_string(skew * 1000) + " ms and the last exchange started " +
                    std::to_string(lag * 1000) + " ms after bucket 0 was ready here");
    }
  });
  std::string mine;
  for (const auto& h : hashes) mine += std::to_string(h[0]) + "," + std::to_string(h[steps - 1]) + " ";
  std::string first;
  for (const std::string& a : mpi::allgather(mine)) {
    const std::string one = a.substr(0, a.find(' ') + 1);
    if (first.empty()) first = one;
    for (size_t at = 0; at < a.size(); at += one.size())
      if (a.compare(at, first.size(), first) != 0) return fail("the inexact sums differ between ranks: " + a + "| " + first);
  }
}

// A bad root is a CommError on every rank, not a hang.
void check_bad_root(Comms& comms, std::vector<std::unique_ptr<OpContext>>& ctxs) {
  on_threads([&](int r) {
    Tensor t = ctxs[size_t(r)]->zeros(Shape{3});
    try {
      comms[size_t(r)]->broadcast(t, world_size());
      fail("rank " + std::to_string(global_rank(r)) + ": broadcast from root " + std::to_string(world_size()) + " did not throw");
    } catch (const CommError& e) {
      if (!std::strstr(e.what(), "out of 0..")) fail(std::string("unexpected message: ") + e.what());
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    mpi::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process_comm_test: %s\n", e.what());
    return 2;
  }
  g_processes = mpi::size();
  g_process = mpi::rank();
  g_locals = argc > 1 ? std::atoi(argv[1]) : 2;
  if (g_locals < 1 || g_locals > 16) {
    std::fprintf(stderr, "process_comm_test: local ranks must be 1..16, not '%s'\n", argv[1]);
    mpi::abort(2);
  }
  bool ok = true;
  try {
    std::vector<std::unique_ptr<OpContext>> ctxs;
    std::vector<Device> devices;
    std::vector<OpContext*> raw;
    for (int r = 0; r < g_locals; ++r) {
      devices.push_back(Device::cpu(r));
      ctxs.push_back(make_context(devices.back(), {1}));
      raw.push_back(ctxs.back().get());
    }
    Comms grad = make_process_communicators(devices, raw, g_process, g_processes);
    Comms ctl = make_process_communicators(devices, raw, g_process, g_processes);
    const std::string shape = std::to_string(g_processes) + " processes x " + std::to_string(g_locals) + (g_locals == 1 ? " thread" : " threads");
    if (g_process == 0) std::printf("process communicators: %s\n", shape.c_str());

    for (int r = 0; r < g_locals; ++r)
      if (grad[size_t(r)]->rank() != global_rank(r) || grad[size_t(r)]->size() != world_size())
        fail("local rank " + std::to_string(r) + " is rank " + std::to_string(grad[size_t(r)]->rank()) + " of " +
             std::to_string(grad[size_t(r)]->size()));
    ok &= report("global ranks are process * " + std::to_string(g_locals) + " + local rank, size " + std::to_string(world_size()));
    check_all_reduce_sum(grad, ctxs);
    ok &= report("all_reduce_sum: exact sums of 1001 floats, 300007 float sums close to float64 and identical on every rank");
    std::vector<int> roots = {world_size() - 1};
    if (world_size() > 2) roots.push_back(1);
    for (int root : roots) {
      check_broadcast(grad, ctxs, root);
      ok &= report("broadcast of 1001 floats from global rank " + std::to_string(root));
    }
    check_all_reduce_host(grad);
    ok &= report("all_reduce_host of 4 doubles");
    check_barrier(grad);
    ok &= report("barrier: nobody leaves before the last rank (300 ms late) entered");
    check_two_groups(grad, ctl, ctxs);
    ok &= report("two groups at once from two threads per rank (100 sums | host sums, broadcasts, barriers)");
    check_bucket_reducer(grad, ctxs);
    ok &= report("bucket reducer (worker threads, then MPI between processes): exact sums, identical inexact sums, 5 steps, a late process counted as skew");
    Comms spare = make_process_communicators(devices, raw, g_process, g_processes);
    check_bad_root(spare, ctxs);
    ok &= report("broadcast from a root out of range: CommError on every rank");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "process_comm_test: process %d: %s\n", g_process, e.what());
    mpi::abort(3);
  }
  mpi::finalize();
  return ok ? 0 : 1;
}
