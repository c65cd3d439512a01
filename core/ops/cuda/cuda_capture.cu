// CUDA graphs for CudaContext: stream capture of a step's work, in pieces around host steps, instantiation, replay; queue marks, peer access.
#include "core/ops/cuda/cuda_context.h"
#include "core/ops/cuda/cuda_util.cuh"

namespace trainer {
namespace {

// A capture's instantiated pieces and the host steps between them, replayed on one stream: piece
// 0, step 0, piece 1, ... (one piece and no step where the capture had no host step).
class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(std::vector<CudaGraphPiece> pieces, std::vector<std::function<void()>> steps, cudaStream_t s)
      : pieces_(std::move(pieces)), steps_(std::move(steps)), stream_(s) {}
  ~CudaGraph() override {
    for (CudaGraphPiece& p : pieces_) p.destroy();
  }
  void replay() override {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i].exec) {
        HostCallTimer timed(&HostCallTimes::launch_ns);
        CUDA_CHECK(cudaGraphLaunch(pieces_[i].exec, stream_));
      }
      if (i < steps_.size()) steps_[i]();
    }
  }

 private:
  std::vector<CudaGraphPiece> pieces_;
  std::vector<std::function<void()>> steps_;
  cudaStream_t stream_;
};

}  // namespace

void CudaContext::begin_capture() {
  if (capturing_) throw std::logic_error(device().str() + ": begin_capture while capturing");
  // Thread-local mode: other threads (another replica's, the loader's) may use CUDA meanwhile;
  // this thread may not call unsafe APIs (cudaMalloc) while it captures.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = stream_capturing_ = true;
  alloc_->set_capturing(true);
}

void CudaGraphPiece::destroy() noexcept {
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  exec = nullptr;
  graph = nullptr;
  cudaGetLastError();  // never throws; leaves no error behind
}

// Ends the stream's capture as one instantiated piece (none for a piece without work).
CudaGraphPiece CudaContext::end_piece() {
  stream_capturing_ = false;
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  size_t nodes = 0;
  cudaError_t e = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (e == cudaSuccess && nodes == 0) {
    cudaGraphDestroy(graph);
    return {};
  }
  cudaGraphExec_t exec = nullptr;
  // Node priorities kept: a kernel node copies its stream's priority when captured (NCCL's side
  // stream, the highest), which a graph honours only when instantiated with this flag.
  if (e == cudaSuccess) e = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph);
    cuda_fail("cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority)",
              cudaGetErrorString(e), __FILE__, __LINE__);
  }
  return {graph, exec};
}

void CudaContext::drop_pieces() noexcept {
  for (CudaGraphPiece& p : pieces_) p.destroy();
  pieces_.clear();
  steps_.clear();
}

// During a capture: the piece so far ended, the step kept for every replay (not run: it meets other
// threads, marks and waits on queues, which only a replay's queued work needs), the next piece begun.
void CudaContext::host_step(const std::function<void()>& step) {
  if (!capturing_) {
    step();
    return;
  }
  pieces_.push_back(end_piece());
  steps_.push_back(step);
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  stream_capturing_ = true;
}

std::unique_ptr<CapturedWork> CudaContext::end_capture() {
  if (!capturing_) throw std::logic_error(device().str() + ": end_capture without begin_capture");
  try {
    pieces_.push_back(end_piece());
  } catch (...) {
    abort_capture();
    throw;
  }
  capturing_ = false;
  alloc_->set_capturing(false);
  auto work = std::make_unique<CudaGraph>(std::move(pieces_), std::move(steps_), stream_);
  pieces_.clear();
  steps_.clear();
  return work;
}

void CudaContext::abort_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  alloc_->set_capturing(false);
  if (stream_capturing_) {
    stream_capturing_ = false;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  drop_pieces();
  cudaGetLastError();  // an invalidated capture reports its error here: the caller rethrows its own
}

void CudaContext::mark_queue() {
  if (stream_capturing_) throw std::logic_error(device().str() + ": mark_queue inside a capture (a host_step's work)");
  CUDA_CHECK(cudaEventRecord(mark_, stream_));
}

void CudaContext::wait_for_mark(OpContext& other) {
  if (stream_capturing_) throw std::logic_error(device().str() + ": wait_for_mark inside a capture (a host_step's work)");
  if (other.device().kind != DeviceKind::CUDA)
    throw std::logic_error(device().str() + ": wait_for_mark on " + other.device().str());
  CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_context(other).mark_, 0));
}

void CudaContext::reserve_marks(size_t n) {
  if (stream_capturing_) throw std::logic_error(device().str() + ": reserve_marks inside a capture");
  while (marks_.size() < n) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    marks_.push_back(e);
  }
}

void CudaContext::mark_queue_at(size_t k) {
  if (stream_capturing_) throw std::logic_error(device().str() + ": mark_queue_at inside a capture (a host_step's work)");
  if (k >= marks_.size()) throw std::logic_error(device().str() + ": mark " + std::to_string(k) + " not reserved");
  CUDA_CHECK(cudaEventRecord(marks_[k], stream_));
}

void CudaContext::wait_for_mark_at(OpContext& other, size_t k) {
  if (stream_capturing_) throw std::logic_error(device().str() + ": wait_for_mark_at inside a capture (a host_step's work)");
  if (other.device().kind != DeviceKind::CUDA)
    throw std::logic_error(device().str() + ": wait_for_mark_at on " + other.device().str());
  const std::vector<cudaEvent_t>& theirs = cuda_context(other).marks_;
  if (k >= theirs.size()) throw std::logic_error(other.device().str() + ": mark " + std::to_string(k) + " not reserved");
  CUDA_CHECK(cudaStreamWaitEvent(stream_, theirs[k], 0));
}

void CudaContext::enable_peer(OpContext& other) {
  if (other.device().kind != DeviceKind::CUDA || other.device().index == device().index) return;
  int can = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device().index, other.device().index));
  if (!can) return;  // copies between the two go through the host (the driver stages them)
  const cudaError_t e = cudaDeviceEnablePeerAccess(other.device().index, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorTooManyPeers) {
    // Enabled before (another boundary, another copy): not an error. Too many peers: copies
    // between the two go through the host, as where the pair has no peer access.
    cudaGetLastError();
    return;
  }
  CUDA_CHECK(e);
}

}  // namespace trainer
