// cuBLAS loaded on first use: the few cuBLAS entry points the CUDA ops call, resolved from
// libcublas at the first CudaContext, so that a process that never touches a GPU does not pay
// cuBLAS's load-time initialisation (~0.5 s and ~200 MiB, mostly libcublasLt's tables).
#pragma once

namespace trainer::cuda {

// Loads libcublas.so.<major> (the loader's search path, then the toolkit's library folder this
// build saw); null when loaded, else why not (dlerror's words). Thread-safe; tried once.
const char* cublas_load_error();

}  // namespace trainer::cuda
