#include "pipeline/schedule.hpp"

#include <algorithm>
#include <tuple>

#include "core/error.hpp"

namespace gpt2 {

namespace {
// The rank and virtual stage a message of this action goes to (send) or comes from (receive).
struct Peer {
  int rank, stage;
};
Peer peer_of(const Action& a, const Placement& pl, int rank) {
  const int k = pl.stage(rank, a.chunk);
  const bool up = a.kind == ActionKind::send_activation || a.kind == ActionKind::recv_grad;
  const int other = up ? k + 1 : k - 1;
  return {pl.rank_of(other), other};
}
bool is_send(ActionKind k) { return k == ActionKind::send_activation || k == ActionKind::send_grad; }
bool is_recv(ActionKind k) { return k == ActionKind::recv_activation || k == ActionKind::recv_grad; }
}  // namespace

std::vector<Action> with_communication(const std::vector<Action>& compute, const Placement& pl, int rank,
                                       bool pair) {
  const int last = pl.stages() - 1;
  std::vector<Action> out;
  for (const Action& a : compute) {
    const int k = pl.stage(rank, a.chunk);
    if (a.kind == ActionKind::forward) {
      if (k > 0) out.push_back({ActionKind::recv_activation, a.mb, -1, a.chunk});
      out.push_back(a);
      if (k < last) out.push_back({ActionKind::send_activation, a.mb, -1, a.chunk});
    } else if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) {
      if (k < last) out.push_back({ActionKind::recv_grad, a.mb, -1, a.chunk});
      out.push_back(a);
      if (k > 0) out.push_back({ActionKind::send_grad, a.mb, -1, a.chunk});
    } else {
      out.push_back(a);  // a weight pass needs no message
    }
  }
  return pair ? pair_exchanges(out, pl, rank) : out;
}

std::vector<Action> pair_exchanges(const std::vector<Action>& actions, const Placement& pl, int rank) {
  std::vector<Action> out;
  for (const Action& a : actions) {
    if (is_recv(a.kind) && !out.empty()) {
      Action& s = out.back();
      // send activation + receive gradient, or send gradient + receive activation, same other rank
      const bool fits = (s.kind == ActionKind::send_activation && a.kind == ActionKind::recv_grad) ||
                        (s.kind == ActionKind::send_grad && a.kind == ActionKind::recv_activation);
      const int to = fits ? peer_of(s, pl, rank).rank : -1;
      if (fits && to != rank && to == peer_of(a, pl, rank).rank) {
        s.kind = s.kind == ActionKind::send_activation ? ActionKind::send_activation_recv_grad
                                                       : ActionKind::send_grad_recv_activation;
        s.recv_mb = a.mb;
        s.recv_chunk = a.chunk;
        continue;
      }
    }
    out.push_back(a);
  }
  return out;
}

void order_receives_as_sent(std::vector<std::vector<Action>>& ranks, const Placement& pl) {
  const int p = int(ranks.size());
  // A message: (gradient?, microbatch, destination stage).
  using Msg = std::tuple<bool, int, int>;
  std::vector<std::vector<std::vector<Msg>>> sent(p, std::vector<std::vector<Msg>>(p));  // [from][to]
  for (int q = 0; q < p; ++q)
    for (const Action& a : ranks[q])
      if (is_send(a.kind)) {
        const Peer to = peer_of(a, pl, q);
        if (to.rank != q) sent[q][to.rank].push_back({a.kind == ActionKind::send_grad, a.mb, to.stage});
      }
  for (int r = 0; r < p; ++r) {
    std::vector<size_t> next(p, 0);  // per sender: messages received so far, in sending order
    std::vector<Msg> early;          // received ahead of their place
    std::vector<Action> out;
    for (const Action& a : ranks[r]) {
      if (!is_recv(a.kind)) {
        out.push_back(a);
        continue;
      }
      const Peer from = peer_of(a, pl, r);
      const Msg want{a.kind == ActionKind::recv_grad, a.mb, pl.stage(r, a.chunk)};
      if (from.rank == r) {
        out.push_back(a);
        continue;
      }
      if (std::find(early.begin(), early.end(), want) != early.end()) continue;  // already in
      const auto& seq = sent[from.rank][r];
      // Everything the sender sent before this message comes in first.
      while (next[size_t(from.rank)] < seq.size() && seq[next[size_t(from.rank)]] != want) {
        const Msg& m = seq[next[size_t(from.rank)]++];
        out.push_back({std::get<0>(m) ? ActionKind::recv_grad : ActionKind::recv_activation, std::get<1>(m), -1,
                       pl.chunk_of(std::get<2>(m))});
        early.push_back(m);
      }
      ++next[size_t(from.rank)];
      out.push_back(a);
    }
    ranks[size_t(r)] = std::move(out);
  }
}

