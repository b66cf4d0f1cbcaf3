#include "parallel/pipeline_executor.hpp"

#include "core/error.hpp"

namespace gpt2 {

namespace {
// Activations and gradients of one microbatch have tags of their own (MPI matches on them; NCCL
// matches in issue order, which the schedules keep identical on both sides).
int activation_tag(int mb) { return 2 * mb; }
int grad_tag(int mb) { return 2 * mb + 1; }
}  // namespace

PipelineExecutor::PipelineExecutor(Stage<float>& stage, Communicator& pipe, Tracer& tracer)
    : stage_(stage), index_(pipe.rank()), pipe_(pipe), tracer_(tracer) {}

PipelineExecutor::Slot& PipelineExecutor::acquire(int mb, int B) {
  auto it = live_.find(mb);
  if (it != live_.end()) return it->second;
  if (B != pool_B_) pool_.clear(), pool_B_ = B;
  for (size_t i = 0; i < releasing_.size();) {  // reuse slots whose sends have completed
    if (pipe_.test(releasing_[i].send)) {
      pool_.push_back(std::move(releasing_[i].act));
      releasing_.erase(releasing_.begin() + long(i));
    } else {
      ++i;
    }
  }
  Slot s;
  if (!pool_.empty()) {
    s.act = std::move(pool_.back());
    pool_.pop_back();
  } else {
    s.act = std::make_unique<Activations<float>>(stage_.make_activations(B));
    slot_bytes_ = s.act->bytes();
  }
  Slot& out = live_[mb] = std::move(s);
  peak_slots_ = std::max(peak_slots_, int(live_.size() + releasing_.size()));
  return out;
}

void PipelineExecutor::release(int mb) {
  auto it = live_.find(mb);
  if (it == live_.end()) fail("pipeline: microbatch ", mb, " released twice");
  if (it->second.send.pending()) releasing_.push_back(std::move(it->second));
  else if (it->second.act->B == pool_B_) pool_.push_back(std::move(it->second.act));
  live_.erase(it);
}

Buffer<float> PipelineExecutor::grad_buffer(size_t n) {
  for (size_t i = 0; i < grad_sends_.size(); ++i)
    if (pipe_.test(grad_sends_[i].send)) {
      grad_pool_.push_back(std::move(grad_sends_[i].buf));
      grad_sends_.erase(grad_sends_.begin() + long(i));
      break;
    }
  while (!grad_pool_.empty()) {
    Buffer<float> b = std::move(grad_pool_.back());
    grad_pool_.pop_back();
    if (b.extent(0) == n) return b;
  }
  return Buffer<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "grad_send"), n);
}

void PipelineExecutor::drain() {
  for (Slot& s : releasing_) {
    pipe_.wait(s.send);
    if (s.act->B == pool_B_) pool_.push_back(std::move(s.act));
  }
  releasing_.clear();
  for (GradSend& g : grad_sends_) {
    pipe_.wait(g.send);
    grad_pool_.push_back(std::move(g.buf));
  }
  grad_sends_.clear();
}

void PipelineExecutor::exchange(const float* send, float* recv, size_t elems, int peer, int send_tag,
                                int recv_tag, int step, int send_mb, int recv_mb) {
  Request r;
  {
    Tracer::Scope t(tracer_, EventKind::send, step, send_mb, elems * sizeof(float));
    r = pipe_.isendrecv(send, elems, peer, send_tag, recv, elems, peer, recv_tag, DType::f32);
  }
  Tracer::Scope t(tracer_, EventKind::recv, step, recv_mb, elems * sizeof(float));
  pipe_.wait(r);
}

