// cuBLAS entry points forwarded to libcublas loaded with dlopen on first use (cublas_loader.h).
// Each definition below has the exact signature of its declaration in <cublas_v2.h>, which the
// compiler checks; an entry point missing from the library answers CUBLAS_STATUS_NOT_INITIALIZED.
#include "core/ops/cuda/cublas_loader.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#ifndef TRAINER_CUDA_LIBDIR
#define TRAINER_CUDA_LIBDIR ""
#endif

namespace trainer::cuda {
namespace {

#define TRAINER_STR2(x) #x
#define TRAINER_STR(x) TRAINER_STR2(x)

struct Library {
  void* handle = nullptr;
  std::string error;
};

Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string name = "libcublas.so." TRAINER_STR(CUBLAS_VER_MAJOR);
    lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle && *TRAINER_CUDA_LIBDIR) {
      const char* first = dlerror();
      std::string why = first ? first : name;
      lib.handle = dlopen((std::string(TRAINER_CUDA_LIBDIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib.handle) lib.error = why;
    } else if (!lib.handle) {
      const char* e = dlerror();
      lib.error = e ? e : "cannot load " + name;
    }
  });
  return lib;
}

void* symbol(const char* name) {
  Library& lib = library();
  return lib.handle ? dlsym(lib.handle, name) : nullptr;
}

}  // namespace

const char* cublas_load_error() {
  Library& lib = library();
  return lib.handle ? nullptr : lib.error.c_str();
}

}  // namespace trainer::cuda

// One forwarding definition per entry point: resolved once, then a plain indirect call.
// `type` is the entry point's function type (spelled out where the header overloads the name).
#define TRAINER_CUBLAS_FORWARD_T(type, name, ...)                                   \
  static const auto fn = reinterpret_cast<type*>(trainer::cuda::symbol(#name));    \
  if (!fn) return CUBLAS_STATUS_NOT_INITIALIZED;                                  \
  return fn(__VA_ARGS__)
#define TRAINER_CUBLAS_FORWARD(name, ...) TRAINER_CUBLAS_FORWARD_T(decltype(name), name, __VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) { TRAINER_CUBLAS_FORWARD(cublasCreate_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { TRAINER_CUBLAS_FORWARD(cublasDestroy_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  TRAINER_CUBLAS_FORWARD(cublasSetStream_v2, handle, streamId);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  TRAINER_CUBLAS_FORWARD(cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  TRAINER_CUBLAS_FORWARD(cublasGetPointerMode_v2, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                           int n, int k, const float* alpha, const float* A, int lda, const float* B,
                                           int ldb, const float* beta, float* C, int ldc) {
  TRAINER_CUBLAS_FORWARD(cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                         int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                         const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  using GemmEx = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                                 cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                                 cublasComputeType_t, cublasGemmAlgo_t);
  TRAINER_CUBLAS_FORWARD_T(GemmEx, cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
                           C, Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                      const float* A, int lda, long long int strideA, const float* B,
                                                      int ldb, long long int strideB, const float* beta, float* C, int ldc,
                                                      long long int strideC, int batchCount) {
  TRAINER_CUBLAS_FORWARD(cublasSgemmStridedBatched, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                         strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                       const void* A, cudaDataType Atype, int lda, long long int strideA,
                                                       const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                                       const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                       long long int strideC, int batchCount,
                                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using Strided = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                 const void*, cudaDataType, int, long long int, const void*, cudaDataType, int, long long int,
                                 const void*, void*, cudaDataType, int, long long int, int, cublasComputeType_t,
                                 cublasGemmAlgo_t);
  TRAINER_CUBLAS_FORWARD_T(Strided, cublasGemmStridedBatchedEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                           strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

// Messages must work even when the library could not be loaded.
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto fn = reinterpret_cast<decltype(&cublasGetStatusString)>(trainer::cuda::symbol("cublasGetStatusString"));
  if (fn) return fn(status);
  return status == CUBLAS_STATUS_NOT_INITIALIZED ? "cuBLAS not initialized (libcublas could not be loaded)" : "cuBLAS error";
}

}  // extern "C"
