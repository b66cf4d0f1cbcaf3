#pragma once
// The saved activations of each (microbatch, chunk) a rank's pipeline holds (pipeline/executor.hpp):
// a slot is taken from its chunk's pool when the forward starts and given back when the backward (W,
// when split) is done -- or, in evaluation, once its output is sent. A slot whose activation is
// still being sent waits in `releasing` until the send completes; when a chunk has none free, the
// oldest such slot is reused after its send (a stream dependency), so the slots a step makes do not
// depend on when sends end. The pools hold microbatches of one size (a new size empties them).
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/stage.hpp"
#include "pipeline/p2p.hpp"

namespace gpt2 {

class ActivationSlots {
 public:
  struct Slot {
    std::unique_ptr<Activations<float>> act;
    PipelineP2P::Handle send;  // activation still on its way
    int chunk = 0;
  };
  using Make = std::function<Activations<float>(int chunk, int B)>;  // a new slot's activations
  ActivationSlots(PipelineP2P& p2p, Make make) : p2p_(p2p), make_(std::move(make)) {}

  Slot& acquire(int mb, int chunk, int B);  // the held slot, or one from the pool
  Slot& at(int mb, int chunk) { return live_.at({mb, chunk}); }
  void release(int mb, int chunk);  // back to the pool once its send completed
  void reserve(int chunk, int count, int B);  // set-up: count free slots of B sequences made now
  void drain();  // every slot still sending ordered before what follows, and back to its pool
  bool sending() const { return !releasing_.empty(); }
  size_t held() const { return live_.size(); }

  int peak() const { return peak_; }           // most microbatch-chunks held at once
  size_t slot_bytes() const { return bytes_; }  // saved activations per microbatch-chunk (largest)
  void reset_peak() { peak_ = 0; }

 private:
  void reuse(Slot& s);  // a released slot's activations back to its chunk's pool
  void sized(int B);    // the pools hold slots of B sequences
  std::unique_ptr<Activations<float>> make(int chunk, int B);

  PipelineP2P& p2p_;
  Make make_;
  std::map<std::pair<int, int>, Slot> live_;  // by (microbatch, chunk)
  std::vector<Slot> releasing_;               // done, its activation's send still pending
  std::map<int, std::vector<std::unique_ptr<Activations<float>>>> pool_;  // free, by chunk
  int peak_ = 0, B_ = -1;
  size_t bytes_ = 0;
};

}  // namespace gpt2