void PipelineExecutor::run(const std::vector<Action>& actions, const StepIO& io) {
  const int B = io.microbatch_size;
  // Losses cover every token; activations and their gradients the rows of the residual stream this
  // rank holds (1/tp of them with sequence parallelism).
  const size_t rows = size_t(B) * stage_.seq_len(), elems = size_t(stage_.stream_rows(B)) * stage_.config().n_embd;
  const size_t bytes = elems * sizeof(float);
  const bool head = stage_.has_head();
  const int next = index_ + 1, prev = index_ - 1;

  for (size_t i = 0; i < actions.size(); ++i) {
    const Action a = actions[i];
    switch (a.kind) {
      case ActionKind::recv_activation: {
        Slot& s = acquire(a.mb, B);
        Tracer::Scope t(tracer_, EventKind::recv, io.step, a.mb, bytes);
        pipe_.recv(s.act->input.data(), elems, DType::f32, prev, activation_tag(a.mb));
        break;
      }
      case ActionKind::forward: {
        Slot& s = acquire(a.mb, B);
        if (io.load && (stage_.has_embedding() || head)) {
          Tracer::Scope t(tracer_, EventKind::data, io.step, a.mb);
          io.load(a.mb, *s.act);
        }
        {
          // Evaluation forwards are traced as `eval` so a step's forward count stays the schedule's.
          Tracer::Scope t(tracer_, io.need_grad ? EventKind::forward : EventKind::eval, io.step, a.mb);
          Vec<float> losses = head ? Vec<float>(io.losses.data() + a.mb * rows, rows) : Vec<float>();
          stage_.forward(*s.act, losses, io.need_grad, io.dloss);
        }
        if (!io.need_grad && head) release(a.mb);  // evaluation: nothing more to do with it
        break;
      }
      case ActionKind::send_activation: {
        Slot& s = live_.at(a.mb);
        {
          Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes);
          s.send = pipe_.isend(s.act->output().data(), elems, DType::f32, next, activation_tag(a.mb));
        }
        if (!io.need_grad) {  // evaluation: hand the slot on once the next stage has the data,
          Tracer::Scope w(tracer_, EventKind::send_wait, io.step, a.mb);  // so one or two suffice
          pipe_.wait(s.send);
          release(a.mb);
        }
        break;
      }
      case ActionKind::recv_grad: {
        Tracer::Scope t(tracer_, EventKind::recv, io.step, a.mb, bytes);
        pipe_.recv(stage_.dres(B).data(), elems, DType::f32, next, grad_tag(a.mb));
        break;
      }
      case ActionKind::backward: {
        Slot& s = live_.at(a.mb);
        if (s.send.pending()) {  // the activation went out long ago
          Tracer::Scope t(tracer_, EventKind::send_wait, io.step, a.mb);
          pipe_.wait(s.send);
        }
        {
          Tracer::Scope t(tracer_, EventKind::backward, io.step, a.mb);
          stage_.backward(*s.act);
        }
        release(a.mb);  // the input gradient it leaves in dres is all that is still needed
        break;
      }
      case ActionKind::send_grad: {
        // The stage's gradient buffer is reused by the next backward: send from a copy.
        Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes);
        GradSend g{grad_buffer(elems), Request{}};
        Kokkos::deep_copy(g.buf, Vec<float>(stage_.dres(B).data(), elems));
        g.send = pipe_.isend(g.buf.data(), elems, DType::f32, prev, grad_tag(a.mb));
        grad_sends_.push_back(std::move(g));
        break;
      }
      case ActionKind::send_activation_recv_grad: {
        Slot& s = live_.at(a.mb);
        exchange(s.act->output().data(), stage_.dres(B).data(), elems, next, activation_tag(a.mb),
                 grad_tag(a.recv_mb), io.step, a.mb, a.recv_mb);
        break;
      }
      case ActionKind::send_grad_recv_activation: {
        Slot& s = acquire(a.recv_mb, B);
        exchange(stage_.dres(B).data(), s.act->input.data(), elems, prev, grad_tag(a.mb),
                 activation_tag(a.recv_mb), io.step, a.mb, a.recv_mb);
        break;
      }
    }
  }
  if (!releasing_.empty() || !grad_sends_.empty()) {
    Tracer::Scope t(tracer_, EventKind::send_wait, io.step, -1);
    drain();
  }
  if (!live_.empty()) fail("pipeline: ", live_.size(), " microbatches still held at the end of a step");
}

}  // namespace gpt2
