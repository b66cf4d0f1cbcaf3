#include "pipeline/executor.hpp"

#include <sstream>

#include "core/error.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

PipelineExecutor::PipelineExecutor(std::vector<Stage<float>*> chunks, const Placement& placement, Communicator& pipe,
                                   Tracer& tracer, bool split)
    : chunks_(std::move(chunks)), placement_(placement), rank_(pipe.rank()), p2p_(pipe, placement), tracer_(tracer),
      split_(split),
      slots_(p2p_, [this](int chunk, int B) { return stage(chunk).make_activations(B, split_); }),
      messages_("pipeline_message", 2 * placement.ranks * placement.chunks) {
  if (int(chunks_.size()) != placement_.chunks) fail("PipelineExecutor: ", chunks_.size(), " stages for ", placement_.chunks, " chunks");
}

Buffer<float> PipelineExecutor::buffer(size_t n) {
  recycle();
  // None free: the oldest message still on its way, once sent (a stream dependency) -- one of an
  // earlier group (this group's are not issued until it ends; and no group is open: nothing may be
  // waited for inside one, NCCL's rule).
  return messages_.take(n, [this] {
    if (sealed_ == 0) return false;
    --sealed_;
    // (on MPI a send completes once the peer's MPI calls progress it: traced, it is easily a pass)
    Tracer::Scope t(tracer_, EventKind::send_wait, step_, -1, 0);
    p2p_.order_after(outgoing_.front().send);
    messages_.give(std::move(outgoing_.front().buf));
    outgoing_.erase(outgoing_.begin());
    return true;
  });
}

// Only earlier groups' messages: one of the group being issued is not launched yet.
void PipelineExecutor::recycle() {
  for (size_t i = 0; i < sealed_;)
    if (p2p_.test(outgoing_[i].send)) {
      messages_.give(std::move(outgoing_[i].buf));
      outgoing_.erase(outgoing_.begin() + long(i));
      --sealed_;
    } else {
      ++i;
    }
}

void PipelineExecutor::drain() {
  slots_.drain();
  for (Outgoing& o : outgoing_) {
    p2p_.order_after(o.send);
    messages_.give(std::move(o.buf));
  }
  outgoing_.clear();
  sealed_ = 0;
}

Buffer<float> PipelineExecutor::taken(size_t n) {
  if (ready_.empty() || ready_.back().extent(0) != n)
    fail("pipeline: a run of messages needs more buffers than were taken before its group began");
  Buffer<float> b = std::move(ready_.back());
  ready_.pop_back();
  return b;
}

PipelineExecutor::Incoming* PipelineExecutor::expect(bool grad, int mb, int chunk, size_t elems, size_t action) {
  const PipelineP2P::Peer from = grad ? p2p_.next(chunk) : p2p_.prev(chunk);
  if (from.rank == rank_) return nullptr;  // handed over locally: already in the inbox
  Incoming& in = incoming_[{grad, mb, chunk}] = Incoming{{}, taken(elems), action};
  return &in;
}

void PipelineExecutor::receive(bool grad, int mb, int chunk, size_t elems, size_t action) {
  if (Incoming* in = expect(grad, mb, chunk, elems, action))
    in->handle = grad ? p2p_.recv_backward(in->buf.data(), elems, mb, chunk) : p2p_.recv_forward(in->buf.data(), elems, mb, chunk);
}

bool PipelineExecutor::hand_over(bool grad, int mb, int chunk, const float* data, size_t elems) {
  const PipelineP2P::Peer to = grad ? p2p_.prev(chunk) : p2p_.next(chunk);
  if (to.rank != rank_) return false;
  Buffer<float> b = taken(elems);
  Kokkos::deep_copy(ExecSpace(), b, Vec<float>(const_cast<float*>(data), elems));
  inbox_[{grad, mb, to.chunk}] = std::move(b);
  return true;
}

PipelineExecutor::Outgoing& PipelineExecutor::outgoing(const float* data, size_t elems) {
  Outgoing o{taken(elems), {}};
  Kokkos::deep_copy(ExecSpace(), o.buf, Vec<float>(const_cast<float*>(data), elems));
  outgoing_.push_back(std::move(o));
  return outgoing_.back();
}

