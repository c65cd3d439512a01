// A pipeline's training step as its stages' fixed programs (CUDA graphs where the stages record):
// when it can run so, and the step run on every stage's thread.
#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "core/runtime/device_parallel/pipeline_copy.h"

namespace trainer {

bool PipelineCopy::program_ok() const {
  if (!cuda_graphs_ || inject_ || timing_ || (!tied_.empty() && update_.rule().clip != StepRule::None) ||
      size_t(microbatches_) * sizeof(StepMemory) > OpContext::kReadBackBytes)
    return false;
  for (const Boundary& bd : bounds_)
    if (bd.staged) return false;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const OpContext& ctx = stages_[s]->context();
    if (!(ctx.can_capture() || fixed_anywhere_) || stages_[s]->graph().profiling()) return false;
    // Hybrid: the sums over the copies (and sync_bn's statistics, on the same communicator) inside
    // the program where a capture records them (NCCL; one GPU listed for every copy); as called on
    // CPU stages (MPI's between processes too). The configuration's, so alike on every copy.
    if (!stage_comms_.empty() && ctx.can_capture() && !stage_comms_[s]->records()) return false;
  }
  return true;
}

size_t PipelineCopy::slot_count() const {
  size_t n = tie_slots();
  for (const auto& copies : tied_) n += copies.size();
  return n;
}

// Each stage's part in summing the shared layers' copies: its buffers (made once, on the holders'
// threads, outside any recording) and the others' places for its copy.
std::vector<std::vector<StageTie>> PipelineCopy::stage_ties() {
  std::vector<std::vector<StageTie>> out(stages_.size());
  if (tied_.empty()) return out;
  if (tied_gathered_.empty()) {
    tied_gathered_.resize(tied_.size());
    for (size_t t = 0; t < tied_.size(); ++t) tied_gathered_[t].resize(tied_[t].size());
    threads_->run_all([&](int st) {
      for (size_t t = 0; t < tied_.size(); ++t)
        for (size_t h = 0; h < tied_[t].size(); ++h) {
          if (tied_[t][h].first != st) continue;
          const Shape shape = stages_[size_t(st)]->params().grad_view(tied_[t][h].second).shape();
          for (size_t c = 0; c < tied_[t].size(); ++c)
            tied_gathered_[t][h].push_back(stages_[size_t(st)]->context().empty(shape));
        }
    });
  }
  size_t slot = tie_slots();
  for (size_t t = 0; t < tied_.size(); ++t) {
    const auto& copies = tied_[t];
    for (size_t h = 0; h < copies.size(); ++h) {
      StageTie tie;
      tie.entry = copies[h].second;
      tie.self = int(h);
      tie.gathered = tied_gathered_[t][h];
      for (size_t c = 0; c < copies.size(); ++c) {
        tie.into.push_back(tied_gathered_[t][c][h].data());
        tie.contexts.push_back(&stages_[size_t(copies[c].first)]->context());
      }
      tie.slot = slot;
      out[size_t(copies[h].first)].push_back(std::move(tie));
    }
    slot += copies.size();
  }
  return out;
}

// Every stage runs its program at once on its thread; a stage records or replays on its own (a
// replay posts and waits at the boundaries as a launched pass does, so stages may differ in how
// they run a step). The host's optimizer counts move inside (StageRuntime::run_program).
bool PipelineCopy::fixed_step(const Batch& b, float lr, uint64_t seed, float inv_scored, Grads g, StepStats& s) {
  replayed_ = false;
  if (!program_ok()) return false;
  const std::vector<MicroBatch> mbs = micro_batches(b, microbatches_);
  StageStep p;
  p.mbs = &mbs;
  p.lr = lr;
  p.inv_scored = inv_scored;
  p.seed = seed;
  p.updates = g == Grads::Reduce || g == Grads::AddHeld;
  p.hold_first = g == Grads::HoldFirst;
  p.add_held = g == Grads::AddHeld;
  p.record = !fixed_anywhere_ || stages_[0]->context().can_capture();
  p.generation = generation_;
  p.kind = int(g);
  const int S = int(stages_.size());
  // Loss scaling and clipping: decided inside the programs from every stage's measure (gathered in
  // each stage's memory, made outside any recording), the host following once the step is read.
  const bool decide = update_.whole_gradient();
  if (decide) {
    p.rule = update_.rule();
    p.moves = update_.state_rule();
    p.scale = update_.scaler().scale();
    p.good_steps = update_.scaler().good_steps();
    if (checks_.empty()) {
      checks_.resize(size_t(S));
      threads_->run_all([&](int st) {
        checks_[size_t(st)] = stages_[size_t(st)]->context().empty(Shape{int64_t(size_t(S) * sizeof(StepCheck))}, DType::U8);
      });
    }
    for (int st = 0; st < S; ++st) {
      p.checks.push_back(static_cast<StepCheck*>(checks_[size_t(st)].data()));
      p.contexts.push_back(&stages_[size_t(st)]->context());
    }
    p.check_slots = check_slots();
  }
  const std::vector<std::vector<StageTie>> ties = stage_ties();
  std::vector<LossStats> per(static_cast<size_t>(S));
  std::vector<char> replayed(static_cast<size_t>(S));
  threads_->run_all([&](int st) {
    StageStep mine = p;
    mine.self = st;
    if (!stage_comms_.empty()) mine.comm = stage_comms_[size_t(st)];
    mine.ties = ties[size_t(st)];
    if (accumulate_ > 1) mine.held = held_grads_[size_t(st)].get();
    else if (!p.updates || p.add_held) throw std::logic_error("pipeline program: a held micro-batch without train.accumulate");
    per[size_t(st)] = stages_[size_t(st)]->run_program(mine, bounds_, box_, microbatches_);
    replayed[size_t(st)] = stages_[size_t(st)]->replayed() ? 1 : 0;
  });
  ++program_steps_;
  if (p.updates && !stage_comms_.empty()) ++reduced_steps_;
  replayed_ = true;
  for (char r : replayed) replayed_ = replayed_ && r != 0;
  if (decide && p.updates) {
    // Every stage decided from the same measures in the same order: the same decision, which the
    // host's scaler, norm and optimizers' counts follow (a skipped step leaves the counts as they were).
    const StepCheck& c = stages_[0]->last_check();
    for (int st = 1; st < S; ++st) {
      const StepCheck& o = stages_[size_t(st)]->last_check();
      if (o.finite != c.finite || std::memcmp(&o.sum_squares, &c.sum_squares, sizeof(double)) != 0)  // NaN too
        throw std::logic_error(fmt::format("pipeline program: stage {} decided the step from other measures than stage 0", st));
    }
    if (!update_.settle(c))
      for (UpdatePart& part : update_parts_) part.optimizer->set_steps(part.optimizer->steps() - 1);
  }
  // train.ema: each stage's average knows the count its program left (what update() averages at).
  if (p.updates && stages_[0]->average())
    for (const auto& st : stages_) st->average()->followed(st->optimizer().steps());
  LossStats total;
  for (const LossStats& one : per) total += one;
  s = StepStats(total);
  return true;
}

}  // namespace trainer
