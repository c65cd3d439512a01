// Error classes to exit codes and lines; aborting a multi-process job.
#include "core/runtime/failure.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/data/dataset.h"
#include "core/dist/agreement.h"
#include "core/dist/launch.h"
#include "core/dist/mpi_world.h"
#include "core/io/config.h"
#include "core/io/file.h"
#include "core/io/printable.h"
#include "core/ops/context.h"

namespace trainer {

namespace {

Failure classify(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const DisagreementError& x) {
    return {x.code(), x.what(), true};
  } catch (const cfg::ConfigError& x) {
    return {kExitUsage, x.what()};
  } catch (const FileError& x) {  // unreadable/corrupt checkpoint, unwritable run directory, disk full
    return {kExitData, fmt::format("file error: {}", x.what())};
  } catch (const DataError& x) {
    return {kExitData, fmt::format("data error: {}", x.what())};
  } catch (const DeviceError& x) {
    return {kExitDevice, fmt::format("device error: {}", x.what())};
  } catch (const std::exception& x) {
    return {kExitInternal, fmt::format("error: {}", x.what())};
  } catch (...) {
    return {kExitInternal, "error: unknown exception"};
  }
}

}  // namespace

// One line whatever the message holds: a file name with a newline, a quote, bytes that are not UTF-8.
Failure describe_failure(std::exception_ptr e) {
  Failure f = classify(std::move(e));
  f.line = printable(f.line);
  return f;
}

void report(const Failure& f) {
  const Launch& p = this_process();
  if (p.multi())
    std::fprintf(stderr, "process %d/%d: %s\n", p.rank, p.size, f.line.c_str());
  else
    std::fprintf(stderr, "%s\n", f.line.c_str());
  std::fflush(stderr);
}

void abort_job(const Failure& f) {
  report(f);
  if (mpi::initialized()) mpi::abort(f.code);
  std::_Exit(f.code);
}

}  // namespace trainer
