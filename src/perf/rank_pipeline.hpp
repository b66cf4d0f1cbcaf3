#pragma once
// The pipelines the performance model prices: which blocks each rank's chunks hold and their stage
// layouts, made as the trainer makes them (the partitioner's split, or an even one with chunks).
#include <vector>

#include "model/stage_layout.hpp"
#include "perf/step_model.hpp"
#include "pipeline/schedule.hpp"

namespace gpt2 {

// A rank's layout by (model, its chunks' blocks, tp), made once: a plan asks for the same ones
// thousands of times.
const StageLayout& rank_layout(const ModelConfig& m, const std::vector<BlockRange>& chunks, int tp);

// What the model needs to know about the layout's pipeline: where virtual stage k runs and which
// blocks it holds (one chunk a rank: the partitioner's split; several: an even one, as the trainer).
struct Pipeline {
  Placement placement;
  bool split_backward = false;
  std::vector<int> layers;  // per virtual stage
  std::vector<int> first;   // its first block
  std::vector<BlockRange> chunks_of(int rank) const {
    std::vector<BlockRange> out;
    for (int c = 0; c < placement.chunks; ++c) {
      const int k = placement.stage(rank, c);
      out.push_back({first[size_t(k)], first[size_t(k)] + layers[size_t(k)]});
    }
    return out;
  }
};

Pipeline pipeline_of(const Workload& w, const Layout& l);  // (the last one asked is remembered)
Pipeline make_pipeline(const Workload& w, const Layout& l);

}  // namespace gpt2
