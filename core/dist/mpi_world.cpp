// mpi:: over MPI_COMM_WORLD (with TRAINER_HAVE_MPI), or a world of one process without MPI.
#include "core/dist/mpi_world.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/dist/communicator.h"

#ifdef TRAINER_HAVE_MPI
#include <mpi.h>
#endif

namespace trainer::mpi {

#ifdef TRAINER_HAVE_MPI

namespace {

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw CommError(error_message(call, code));
}

const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown level";
  }
}

}  // namespace

bool built() { return true; }

void init(int* argc, char*** argv) {
  int started = 0, ended = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (ended) throw CommError("mpi::init: MPI was already finalized in this process (it cannot start twice)");
  int provided = MPI_THREAD_SINGLE;
  if (started) check(MPI_Query_thread(&provided), "MPI_Query_thread");
  else check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_MULTIPLE) {
    if (!started) MPI_Finalize();
    throw CommError(fmt::format(
        "MPI provides only {}, trainer needs MPI_THREAD_MULTIPLE (communication and worker threads call MPI at once): "
        "use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple)",
        level_name(provided)));
  }
  // Errors come back as codes and become CommErrors with MPI's message (duplicates inherit this).
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

bool initialized() {
  int started = 0, ended = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  return started && !ended;
}

void finalize() {
  if (initialized()) check(MPI_Finalize(), "MPI_Finalize");
}

int rank() {
  if (!initialized()) return 0;
  int r = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &r), "MPI_Comm_rank");
  return r;
}

int size() {
  if (!initialized()) return 1;
  int n = 1;
  check(MPI_Comm_size(MPI_COMM_WORLD, &n), "MPI_Comm_size");
  return n;
}

void abort(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::vector<std::string> allgather(const std::string& s) {
  if (!initialized()) return {s};
  if (s.size() > size_t(INT_MAX)) throw CommError(fmt::format("mpi::allgather: a string of {} bytes is too long", s.size()));
  const int n = size();
  const size_t count = size_t(n);
  int len = int(s.size());
  std::vector<int> lens(count), offsets(count);
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  long long total = 0;
  for (int p = 0; p < n; ++p) {
    offsets[size_t(p)] = int(total);
    total += lens[size_t(p)];
    if (total > INT_MAX) throw CommError(fmt::format("mpi::allgather: {} bytes in all is too many", total));
  }
  std::string all(size_t(total), '\0');
  check(MPI_Allgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int p = 0; p < n; ++p) out.push_back(all.substr(size_t(offsets[size_t(p)]), size_t(lens[size_t(p)])));
  return out;
}

void broadcast_bytes(void* data, size_t bytes, int root) {
  if (!initialized()) {
    if (root != 0) throw CommError(fmt::format("mpi::broadcast_bytes: root {} in a world of one process", root));
    return;
  }
  if (root < 0 || root >= size()) throw CommError(fmt::format("mpi::broadcast_bytes: root {} out of 0..{}", root, size() - 1));
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {  // MPI counts are ints
    int n = int(std::min(bytes - done, size_t(INT_MAX)));
    check(MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    done += size_t(n);
  }
}

double allreduce_max(double v) {
  if (!initialized()) return v;
  check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return v;
}

std::string error_message(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("{}: MPI error {}", call, code);
  return fmt::format("{}: {}", call, std::string(text, size_t(len)));
}

#else  // a world of one process

bool built() { return false; }
void init(int*, char***) {}
bool initialized() { return false; }
void finalize() {}
int rank() { return 0; }
int size() { return 1; }

void abort(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

std::vector<std::string> allgather(const std::string& s) { return {s}; }

void broadcast_bytes(void*, size_t, int root) {
  if (root != 0) throw CommError(fmt::format("mpi::broadcast_bytes: root {} in a world of one process (built without MPI)", root));
}

double allreduce_max(double v) { return v; }

std::string error_message(const char* call, int code) { return fmt::format("{}: MPI error {}", call, code); }

#endif

}  // namespace trainer::mpi
