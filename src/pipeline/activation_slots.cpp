#include "pipeline/activation_slots.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gpt2 {

void ActivationSlots::sized(int B) {
  if (B != B_) pool_.clear(), B_ = B;
}

std::unique_ptr<Activations<float>> ActivationSlots::make(int chunk, int B) {
  auto act = std::make_unique<Activations<float>>(make_(chunk, B));
  bytes_ = std::max(bytes_, act->bytes());
  return act;
}

ActivationSlots::Slot& ActivationSlots::acquire(int mb, int chunk, int B) {
  auto it = live_.find({mb, chunk});
  if (it != live_.end()) return it->second;
  sized(B);
  for (size_t i = 0; i < releasing_.size();) {  // reuse slots whose sends have completed
    if (p2p_.test(releasing_[i].send)) {
      reuse(releasing_[i]);
      releasing_.erase(releasing_.begin() + long(i));
    } else {
      ++i;
    }
  }
  Slot s;
  s.chunk = chunk;
  auto& free = pool_[chunk];
  // None free: the oldest of this chunk whose activation is still being sent, once sent.
  for (size_t i = 0; free.empty() && i < releasing_.size(); ++i)
    if (releasing_[i].chunk == chunk && releasing_[i].act->B == B_) {
      p2p_.order_after(releasing_[i].send);
      reuse(releasing_[i]);
      releasing_.erase(releasing_.begin() + long(i));
    }
  if (!free.empty()) {
    s.act = std::move(free.back());
    free.pop_back();
  } else {
    s.act = make(chunk, B);
  }
  Slot& out = live_[{mb, chunk}] = std::move(s);
  peak_ = std::max(peak_, int(live_.size() + releasing_.size()));
  return out;
}

void ActivationSlots::reuse(Slot& s) {
  if (s.act->B == B_) pool_[s.chunk].push_back(std::move(s.act));
}

void ActivationSlots::release(int mb, int chunk) {
  auto it = live_.find({mb, chunk});
  if (it == live_.end()) fail("pipeline: microbatch ", mb, " of chunk ", chunk, " released twice");
  if (it->second.send.pending()) releasing_.push_back(std::move(it->second));
  else reuse(it->second);
  live_.erase(it);
}

void ActivationSlots::reserve(int chunk, int count, int B) {
  sized(B);
  auto& free = pool_[chunk];
  while (int(free.size()) < count) free.push_back(make(chunk, B));
}

void ActivationSlots::drain() {
  for (Slot& s : releasing_) {
    p2p_.order_after(s.send);
    reuse(s);
  }
  releasing_.clear();
}

}  // namespace gpt2