void PipelineExecutor::take(bool grad, int mb, int chunk, float* dst, size_t elems, const StepIO& io) {
  if (auto p = incoming_.find({grad, mb, chunk}); p != incoming_.end()) {  // posted: wait for it now
    Incoming& in = p->second;
    {
      const WaitContext context([&] { return describe((*io_actions_)[in.action], in.action, io_actions_->size(), io); });
      Tracer::Scope t(tracer_, EventKind::recv, io.step, mb, elems * sizeof(float), chunk);
      p2p_.order_after(in.handle);
    }
    inbox_[{grad, mb, chunk}] = std::move(in.buf);
    incoming_.erase(p);
  }
  auto it = inbox_.find({grad, mb, chunk});
  if (it == inbox_.end())
    fail("pipeline: the ", grad ? "gradient" : "activation", " of microbatch ", mb, " for chunk ", chunk,
         " is used before it was received");
  Kokkos::deep_copy(ExecSpace(), Vec<float>(dst, elems), Vec<float>(it->second.data(), elems));
  messages_.give(std::move(it->second));
  inbox_.erase(it);
}

void PipelineExecutor::communicate(const std::vector<Action>& actions, size_t first, size_t last, const StepIO& io,
                                   size_t elems) {
  const int B = io.microbatch_size;
  sealed_ = outgoing_.size();
  // Every buffer the run needs, before its group: taking one may reclaim an earlier message's, which
  // orders the stream after that send -- a wait, not allowed inside a group.
  int need = 0;
  for (size_t i = first; i < last; ++i) need += buffers_for(actions[i]).takes;
  for (int k = 0; k < need; ++k) ready_.push_back(buffer(elems));
  p2p_.begin_group();  // the run's messages start together (NCCL: one group)
  for (size_t i = first; i < last; ++i) {
    const Action& a = actions[i];
    const size_t bytes = elems * sizeof(float);
    switch (a.kind) {
      case ActionKind::recv_activation: receive(false, a.mb, a.chunk, elems, i); break;
      case ActionKind::recv_grad: receive(true, a.mb, a.chunk, elems, i); break;
      case ActionKind::send_activation: {
        // Sent from the slot itself: it is reused once the send completes. A send never waits here
        // (the proof assumes it): a rank waiting for its send to be matched while the receiver waits
        // for that rank's own message deadlocks (interleaved evaluation did).
        Slot& s = slots_.at(a.mb, a.chunk);
        if (!hand_over(false, a.mb, a.chunk, s.act->output().data(), elems)) {
          Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes, a.chunk);
          s.send = p2p_.send_forward(s.act->output().data(), elems, a.mb, a.chunk);
        }
        if (!io.need_grad) slots_.release(a.mb, a.chunk);  // evaluation: nothing more to do with it
        break;
      }
      case ActionKind::send_grad: {
        const float* dx = stage(a.chunk).dres(B).data();  // reused by the next backward: sent from a copy
        if (hand_over(true, a.mb, a.chunk, dx, elems)) break;
        Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes, a.chunk);
        Outgoing& o = outgoing(dx, elems);
        o.send = p2p_.send_backward(o.buf.data(), elems, a.mb, a.chunk);
        break;
      }
      // The paired exchanges of a steady state: both messages with the same other rank.
      case ActionKind::send_activation_recv_grad: {
        Slot& s = slots_.at(a.mb, a.chunk);
        Incoming* in = expect(true, a.recv_mb, a.recv_chunk, elems, i);
        Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes, a.chunk);
        auto pair = p2p_.exchange_with_next(s.act->output().data(), a.mb, a.chunk, in->buf.data(), a.recv_mb,
                                                    a.recv_chunk, elems);
        s.send = pair.send, in->handle = pair.recv;
        break;
      }
      case ActionKind::send_grad_recv_activation: {
        Incoming* in = expect(false, a.recv_mb, a.recv_chunk, elems, i);
        Outgoing& o = outgoing(stage(a.chunk).dres(B).data(), elems);
        Tracer::Scope t(tracer_, EventKind::send, io.step, a.mb, bytes, a.chunk);
        auto pair = p2p_.exchange_with_previous(o.buf.data(), a.mb, a.chunk, in->buf.data(), a.recv_mb,
                                                    a.recv_chunk, elems);
        o.send = pair.send, in->handle = pair.recv;
        break;
      }
      default: fail("pipeline: ", action_name(a.kind), " is not a message");
    }
  }
  p2p_.end_group();
  sealed_ = outgoing_.size();
  if (!ready_.empty()) fail("pipeline: ", ready_.size(), " message buffers taken for a run were not used");
}

