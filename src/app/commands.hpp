#pragma once
// The gpt2 subcommands. Each registers its options on the CLI11 app and returns a function that runs
// it (exit status). train and sample run inside an Environment (MPI + Kokkos), as does
// simulate --measure-comm; the others do not.
#include <CLI/CLI.hpp>
#include <functional>
#include <initializer_list>
#include <map>

#include "tensor/precision.hpp"

namespace gpt2::app {

using Run = std::function<int()>;

// Exit statuses besides 0 (done), 1 (failure), 2 (bad input) and 3 (a rank hung: the watchdog).
constexpr int kExitStopped = 4;   // gpt2 train: stopped by a signal, the steps done saved
constexpr int kExitDiverged = 5;  // gpt2 train: a non-finite loss or gradient norm (train.nonfinite)

Run add_train(CLI::App& app);
Run add_prepare(CLI::App& app);
Run add_sample(CLI::App& app);
Run add_convert(CLI::App& app);
Run add_info(CLI::App& app);
Run add_simulate(CLI::App& app);
Run add_plan(CLI::App& app);
Run add_eval(CLI::App& app);

// gpt2 simulate CONFIG --batch FILE: one prediction per line of FILE ("-": standard input), one JSON
// line each (src/app/simulate_batch.cpp); hardware and precision: the defaults of a line.
int simulate_batch(const std::string& config, const std::string& file, const std::string& hardware,
                   Precision precision);

// The hardware file simulate and plan use without --hardware: this development box's.
std::string default_hardware();
// A validator for counts (--gpus, --top, ...): one line, "a positive whole number is needed, got 0",
// instead of CLI::PositiveNumber's range up to the largest double.
CLI::Validator positive_count();
// An option taking some of an enum's words (core/choice.hpp), read into the enum as the line is
// parsed: ->transform(word_choices({Precision::fp32, Precision::bf16})).
template <class E>
CLI::CheckedTransformer word_choices(std::initializer_list<E> allowed) {
  std::map<std::string, E> words;
  for (E e : allowed) words[word(e)] = e;
  return CLI::CheckedTransformer(words);
}

// Rank of this process as the launcher tells it (before MPI is up): 0 when not launched by MPI.
int launcher_rank();

}  // namespace gpt2::app