std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage, bool pair_exchanges) {
  Placement p;
  p.ranks = stages;
  return with_communication(compute, p, stage, pair_exchanges);
}

std::vector<std::vector<Action>> with_communication(const std::vector<std::vector<Action>>& compute,
                                                    const Placement& pl) {
  std::vector<std::vector<Action>> ranks;
  for (int r = 0; r < int(compute.size()); ++r) ranks.push_back(with_communication(compute[size_t(r)], pl, r));
  order_receives_as_sent(ranks, pl);  // chunks on either side can cross messages between two ranks
  for (int r = 0; r < int(ranks.size()); ++r) ranks[size_t(r)] = pair_exchanges(ranks[size_t(r)], pl, r);
  return ranks;
}

std::vector<Action> one_f_one_b_order(int p, int m, int s) {
  const int warmup = std::min(p - s - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back({ActionKind::forward, i});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({ActionKind::forward, warmup + i});
    out.push_back({ActionKind::backward, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({ActionKind::backward, i});
  return out;
}

std::vector<Action> interleaved_order(int p, int v, int m, int r) {
  const int total = m * v;
  auto mb = [&](int i) { return (i / (p * v)) * p + i % p; };
  auto fwd = [&](int i) { return Action{ActionKind::forward, mb(i), -1, (i / p) % v}; };
  auto bwd = [&](int i) { return Action{ActionKind::backward, mb(i), -1, v - 1 - (i / p) % v}; };
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back(fwd(i));
  for (int j = 0; j < total - warmup; ++j) out.push_back(fwd(warmup + j)), out.push_back(bwd(j));
  for (int j = total - warmup; j < total; ++j) out.push_back(bwd(j));
  return out;
}

PassCosts pass_costs(int n_embd, int seq_len) {
  const double C = n_embd, T = seq_len, linear = 24 * C * C, forward = linear + 4 * T * C;
  PassCosts c;
  c.forward = 1;
  c.backward_input = (linear + 8 * T * C) / forward;
  c.backward_weight = linear / forward;
  return c;
}

std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage, int chunks,
                                  const PassCosts& costs) {
  const ScheduleEntry& e = ScheduleRegistry::get(name, "parallel.schedule");
  if (stages <= 0 || microbatches <= 0 || stage < 0 || stage >= stages || chunks <= 0 || !(costs.forward > 0) ||
      !(costs.backward_input > 0) || !(costs.backward_weight > 0))
    fail("make_schedule: bad arguments (stages ", stages, ", microbatches ", microbatches, ", stage ", stage,
         ", chunks ", chunks, ", pass costs ", costs.forward, "/", costs.backward_input, "/", costs.backward_weight, ")");
  return e.make({stages, microbatches, stage, schedule_chunks(e, chunks), costs});
}

std::vector<Action> forward_only_schedule(const Placement& pl, int microbatches, int rank) {
  // Virtual stage by virtual stage: with one chunk per rank, microbatch after microbatch.
  std::vector<Action> compute;
  for (int k = 0; k < pl.stages(); ++k)
    if (pl.rank_of(k) == rank)
      for (int i = 0; i < microbatches; ++i) compute.push_back({ActionKind::forward, i, -1, pl.chunk_of(k)});
  return with_communication(compute, pl, rank);
}

std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage) {
  Placement p;
  p.ranks = stages;
  return forward_only_schedule(p, microbatches, stage);
}

}  // namespace gpt2