// For the watchdog: the pass this rank is in and, for a message, the peer and what it waits for (the
// trainer's own context names the step).
std::string PipelineExecutor::describe(const Action& a, size_t index, size_t count, const StepIO& io) const {
  std::ostringstream os;
  os << "pipeline rank " << rank_ << " pass " << index + 1 << " of " << count << ": " << action_name(a.kind)
     << " microbatch " << a.mb << " of virtual stage " << placement_.stage(rank_, a.chunk);
  const bool paired = a.kind == ActionKind::send_activation_recv_grad || a.kind == ActionKind::send_grad_recv_activation;
  const bool recv_grad = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
  if (paired || a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad) {
    const int chunk = paired ? a.recv_chunk : a.chunk, mb = paired ? a.recv_mb : a.mb;
    const PipelineP2P::Peer from = recv_grad ? p2p_.next(chunk) : p2p_.prev(chunk);
    os << "; waits for the " << (recv_grad ? "gradient" : "activation") << " of microbatch " << mb << " from virtual stage "
       << from.stage << " on pipeline rank " << from.rank << " (world rank " << p2p_.world_rank(from.rank)
       << ")";
  } else if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad) {
    const PipelineP2P::Peer to = a.kind == ActionKind::send_grad ? p2p_.prev(a.chunk) : p2p_.next(a.chunk);
    os << " to pipeline rank " << to.rank << " (world rank " << p2p_.world_rank(to.rank) << ")";
  }
  return os.str();
}

void PipelineExecutor::run(const std::vector<Action>& actions, const StepIO& io) {
  const int B = io.microbatch_size, S = placement_.stages();
  const Stage<float>& any = *chunks_.front();
  // Losses cover every token; activations and their gradients the rows of the residual stream this
  // rank holds (1/tp of them with sequence parallelism).
  const size_t rows = size_t(B) * any.seq_len(), elems = size_t(any.stream_rows(B)) * any.config().n_embd;
  io_actions_ = &actions;
  step_ = io.step;
  for (size_t index = 0; index < actions.size(); ++index) {
    const Action& a = actions[index];
    if (!is_compute(a.kind)) {  // the run of messages up to the next compute
      size_t last = index;
      while (last < actions.size() && !is_compute(actions[last].kind)) ++last;
      communicate(actions, index, last, io, elems);
      index = last - 1;
      continue;
    }
    const WaitContext context([&] { return describe(a, index, actions.size(), io); });
    const int k = placement_.stage(rank_, a.chunk);
    Stage<float>& st = stage(a.chunk);
    switch (a.kind) {
      case ActionKind::forward: {
        Slot& s = slots_.acquire(a.mb, a.chunk, B);
        if (k > 0) take(false, a.mb, a.chunk, s.act->input.data(), elems, io);
        if (io.load && (st.has_embedding() || st.has_head() || st.document_masks())) {
          Tracer::Scope t(tracer_, EventKind::data, io.step, a.mb, 0, a.chunk);
          io.load(a.mb, *s.act);
        }
        {
          // Evaluation forwards are traced as `eval` so a step's forward count stays the schedule's.
          Tracer::Scope t(tracer_, io.need_grad ? EventKind::forward : EventKind::eval, io.step, a.mb, 0, a.chunk,
                          a.pair);
          Vec<float> losses = st.has_head() ? Vec<float>(io.losses.data() + a.mb * rows, rows) : Vec<float>();
          st.forward(*s.act, losses, io.need_grad, io.dloss);
        }
        if (!io.need_grad && k == S - 1) slots_.release(a.mb, a.chunk);  // evaluation: nothing more to do with it
        break;
      }
      case ActionKind::backward:
      case ActionKind::backward_input: {
        Slot& s = slots_.at(a.mb, a.chunk);  // (its activation may still be on its way: backward does not touch it)
        if (k < S - 1) take(true, a.mb, a.chunk, st.dres(B).data(), elems, io);
        Tracer::Scope t(tracer_, EventKind::backward, io.step, a.mb, 0, a.chunk, a.pair);
        if (a.kind == ActionKind::backward) {
          st.backward(*s.act);
          slots_.release(a.mb, a.chunk);  // the input gradient it leaves in dres is all that is still needed
        } else {
          st.backward_input(*s.act);  // the slot stays for the weight pass
        }
        break;
      }
      default: {  // the weight pass
        Tracer::Scope t(tracer_, EventKind::backward_weight, io.step, a.mb, 0, a.chunk);
        st.backward_weight(*slots_.at(a.mb, a.chunk).act);
        slots_.release(a.mb, a.chunk);
        break;
      }
    }
  }
  if (slots_.sending() || !outgoing_.empty()) {
    const WaitContext context([] { return std::string("the pipeline's last sends to be received"); });
    Tracer::Scope t(tracer_, EventKind::send_wait, io.step, -1);
    drain();
  }
  if (slots_.held()) fail("pipeline: ", slots_.held(), " microbatch-chunks still held at the end of a step");
  if (!inbox_.empty() || !incoming_.empty())
    fail("pipeline: ", inbox_.size() + incoming_.size(), " received messages were never used");
}

}  // namespace gpt2
