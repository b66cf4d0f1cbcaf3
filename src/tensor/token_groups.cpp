#include "tensor/token_groups.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace gpt2 {

void TokenGroups::allocate(int rows) {
  N = rows;
  table = uninitialized<int>("token_groups", table_size(rows));
}

void group_tokens(TokenGroups& g, const int* tokens, int N, int* host) {
  constexpr int K = TokenGroups::kChunk;
  const int max_runs = N / (K + 1) + 1;  // a run has more than K rows
  const size_t size = TokenGroups::table_size(N);
  if (g.N != N || g.table.extent(0) != size) fail("group_tokens: the table is made for ", g.N, " rows, not ", N);
  int* rows = host;
  int* chunk_begin = rows + N;
  int* chunk_token = chunk_begin + N + 1;
  int* chunk_part = chunk_token + N;
  int* run_token = chunk_part + N;
  int* run_part = run_token + max_runs;
  std::iota(rows, rows + N, 0);
  std::stable_sort(rows, rows + N, [&](int a, int b) { return tokens[a] < tokens[b]; });
  g.chunks = g.runs = g.parts = 0;
  for (int i = 0; i < N;) {
    const int tok = tokens[rows[i]];
    int j = i;
    while (j < N && tokens[rows[j]] == tok) ++j;
    const int n = (j - i + K - 1) / K;
    if (n > 1) {
      run_token[g.runs] = tok;
      run_part[g.runs++] = g.parts;
    }
    for (int c = 0; c < n; ++c, ++g.chunks) {
      chunk_begin[g.chunks] = i + c * K;
      chunk_token[g.chunks] = tok;
      chunk_part[g.chunks] = n > 1 ? g.parts++ : -1;
    }
    i = j;
  }
  chunk_begin[g.chunks] = N;
  run_part[g.runs] = g.parts;
  using PinnedInts = Kokkos::View<const int*, Kokkos::LayoutRight, PinnedMemory, Kokkos::MemoryUnmanaged>;
  Kokkos::deep_copy(ExecSpace(), g.table, PinnedInts(host, size));
  auto at = [&](const int* p, size_t n) { return Vec<int>(g.table.data() + (p - host), n); };
  g.rows = at(rows, size_t(N));
  g.chunk_begin = at(chunk_begin, size_t(g.chunks) + 1);
  g.chunk_token = at(chunk_token, size_t(g.chunks));
  g.chunk_part = at(chunk_part, size_t(g.chunks));
  g.run_token = at(run_token, size_t(g.runs));
  g.run_part = at(run_part, size_t(g.runs) + 1);
}

}  // namespace gpt2
