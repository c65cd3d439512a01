// CUDA graphs for CudaContext: stream capture of a step's work, instantiation, replay.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"

namespace trainer {
namespace {

// One instantiated graph and the stream it replays on.
class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(cudaGraph_t g, cudaGraphExec_t e, cudaStream_t s) : graph_(g), exec_(e), stream_(s) {}
  ~CudaGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    cudaGetLastError();  // a destructor must not throw; leave no error behind
  }
  void replay() override { CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

void CudaContext::begin_capture() {
  if (capturing_) throw std::logic_error(device().str() + ": begin_capture while capturing");
  // Thread-local mode: other threads (another replica's, the loader's) may use CUDA meanwhile;
  // this thread may not call unsafe APIs (cudaMalloc) while it captures.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  alloc_->set_capturing(true);
}

std::unique_ptr<CapturedWork> CudaContext::end_capture() {
  if (!capturing_) throw std::logic_error(device().str() + ": end_capture without begin_capture");
  capturing_ = false;
  alloc_->set_capturing(false);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph);
    cuda_fail("cudaGraphInstantiate(&exec, graph, 0)", cudaGetErrorString(e), __FILE__, __LINE__);
  }
  return std::make_unique<CudaGraph>(graph, exec, stream_);
}

void CudaContext::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  alloc_->set_capturing(false);
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // an invalidated capture reports its error here: the caller rethrows its own
}

}  // namespace trainer
