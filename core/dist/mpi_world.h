// mpi:: the processes of a run (mpirun) as MPI_COMM_WORLD: init, rank, size, abort, world-wide collectives.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace trainer::mpi {

// Without MPI in the build (TRAINER_MPI=OFF, or no MPI found), or before init, a process is a world
// of one: init and finalize do nothing (without MPI), rank() is 0 and size() 1, the collectives
// return their argument, and broadcast_bytes from a root other than 0 throws CommError.
//
// Threads: init, finalize, allgather, broadcast_bytes and allreduce_max use MPI_COMM_WORLD and
// belong to one thread (the main thread, before and after training); the communicators of
// core/dist/process_comm.h use their own duplicates of it, from any thread (MPI_THREAD_MULTIPLE).
// MPI errors throw CommError with MPI's message (the world's error handler is MPI_ERRORS_RETURN).

bool built();  // compiled with MPI
// MPI_Init_thread(MPI_THREAD_MULTIPLE); CommError if the library cannot give THREAD_MULTIPLE. Safe
// to call once (a second call, or MPI already initialized by the host program, only checks the level).
void init(int* argc, char*** argv);
bool initialized();  // init succeeded and finalize has not run
void finalize();     // MPI_Finalize if initialized
int rank();          // of MPI_COMM_WORLD (0 when not initialized)
int size();          // 1 when not initialized
// Ends every process of the run: MPI_Abort(MPI_COMM_WORLD, code) (std::_Exit(code) without MPI).
[[noreturn]] void abort(int code);
std::vector<std::string> allgather(const std::string& s);  // each process's string in rank order
void broadcast_bytes(void* data, size_t bytes, int root);   // over MPI_COMM_WORLD
double allreduce_max(double v);

// "<call>: <MPI's message for code>" (for CommErrors raised by MPI callers in core/dist).
std::string error_message(const char* call, int code);

}  // namespace trainer::mpi
