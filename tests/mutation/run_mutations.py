#!/usr/bin/python3
"""Seeded mutations: small faults put into the code one at a time, each of which some ctest must
catch. A check that cannot fail is a defect; this shows, fault by fault, which test fails.

For each mutation: the source text is replaced (it must occur exactly once), the build is brought
up to date, the named ctest(s) run, and the file is restored -- also when the script is interrupted
or a step fails. A mutation is CAUGHT when at least one of its tests fails; the script exits 1 if
any mutation survives. Run it by hand on a build of this tree (it takes a few minutes a mutation on
2 cores: a rebuild of the files it touches and the tests it names).

  tests/mutation/run_mutations.py [--build DIR] [--only NAME,...] [--list]
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Mutation:
    def __init__(self, name, what, path, old, new, tests):
        self.name, self.what, self.path, self.old, self.new, self.tests = name, what, path, old, new, tests


FWD = ("  const GemmWeights w16 = gemm_weights(u, pu, p);\n"
       "  // A row-parallel projection")  # a block forward's first lines, where the forward mutations go

MUTATIONS = [
    Mutation("gelu-bias-unfused", "the MLP's backward runs GELU's backward, the bias sums and the rounding as three passes",
             "src/model/stage_block.cpp", "if (do_in && do_w) {  // GELU's backward",
             "if (false) {  // GELU's backward", "^Traffic\\.ABlocksPassesMoveWhatTheFormulaSays$"),
    Mutation("decode-positions-from-zero", "decoding's new rows take positions from 0, not from the cache's length",
             "src/model/stage.cpp", "positions(i) = position + int(i);", "positions(i) = int(i);",
             "^KvCache\\.(DecoderLogitsEqualTheStageForward|CachedGenerationEqualsUncachedTokenForToken)$"),
    Mutation("decode-cache-not-extended", "decoding's attention reads the cache without the new rows' keys and values",
             "src/model/stage_attention.cpp", "  kv_cache_store<T>(d.kv[size_t(i)], s.qkv, d.position);\n", "",
             "^KvCache\\.(DecoderLogitsEqualTheStageForward|CachedGenerationEqualsUncachedTokenForToken)$"),
    Mutation("layers-table-upward", "the layer table lets runtime/ include model/, a room above it",
             "tests/structure/check_layers.py", '"runtime": {"plugins", "tensor", "core"},',
             '"runtime": {"plugins", "tensor", "model", "core"},', "^layers$"),
    Mutation("plugin-includes-runtime", "a plug-in interface includes runtime/, a room above plugins/",
             "src/plugins/tokenizer.hpp", '#include "plugins/registry.hpp"\n',
             '#include "plugins/registry.hpp"\n#include "runtime/build_info.hpp"\n', "^layers$"),
    Mutation("gelu-bias-sums", "the fused pass sums the incoming gradient, not GELU's backward of it",
             "src/tensor/gelu.hpp", "    out(n, c) = S(v);\n    return v;", "    out(n, c) = S(v);\n    return d(n, c);",
             "^Kernels\\.GeluBiasBackwardGradcheck$|^ModelGradcheck\\.WholeTinyModel$"),
    Mutation("team-sum-rest", "a one-thread team sum drops the values after its lanes' last whole group",
             "src/tensor/team_reduce.hpp", "  return a[0] + sum;", "  return a[0];",
             "^Kernels\\.TeamSumAndMaxCoverEveryValue$"),
    Mutation("team-max-long-lanes", "a one-thread team max of a long row skips its lanes' results",
             "src/tensor/team_reduce.hpp", "  for (int k = 0; k < L; ++k) mx = a[k] > mx ? a[k] : mx;",
             "  for (int k = 0; k < L && L < 32; ++k) mx = a[k] > mx ? a[k] : mx;",
             "^Kernels\\.TeamSumAndMaxCoverEveryValue$"),
    Mutation("epilogue-residual", "a product's residual epilogue is dropped (the bias stays)",
             "src/tensor/gemm_dnnl.cpp", "attr.set_post_ops(post_ops(beta, epilogue & 2, c));",
             "attr.set_post_ops(post_ops(beta, false, c));",
             "^Kernels\\.LinearForwardAddsBiasAndResidualInsideTheProductOrAfter$"),
    Mutation("epilogue-uncounted", "a product's epilogue reads no bytes in the traffic count",
             "src/tensor/gemm.cpp", "count_traffic((e.bias ? uint64_t(N) : 0)", "count_traffic(0 * (e.bias ? uint64_t(N) : 0)",
             "^Traffic\\.ABlocksPassesMoveWhatTheFormulaSays$"),
    Mutation("thread-fit-silent", "a rank whose threads share or idle its cores says nothing",
             "src/runtime/environment.cpp", "  else\n    return \"\";\n  return \"threads: Kokkos \"",
             "  return \"\";\n  return \"threads: Kokkos \"", "^thread_budget$"),
    Mutation("blas-threads-apart", "the BLAS's default threads ignore Kokkos' (the rank's share of the cores)",
             "src/runtime/environment.cpp", ": threaded ? host_threads_ : cores_per_rank();",
             ": threaded ? cores_per_rank() : cores_per_rank();",
             "^thread_budget$"),
    Mutation("prediction-uncalibrated", "a run never prices its prediction from the earlier trace in its folder",
             "src/train/prediction.cpp", "if (path.empty() || !std::ifstream(path)) return nullptr;",
             "if (!path.empty() || !std::ifstream(path)) return nullptr;", "^prediction$"),
    Mutation("prediction-never-warns", "a measurement far off the prediction names no part",
             "src/train/prediction.cpp", "if (warn <= 0 || (std::abs(step_off) <= warn",
             "if (warn >= 0 || (std::abs(step_off) <= warn", "^prediction$"),
    Mutation("for-each-index-last-run", "the host's elementwise kernels drop the indices after the last whole run",
             "src/tensor/elementwise.hpp", "Runs(0, (n + kRun - 1) / kRun,", "Runs(0, n / kRun,",
             "^Kernels\\.ForEachIndex"),
    Mutation("straggler-self-median", "a rank is compared with a median its own time is part of",
             "src/train/straggler.cpp", "if (q != r && group[q] == group[r] && compute[q] > 0)",
             "if (group[q] == group[r] && compute[q] > 0)", "^Stragglers\\."),
    Mutation("straggler-any-peers", "a rank's peers are every rank, not its stage's",
             "src/train/straggler.cpp", "if (q != r && group[q] == group[r] && compute[q] > 0)",
             "if (q != r && compute[q] > 0)", "^Stragglers\\."),
    Mutation("straggler-one-interval", "one slow interval names a rank",
             "src/train/straggler.cpp", "    if (since == 0) continue;\n", "    if (false) continue;\n",
             "^stragglers$"),
    Mutation("pass-waits-counted", "the blocking communication inside a pass counts as compute",
             "src/trace/tracer.cpp", "  if (in_pass_) times_.compute -= seconds;\n", "",
             "^Stragglers\\."),
    Mutation("memory-warn-always", "every rank is named near its memory limit",
             "src/train/straggler.cpp", "x.used_bytes <= warn * x.limit_bytes", "x.used_bytes > warn * x.limit_bytes",
             "^stragglers$"),
    Mutation("straggler-no-gap", "a rank slower by less than a millisecond a step is named",
             "src/train/straggler.cpp", " && compute[r] - m > min_gap)", ")", "^Stragglers\\."),
    Mutation("muon-no-nesterov", "Muon's update is its momentum, not the Nesterov interpolation",
             "src/tensor/muon_update.hpp", "= (T(1) - b) * gi + b * mi;", "= mi;", "^Muon\\."),
    Mutation("muon-tall-drops-x", "a tall matrix's iteration drops its a X term (X B alone)",
             "src/tensor/muon_update.hpp", "b.data(), b16, m, T(1), y.data(),",
             "b.data(), b16, m, T(0), y.data(),", "^Muon\\."),
    Mutation("muon-shape-scale", "the update is not scaled by max(1, rows / cols)^0.5",
             "modules/optim/muon.cpp", "std::sqrt(std::max(1.0, double(w.rows) / w.cols))", "1.0", "^Muon\\."),
    Mutation("muon-ns-coefficient", "the quintic's x^5 coefficient is off",
             "src/tensor/muon_update.hpp", "kNewtonSchulzC = 2.0315", "kNewtonSchulzC = 2.0", "^Muon\\."),
    Mutation("lion-no-sign", "Lion steps along the interpolation, not its sign",
             "modules/optim/lion.cpp", "rate * float((c > 0) - (c < 0))", "rate * c", "^Lion\\."),
    Mutation("muon-unpriced", "the planner leaves Muon's Newton-Schulz products out of the step",
             "src/perf/step_model.cpp", "if (rp.newton_schulz_flops > 0)", "if (false)", "^CostModel\\.Muon"),
    Mutation("muon-exchange-unpriced", "the planner leaves out Muon's exchange of matrix parts with their owners",
             "src/perf/rank_plan.cpp", "if (D > 1) rp.matrix_exchange_bytes = 4 * elems / D;", "",
             "^CostModel\\.Muon"),
    Mutation("muon-owners-unpriced", "the planner prices every replica orthogonalising every matrix",
             "src/perf/rank_plan.cpp", "const int D = s.policy.optimizer ? s.replicas : 1;", "const int D = 1;",
             "^CostModel\\.Muon"),
    Mutation("muon-momentum-unsaved", "a checkpoint leaves Muon's momentum out (a resumed run starts it at 0)",
             "modules/optim/muon.cpp", '  s.push_back({"momentum", Vec<float>(momentum_.data(), momentum_.extent(0))});\n',
             "", "^muon_layouts$"),
    Mutation("shard-tensor-fragments", "the optimizer sees a tensor as one part a bucket (Muon's matrices in pieces)",
             "src/parallel/shard_layout.cpp", "if (last && last->kind == t.kind", "if (false && last->kind == t.kind",
             "^ShardLayout\\.|^muon_layouts$"),
    Mutation("zero-units-unpadded", "ZeRO over replicas that divide no unit: the layout made for no sharding",
             "src/train/rank_engine.cpp", "shard_ranks = p.zero > 0 ? size_t(p.dp) * size_t(p.cp) : 1;",
             "shard_ranks = 1;", "^muon_layouts$"),
    Mutation("products-always-store", "every weight-gradient product stores its sum, also onto earlier microbatches'",
             "src/parallel/grad_sink.cpp", "const bool fresh = std::none_of(", "const bool fresh = true || std::none_of(",
             "^ParamStore\\.|^mixed_precision$|^mpi_tests_np4$|^layout_matrix$"),
    Mutation("products-never-store", "no product ever stores: each reads the zeros it adds to",
             "src/parallel/grad_sink.cpp", "const bool fresh = std::none_of(",
             "const bool fresh = false && std::none_of(", "^ParamStore\\."),
    Mutation("workspace-not-fresh", "a ZeRO-2/3 workspace taken and zeroed still counts what the last one held",
             "src/parallel/grad_sink.cpp", "    zeroed(u);\n", "", "^ParamStore\\."),
    Mutation("checkpoint-runs-consecutive", "the checkpoint takes a shard's runs as consecutive, the padding between them ignored",
             "src/parallel/param_store_state.cpp", "      out.at.push_back(value);",
             "      out.at.push_back(out.at.empty() ? 0 : out.at.back() + out.ranges[out.ranges.size() - 2].size());",
             "^muon_layouts$|^mpi_tests_np2$"),
    Mutation("file-map-runs-consecutive", "the checkpoint's file map reads each run's values right after the last run's",
             "src/parallel/checkpoint_file_map.cpp", "const size_t value = mine.at[k] + (i - r.begin);",
             "const size_t value = (k ? mine.at[k - 1] + mine.ranges[k - 1].size() : mine.at[0]) + (i - r.begin);",
             "^mpi_tests_np2$"),
    Mutation("slices-offset-as-fp32", "the long reduction's slices step through bf16 operands as if 4 bytes a value",
             "src/tensor/gemm_dnnl.cpp", "const size_t bytes = in == dt::bf16 ? 2 : 4;", "const size_t bytes = 4;",
             "^Kernels\\.GemmBf16MatchesDoubleOfRoundedInputs$"),
    Mutation("slices-each-take-beta", "every slice of a long reduction scales C by beta: the earlier slices' sums lost",
             "src/tensor/gemm_dnnl.cpp", "k0 ? 1.0f : beta", "beta",
             "^Kernels\\.Gemm(F32MatchesDoubleWhicheverLibrary|Bf16MatchesDoubleOfRoundedInputs)$"),
    Mutation("groups-one-stride", "the batch's groups step through B by A's group stride",
             "src/tensor/gemm.cpp", "B + group * g.B + i * sB", "B + group * g.A + i * sB",
             "^Kernels\\.GemmStridedBatchedF32MatchesDoubleWhicheverLibrary$"),
    Mutation("attention-out-half-stride", "attention's output steps half a sequence from one to the next",
             "src/tensor/attention.hpp", "hs, nh, {B, seq_att, seq_qkv, seq_out});",
             "hs, nh, {B, seq_att, seq_qkv, seq_out / 2});", "^Kernels\\.Attention"),
    Mutation("segments-padded-to-values", "a segment padded to a multiple of D values, not of D rows",
             "src/model/stage_layout.cpp", "const size_t grain = shard_ranks * s.row_len;",
             "const size_t grain = shard_ranks;", "^ShardLayout\\.|^muon_layouts$"),
    Mutation("buckets-cut-mid-row", "buckets cut to a multiple of D values: a rank's piece ends inside a row",
             "src/parallel/shard_layout.cpp", "const size_t grain = size_t(D_) * s.row_len;",
             "const size_t grain = size_t(D_) * (s.row_len > 1 ? s.row_len - 1 : 1);", "^ShardLayout\\.|^muon_layouts$"),
    Mutation("plan-rows-of-rank-0", "the plan tells every rank rank 0's rows",
             "src/parallel/shard_layout.cpp", "const Range p = piece_of(b.range, D_, q);",
             "const Range p = piece_of(b.range, D_, 0 * q);",
             "^ShardLayout\\.|^muon_layouts$"),
    Mutation("muon-columns-stacked", "tp's column blocks of a projection are orthogonalised stacked, not side by side",
             "src/tensor/indexed_copy.hpp", "whole(i) = stacked((j * rows + r) * c + col % c);",
             "whole(i) = stacked(i + 0 * (j * rows + r) * c);", "^muon_layouts$"),
    Mutation("muon-column-block", "every tp rank takes tp rank 0's columns of the result",
             "src/parallel/matrix_shards.cpp", "m.cols / T, T, tp_.rank());", "m.cols / T, T, 0);", "^muon_layouts$"),
    Mutation("muon-row-block", "every tp rank takes tp rank 0's rows of the result",
             "src/parallel/matrix_shards.cpp", "vec(whole.data() + size_t(tp_.rank()) * local, local)",
             "vec(whole.data(), local)", "^muon_layouts$"),
    Mutation("muon-owner-parts", "an owner leaves its own parts of its matrices out of the exchange",
             "src/parallel/matrix_shards.cpp", "if (parts_[i].owner != me_) continue;", "continue;",
             "^muon_layouts$"),
    Mutation("adamw-runs-mix-groups", "AdamW's runs merge neighbouring shards of different decay (a bias decayed)",
             "src/plugins/optimizer.hpp", "shards.size() && shards[j].decayed() == d && shards[j].run.begin",
             "shards.size() && shards[j].run.begin", "^AdamW.TensorShardsStepEqualsTheFlatUpdateAndTheAlgorithm$"),
    Mutation("adamw-gap-gradients-kept", "the gradients between two shards left unzeroed by the step",
             "src/plugins/optimizer.cpp", "    zero(at, t.run.begin);\n", "",
             "^AdamW.TensorShardsStepEqualsTheFlatUpdateAndTheAlgorithm$"),
    Mutation("whole-grads-unzeroed", "ZeRO-1's whole gradients not zeroed at a step's start (they carry the last step's)",
             "src/parallel/grad_sink.cpp",
             "    if (!zeroed || sharded_) Kokkos::deep_copy(ExecSpace(), whole_, 0.0f);\n", "",
             "^mpi_tests_np2$"),
    Mutation("muon-staged-offsets", "a holder's staged ranges land at their offsets in its run, not in the matrix",
             "src/parallel/matrix_shards.cpp", "const size_t at = slice_at(i) + j;",
             "const size_t at = slice_at(i) + j - r.begin;",
             "^muon_layouts$"),
    Mutation("no-reducer-reserve-whole", "the all-reduce's 16-bit wire buffers left to the first step to make (ZeRO 0-1)",
             "src/parallel/grad_sink.cpp", "    p_.reducer.reserve(false);\n", "", "^mixed_precision$"),
    Mutation("microbatch-load", "every pair of microbatches loads the same sequences",
             "src/train/trainer.cpp", "data_->load_microbatch(data_->train(), step, mb, *e.topo, a); };",
             "data_->load_microbatch(data_->train(), step, mb / 2, *e.topo, a); };",
             "^mpi_tests_np2$"),
    Mutation("loss-block-targets", "the head's row blocks all read the first block's targets",
             "src/model/stage_ends.cpp", "const Tokens targets(a.targets.data() + r0, n);",
             "const Tokens targets(a.targets.data(), n);",
             "^ModelGradcheck\\.HeadInRowBlocksEqualsTheWholeLogits$"),
    Mutation("flash-doc-mask", "fused attention's forward ignores the document mask (packed examples see each other)",
             "src/tensor/flash_attention.hpp",
             "const int lo = i < qr.n ? g.lo(row0 + i) : 0;\n"
             "            const flash::KeyRange r = flash::visible_keys(qr, i, lo, kr);\n"
             "            const T corr",
             "const int lo = 0;\n"
             "            const flash::KeyRange r = flash::visible_keys(qr, i, lo, kr);\n"
             "            const T corr",
             "^FlashAttention\\.DocumentMaskedPackingEqualsExamplesAlone$"),
    Mutation("doc-positions", "document masks: the position embedding keeps the sequence's positions (no restart)",
             "src/model/stage_ends.cpp",
             "  const bool docs = a.doc_positions.extent(0) > 0;\n  embedding_forward",
             "  const bool docs = false && a.doc_positions.extent(0) > 0;\n  embedding_forward",
             "^ModelGradcheck\\.DocumentMaskedPackingEqualsDocumentsAlone$"),
    Mutation("doc-wpe-grad", "document masks: wpe's gradient summed by sequence position as well as by document position",
             "src/model/stage_ends.cpp", "docs ? Mat<T>() : dwpe, dout,", "dwpe, dout,",
             "^ModelGradcheck\\.DocumentMaskedPackingEqualsDocumentsAlone$"),
    Mutation("doc-eot-boundary", "plain text's documents start at the end-of-text token instead of after it",
             "src/data/loader.cpp", "starts[j] = j == 0 ? 0 : inputs[j - 1] == doc_end_ ? j : starts[j - 1];",
             "starts[j] = j == 0 ? 0 : inputs[j] == doc_end_ ? j : starts[j - 1];",
             "^Loader\\.DocumentsEndAtTheEndOfTextToken$"),
    Mutation("gemm-observer-bf16", "the host's bf16 GEMM does not tell the observer (its shape missing from the tables)",
             "src/tensor/gemm_lowp.cpp",
             "    const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, \"bf16\", \"f32\"});\n", "",
             "^Kernels\\.GemmDispatchTellsTheObserverEachCall$"),
    Mutation("column-sum-flat-order", "the GPU's column sums add the row blocks last to first",
             "src/tensor/column_sum.hpp", "for (int r = 0; r < R; ++r) s += part(m * RC + int64_t(r) * C + c);",
             "for (int r = R - 1; r >= 0; --r) s += part(m * RC + int64_t(r) * C + c);",
             "^Kernels\\.ColumnSumsAddFixedRowBlocksInOrder$"),
    Mutation("flash-barrier", "fused attention's forward multiplies by a key tile before the team has transposed it (no barrier)",
             "src/tensor/flash_attention.hpp",
             "          flash::team_transpose(team, Kt, K, g.bt, g.hp);\n          team.team_barrier();\n"
             "          flash::team_product(team, S, g.bt, Q, g.hp, Kt, g.bt, g.bt, g.bt, g.hp, false);",
             "          flash::team_transpose(team, Kt, K, g.bt, g.hp);\n"
             "          flash::team_product(team, S, g.bt, Q, g.hp, Kt, g.bt, g.bt, g.bt, g.hp, false);",
             "^unit_kernels_teams4$"),
    Mutation("cp-loss-factor", "context parallelism's factor cp dropped from the loss gradient",
             "src/train/trainer.cpp", "io.dloss = float(scale * cfg_.parallel.dp * e.topo->cp() /",
             "io.dloss = float(scale * cfg_.parallel.dp /",
             "^(mpi_tests_np4|layout_matrix_refs|layout_matrix)$"),
    Mutation("dp-sum", "data-parallel gradients summed instead of averaged",
             "src/parallel/gradient_reducer.cpp",
             "p.request = dp_.iallreduce(src, b.range.size(), DType::f32, ReduceOp::avg);",
             "p.request = dp_.iallreduce(src, b.range.size(), DType::f32, ReduceOp::sum);", "^mpi_tests_np2$"),
    Mutation("zero3-regather", "ZeRO-3 skips the re-gather of a released unit (its stale workspace is read)",
             "src/parallel/param_source.cpp", "  g.buf = Buffer<float>();\n  g.low = Buffer<uint16_t>();\n  g.refs = 0;",
             "  g.low = Buffer<uint16_t>();\n  g.refs = 0;", "^mpi_tests_np2$"),
    Mutation("drop-microbatch", "1F1B's last backward dropped from the schedule",
             "src/pipeline/schedule.cpp",
             "for (int i = m - warmup; i < m; ++i) out.push_back({ActionKind::backward, i});",
             "for (int i = m - warmup; i < m - 1; ++i) out.push_back({ActionKind::backward, i});",
             "^(mpi_tests_np2|schedule_file)$"),
    Mutation("team-barrier", "a team barrier missing: column sums read the team's partial sums before all are written",
             "src/tensor/column_sum.hpp",
             "        team.team_barrier();\n        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * M), [&](int j) {",
             "        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * M), [&](int j) {",
             "^unit_kernels_teams4$"),
    Mutation("tp-reduction", "tensor parallelism's all-reduce takes the max instead of the sum",
             "src/parallel/tp_comm.hpp",
             "void all_reduce_sum(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::sum); }",
             "void all_reduce_sum(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::max); }",
             "^mpi_tests_np2$"),
    Mutation("checkpoint-rng", "checkpoints leave out the sampler's random state",
             "src/train/checkpointer.cpp", "  meta.rng = state_.sample_rng.state();\n", "", "^e2e_resume$"),
    Mutation("data-position", "an off-by-one in the data position: every batch starts one sequence late",
             "src/data/loader.cpp", "const size_t pos = size_t(j * B_ + row);",
             "const size_t pos = size_t(j * B_ + row + 1);", "^e2e_pytorch_1rank$"),
    Mutation("fence-in-backward", "a Kokkos::fence() (a whole-device wait) in a block's backward",
             "src/model/stage_block.cpp", "  const bool keep = pass != Pass::backward;\n",
             "  const bool keep = pass != Pass::backward;\n  Kokkos::fence();\n", "^(mpi_tests_np2|device_sync_rule)$"),
    Mutation("view-in-step", "a View allocated inside the step (in a block's backward)",
             "src/model/stage_block.cpp", "  const bool keep = pass != Pass::backward;\n",
             "  const bool keep = pass != Pass::backward;\n  Buffer<float> scratch(\"scratch\", 16);\n",
             "^mpi_tests_np2$"),
    Mutation("ungrouped-exchange", "the pipeline's runs of messages issued ungrouped (each its own operation)",
             "src/pipeline/p2p.hpp", "  void begin_group() { pipe_.group_start(); }\n  void end_group() { pipe_.group_end(); }",
             "  void begin_group() {}\n  void end_group() {}", "^gpu_semantics_layouts_np2$"),
    Mutation("tp-host-wait", "tensor parallelism's all-gather waits on the host instead of a stream dependency",
             "src/parallel/tp_comm.hpp", "    Request r = tp_.iall_gather(send, recv, n, DType::f32);\n    tp_.order_after(r);",
             "    Request r = tp_.iall_gather(send, recv, n, DType::f32);\n    tp_.wait(r);", "^mpi_tests_np2$"),
    # ---- src/pipeline/
    Mutation("pass-lists-keep-files", "a schedule file's pass lists kept by name like a built-in's",
             "src/pipeline/pass_lists.cpp",
             '  if (!ScheduleRegistry::get(shape.schedule, "parallel.schedule").file.empty()) return build_and_prove(shape);',
             "  if (false) return build_and_prove(shape);", "^ScheduleFile.PassListsKeptForBuiltInsNeverForAFileRegisteredAgain$"),
    Mutation("option-string-compare", "a deck value compared with a string after the deck is read",
             "src/train/evaluator.cpp", "tok_ = make_sample_tokenizer(cfg.data.tokenizer, ",
             'tok_ = make_sample_tokenizer(cfg.data.tokenizer == "auto" ? std::string("auto") : cfg.data.tokenizer, ',
             "^options_parsed_once$"),
    Mutation("choice-unknown-word", "a deck key of a few words takes a word that is not one of them",
             "src/core/input_deck.cpp", "  if (!dst.assign(text)) fail_input(", "  if (!dst.assign(text) && false) fail_input(",
             "^InputDeck\\.ChoicesAreReadIntoTheirEnumsOnce$|^bad_input$"),
    Mutation("executor-buffer-in-group", "the run's buffers taken inside its open group (reclaiming one waits on a send)",
             "src/pipeline/executor.cpp",
             "  for (int k = 0; k < need; ++k) ready_.push_back(buffer(elems));\n"
             "  p2p_.begin_group();  // the run's messages start together (NCCL: one group)\n",
             "  p2p_.begin_group();  // the run's messages start together (NCCL: one group)\n"
             "  for (int k = 0; k < need; ++k) ready_.push_back(buffer(elems));\n",
             "^gpu_semantics_pipeline_np4$"),
    # ---- src/tensor/
    Mutation("gelu-derivative", "GELU's backward drops the 3 of d(x^3)/dx = 3x^2",
             "src/tensor/gelu.hpp",
             "const T du = T(0.7978845608028654) * (T(1) + T(3 * 0.044715) * x * x);",
             "const T du = T(0.7978845608028654) * (T(1) + T(0.044715) * x * x);",
             "^Kernels\\.GeluGradcheck$"),
    Mutation("team-sum-drops-tail", "a one-thread team's sum leaves out the n % 8 values past its last group of 8",
             "src/tensor/team_reduce.hpp", "for (int k = 0; j < n; ++j, ++k) a[k] += f(j);",
             "for (int k = 0; j < n; ++j, ++k) a[k] += 0 * f(j);", "^Kernels\\.(LayerNorm|Attention)"),
    Mutation("layernorm-din-set", "LayerNorm's input gradient overwrites din instead of adding to it",
             "src/tensor/layernorm.hpp",
             "din(n, c) += (w(c) * dout(n, c) - g_mean - norm * gx_mean) * s;",
             "din(n, c) = (w(c) * dout(n, c) - g_mean - norm * gx_mean) * s;",
             "^Kernels\\.LayerNormGradcheck$"),
    # ---- src/data/
    Mutation("shard-size-check", "the shard's size check counts tokens as bytes (2 bytes a token forgotten)",
             "src/data/token_shard.cpp", "if (bytes != kShardHeaderBytes + 2 * count_)",
             "if (bytes != kShardHeaderBytes + count_)", "^Shard\\.WriteReadRoundTripAndValidation$"),
    Mutation("shuffle-epoch", "the epoch left out of the shuffle's random stream: every epoch the same order",
             "src/data/loader.cpp", "Rng rng(seed_, 1000003ull + uint64_t(epoch));", "Rng rng(seed_, 1000003ull);",
             "^Loader\\.ShuffledEpochsAreSeededPermutations$"),
    # ---- src/runtime/
    Mutation("grid-axis-order", "grid coordinates peeled outermost first (tp no longer the innermost axis)",
             "src/runtime/topology.cpp",
             "for (auto a = kAxes.rbegin(); a != kAxes.rend(); ++a) {  // innermost first",
             "for (auto a = kAxes.begin(); a != kAxes.end(); ++a) {  // innermost first",
             "^Topology\\.GridCoordinatesPutTensorParallelRanksInnermost$"),
    Mutation("tied-group-colour", "the tied group's colour keeps the rank's own stage: first and last stage never meet",
             "src/runtime/topology.cpp", "  GridCoords first = coords_;\n  first.pp = 0;\n",
             "  GridCoords first = coords_;\n", "^mpi_tests_np2$"),
    Mutation("stop-signals-restore", "the stop handlers' destructor restores 2 of the 3 signals (SIGUSR1's stays)",
             "src/runtime/stop_signals.cpp",
             "  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);",
             "  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);",
             "^StopSignals\\.HandlersAreRestoredAndReclaimed$"),
    # ---- modules/comm/
    Mutation("ordered-entry-plain", "the mpi-ordered registry entry builds a plain MPI communicator",
             "modules/comm/mpi_communicator.cpp",
             "{ return std::make_unique<MpiCommunicator>(c, true); }",
             "{ return std::make_unique<MpiCommunicator>(c); }", "^mpi_tests_np2$"),
    Mutation("reduce-scatter-sum", "reduce-scatter with ReduceOp::avg sums (the 1/size scaling never asked for)",
             "modules/comm/mpi_communicator.cpp",
             "  o.average = op == ReduceOp::avg && size_ > 1;\n  const void* s = send;",
             "  const void* s = send;", "^mpi_tests_np2$"),
    # ---- modules/schedule/
    Mutation("1f1b-unpaired", "1F1B's steady-state neighbour exchanges left unpaired",
             "modules/schedule/one_f_one_b.cpp", "/*pair_exchanges=*/true", "/*pair_exchanges=*/false",
             "^Schedule\\.OneFOneBPairsItsNeighbourExchangesAndGPipeDoesNot$"),
    Mutation("gpipe-bound", "GPipe's in-flight bound is the stage count instead of the microbatch count",
             "modules/schedule/gpipe.cpp", "e.max_in_flight = [](const ScheduleShape& s) { return s.microbatches; };",
             "e.max_in_flight = [](const ScheduleShape& s) { return s.stages; };",
             "^PassLists\\.EveryLayoutValidationAcceptsIsProvenForTrainingAndEvaluation$"),
    # ---- modules/optim/
    Mutation("decay-every-tensor", "AdamW decays every tensor (biases and LayerNorm gains too), not rank >= 2 only",
             "modules/optim/adamw.cpp", "s.weight_decay = decayed ? cfg_.weight_decay : 0.0;",
             "s.weight_decay = cfg_.weight_decay;", "^PyTorchReference\\.AdamWTrajectoryWithClipping$"),
    Mutation("bias-correction-step", "AdamW's bias corrections one step ahead (t + 1 for the 1-based t)",
             "modules/optim/adamw.cpp", "s.step = int(t_);", "s.step = int(t_) + 1;",
             "^PyTorchReference\\.AdamWTrajectoryWithClipping$"),
    Mutation("adamw-steps-resume", "a resumed AdamW restarts its step count at 0 (bias corrections as if new)",
             "modules/optim/adamw.hpp", "void set_steps_taken(int64_t n) override { t_ = n; }",
             "void set_steps_taken(int64_t n) override {}", "^e2e_resume$"),
    # ---- modules/tokenizer/
    Mutation("byte-decode-range", "the byte tokenizer accepts id 256 (off by one in the range check)",
             "modules/tokenizer/byte_tokenizer.cpp", "if (ids[i] < 0 || ids[i] > 255)",
             "if (ids[i] < 0 || ids[i] > 256)", "^ByteTokenizer\\.RoundTripsEveryByte$"),
    Mutation("bpe-tie-break", "BPE takes the LAST occurrence of the lowest-rank pair (<= for <)",
             "modules/tokenizer/gpt2_bpe.cpp", "if (rk[i] < rk[best]) best = i;", "if (rk[i] <= rk[best]) best = i;",
             "^Gpt2BpeSynthetic\\.MergesByRankNotLeftToRight$"),
    Mutation("surrogate-pair", "a JSON surrogate pair decoded without the 0x10000 offset",
             "modules/tokenizer/flat_json.cpp", "u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);",
             "u = ((u - 0xD800) << 10) + (lo - 0xDC00);", "^FlatJson\\.ReadsEveryEscape$"),
    # ---- the hazards a review found (issue: what NCCL, a host that runs ahead and the compiler find) ----
    Mutation("fence-in-forward", "a Kokkos::fence() (a whole-device wait) in a block's forward",
             "src/model/stage_block.cpp", FWD, FWD.replace("p);\n", "p);\n  Kokkos::fence();\n"),
             "^(mpi_tests_np2|device_sync_rule)$"),
    Mutation("stream-fence-in-forward", "an execution space's fence (a host wait for its stream) in a block's forward",
             "src/model/stage_block.cpp", FWD, FWD.replace("p);\n", "p);\n  ExecSpace().fence();\n"),
             "^mpi_tests_np2$"),
    Mutation("host-copy-in-forward", "a block's forward copies device data into pageable host memory (the host waits on a GPU)",
             "src/model/stage_block.cpp", FWD,
             FWD.replace("p);\n", "p);\n  { static std::vector<T> h(1 << 16); Kokkos::deep_copy(ExecSpace(), "
                         "Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), 8), Vec<T>(const_cast<T*>(pu), 8)); }\n"),
             "^mpi_tests_np2$"),
    Mutation("allocation-in-forward", "a View allocated in a block's forward (step 1 included)",
             "src/model/stage_block.cpp", FWD, FWD.replace("p);\n", "p);\n  Buffer<T> scratch(\"scratch\", 16);\n"),
             "^mpi_tests_np2$"),
    Mutation("no-executor-reserve", "the executor's slots and message buffers left to the first step to make",
             "src/train/rank_engine.cpp", "  exec->reserve(train_actions, eval_actions, mb_size);\n", "",
             "^mpi_tests_np2$"),
    Mutation("no-reducer-reserve", "the reducer's bf16 and staging buffers not made a bucket each (reductions wait on earlier ones)",
             "src/parallel/grad_sink.cpp",
             "  p_.reducer.reserve(true);  // each microbatch's reduction adds into the shard\n", "",
             "^mpi_tests_np2$"),
    Mutation("pageable-tokens", "a microbatch's tokens copied from pageable host memory (a host wait on a GPU)",
             "src/model/stage.hpp",
             "  using PinnedInts = Kokkos::View<const int*, Kokkos::LayoutRight, PinnedMemory, Kokkos::MemoryUnmanaged>;",
             "  using PinnedInts = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;",
             "^mpi_tests_np2$"),
    Mutation("fence-not-counted", "the device counters ignore fences (every wait check would pass)",
             "src/tensor/device_counters.cpp", "  ++(device_id == 0 ? device_waits : stream_waits);",
             "  (void)device_id;", "^DeviceCounters\\.SeeEveryWaitAllocationCopyAndLaunch$"),
    Mutation("pageable-not-counted", "copies with pageable host memory not told apart from page-locked ones",
             "src/tensor/device_counters.cpp",
             "bool is_pageable(const char* space) { return !std::strcmp(space, \"Host\"); }",
             "bool is_pageable(const char* space) { return !std::strcmp(space, \"HostPinned\"); }",
             "^DeviceCounters\\.SeeEveryWaitAllocationCopyAndLaunch$"),
    Mutation("ordered-wait-in-group", "mpi-ordered lets a wait run inside an open group (NCCL's is fatal)",
             "modules/comm/mpi_issue_order.cpp", "  if (depth() > 0)\n", "  if (depth() > 99)\n", "^mpi_tests_np2$"),
    Mutation("ordered-blocking-order-after", "mpi-ordered's order_after blocks the host (it never runs ahead of its device)",
             "modules/comm/mpi_communicator.cpp",
             "  stream_waits().push_back({this, r.id});              // the stream waits before its next work\n  r.id = -1;",
             "  await_retired(r.id);\n  release(r);", "^mpi_tests_np2$"),
    Mutation("auto-no-reason", "parallel.comm = auto falls back to host-staged MPI without saying why",
             "modules/comm/auto.cpp", "  if (why)\n", "  if (false && why)\n", "^mpi_tests_np2$"),
    Mutation("tensor-limit", "the 2^31 tensor limit checked against 2^33 (a wrapping layout accepted)",
             "src/perf/layout_check.cpp", "constexpr int64_t kMaxTensorElements = (int64_t(1) << 31) - 1;",
             "constexpr int64_t kMaxTensorElements = (int64_t(1) << 33) - 1;",
             "^StepModel\\.RefusesWhatTheTrainerRefuses$"),
    Mutation("resume-skips-published", "a resume passes over the checkpoint `latest` names for an older one",
             "src/formats/checkpoint_dir.cpp", "  if (!latest.empty()) out.push_back(latest);",
             "  if (false) out.push_back(latest);", "^slurm_multinode$"),
]


def sh(cmd, timeout=None):
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the build folder of this tree (default build)")
    ap.add_argument("--only", default="", help="comma-separated mutation names")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    if args.list:
        for m in chosen:
            print(f"{m.name:28s} {m.what}\n{'':28s} {m.path}; ctest -R '{m.tests}'")
        return 0
    build = os.path.abspath(args.build)
    results = []
    for m in chosen:
        path = os.path.join(ROOT, m.path)
        with open(path) as f:
            original = f.read()
        if original.count(m.old) != 1:
            print(f"{m.name}: the text to mutate occurs {original.count(m.old)} times in {m.path}; skipped")
            results.append((m, "NOT APPLIED", ""))
            continue
        # Restored whatever happens (Ctrl-C included).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with open(path, "w") as f:
                f.write(original.replace(m.old, m.new))
            t0 = time.time()
            rc, out = sh(["cmake", "--build", build, "-j2"])
            if rc != 0:
                results.append((m, "CAUGHT (does not build)", out[-300:]))
            else:
                rc, out = sh(["ctest", "--test-dir", build, "-R", m.tests, "--output-on-failure"], timeout=1800)
                failed = re.findall(r"^\s*\d+ - (\S+)", out, re.M)
                names = ", ".join(failed) or "(see the output)"
                results.append((m, f"CAUGHT by {names}" if rc != 0 else "SURVIVED", out[-600:] if rc == 0 else ""))
            print(f"{m.name}: {results[-1][1]} ({time.time() - t0:.0f} s)", flush=True)
        finally:
            with open(path, "w") as f:
                f.write(original)
            signal.signal(signal.SIGINT, previous)
    sh(["cmake", "--build", build, "-j2"])  # back to the tree as it is
    print("\nmutation                     result")
    for m, result, detail in results:
        print(f"{m.name:28s} {result}")
        if result == "SURVIVED":
            print(detail)
    return 0 if all(r.startswith("CAUGHT") for _, r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
