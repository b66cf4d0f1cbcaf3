#pragma once
// A microbatch's rows grouped by token, for the wte gradient (embedding_backward): each token's rows
// in row order, cut into chunks of at most kChunk rows. The gradient is summed in two stages, both
// in a fixed order -- each chunk's rows, then (a token with several chunks) its chunk sums -- so the
// bits depend on the tokens alone, and a GPU gets a thread per (chunk, column) instead of one per
// column walking every row. Built on the host where the tokens are loaded (they are there then; a
// device would need a sort and its synchronisations), in page-locked memory the caller gives, and
// copied from there on the execution space's stream (the host does not wait for the copy).
#include <vector>

#include "tensor/views.hpp"

namespace gpt2 {

struct TokenGroups {
  static constexpr int kChunk = 64;
  int N = 0;       // rows
  int chunks = 0;  // chunks of rows of one token
  int runs = 0;    // tokens with more than one chunk
  int parts = 0;   // the partial sums those tokens' chunks leave
  // rows (N): grouped by token, ascending in a group; chunk_begin (chunks + 1): into rows;
  // chunk_token (chunks); chunk_part (chunks): its partial sum's row, -1 when its token has one
  // chunk (added to the gradient directly); run_token (runs); run_part (runs + 1): a run's
  // consecutive partial-sum rows. Views into `table` (one allocation, copied from the host's).
  Vec<int> rows, chunk_begin, chunk_token, chunk_part, run_token, run_part;
  Buffer<int> table;

  // The table's ints for N rows (the host table group_tokens writes has as many).
  static size_t table_size(int N) { return size_t(N) * 4 + 1 + size_t(N / (kChunk + 1) + 1) * 2 + 1; }
  // The device table for N rows, made once (set-up: a step allocates nothing).
  void allocate(int rows);

  // Partial sums a batch of N rows can leave: a token with L > kChunk rows leaves ceil(L / kChunk)
  // < 2 L / kChunk, so fewer than 2 N / kChunk in all.
  static int max_parts(int N) { return 2 * N / kChunk + 1; }
};

// Groups N host tokens into g, building the table in `host` (page-locked, table_size(N) ints, not
// written again until the copy from it has run) and copying it to g's device table (allocated for N).
void group_tokens(TokenGroups& g, const int* tokens, int N, int* host);

}  // namespace gpt2
