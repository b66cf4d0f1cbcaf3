#pragma once
// Where a ParamStore keeps the parameters between uses: the ZeRO level's part that concerns them
// (parallel/param_store.hpp). WholeParams keeps the whole local layout (ZeRO 0-2; with a sharded
// update, ZeRO-1/2, the updated shards are gathered back into it after each step); GatheredParams
// keeps the shard alone and gathers a unit for each use (ZeRO-3). Under mixed precision with 16-bit
// gathers the block matrices travel as their working copy (parallel/mixed_gather.hpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/store_parts.hpp"
#include "parallel/zero.hpp"

namespace gpt2 {

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual const float* params(int u) = 0;         // valid until release(u)
  virtual const uint16_t* low_params(int u) = 0;  // its 16-bit working copy (null: none)
  virtual void prefetch(int /*u*/) {}
  virtual void release(int /*u*/) {}
  virtual void updated() {}                     // the optimizer has written the shard
  virtual void init(uint64_t seed) = 0;         // values by position; only what the rank keeps
  virtual void set(const std::vector<float>& values) = 0;  // the local layout's values, from the host
  virtual bool only_in_shard() const = 0;       // the shard alone holds every value exactly
  virtual CVec<float> whole() const { return {}; }  // the whole layout kept (empty: none)
};

// policy.params: GatheredParams, else WholeParams; whole: the whole layout's buffer for WholeParams
// (the shard's own without a sharded update).
std::unique_ptr<ParamSource> make_param_source(const ShardPolicy& policy, const StoreParts& parts,
                                               Buffer<float> whole);

// What bucket id's all-gather delivers to each rank (its 16-bit matrices in 16 bits).
size_t bucket_gather_bytes(const StoreParts& parts, int id);

}  // namespace gpt2
