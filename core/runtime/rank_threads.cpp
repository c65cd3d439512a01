// One thread per rank and failure propagation, shared by the data-parallel and hybrid strategies.
#include "core/runtime/rank_threads.h"

#include <fmt/format.h>

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/data/dataset.h"
#include "core/dist/launch.h"
#include "core/io/config.h"
#include "core/io/file.h"
#include "core/ops/context.h"
#include "core/runtime/failure.h"

namespace trainer {

void run_rank_threads(int n, const std::function<void(int)>& body, const std::function<std::string(int)>& name,
                      const std::function<void(const std::string&)>& abort) {
  std::mutex mu;
  std::exception_ptr first;
  int first_rank = -1;
  auto one = [&](int r) {
    try {
      body(r);
    } catch (...) {
      std::string what = "unknown error";
      try {
        throw;
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (first) return;  // a consequence of the first failure (an aborted collective)
        first = std::current_exception();
        first_rank = r;
      }
      if (this_process().multi()) {  // other processes may wait in a collective for this one: end the job now
        Failure f = describe_failure(first);
        if (f.code == kExitInternal)  // as below: any other failure of a rank is a device error
          f = {kExitDevice, fmt::format("device error: {} failed: {}", name(r), what)};
        abort_job(f);
      }
      abort(fmt::format("{} failed: {}", name(r), what));
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(one, r);
  one(0);
  for (std::thread& t : threads) t.join();
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const DataError&) {
    throw;
  } catch (const FileError&) {
    throw;
  } catch (const cfg::ConfigError&) {
    throw;
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& x) {
    if (n == 1) throw;
    throw DeviceError(fmt::format("{} failed: {}", name(first_rank), x.what()));
  }
}

}  // namespace trainer
