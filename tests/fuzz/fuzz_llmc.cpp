// libFuzzer harness: the llm.c model file reader (formats/llmc_io.hpp). The input is a whole model
// file. Accepted outcomes: InputError, or a model whose parameters fill our layout exactly with
// the padded vocabulary rows of wte zero; such a model must also write back and read back equal.
#include <cstdint>
#include <cstring>

#include "fuzz_common.hpp"
#include "formats/llmc_io.hpp"
#include "model/param_layout.hpp"

using namespace gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::FdLeakCheck fd_leak_check;
  static fuzz::InputFile file("llmc"), copy("llmc-copy");
  const std::string& path = file.write(data, size);
  (void)is_llmc_model(path);
  fuzz::expect_only_input_errors("read_llmc_model", [&] {
    const LlmcModel m = read_llmc_model(path);
    const ParamLayout layout(m.config);
    if (m.params.size() != layout.total())
      fuzz::finding("read ", m.params.size(), " parameters, the layout has ", layout.total());
    const size_t C = size_t(m.config.n_embd);
    for (size_t i = size_t(m.config.vocab_size) * C; i < size_t(m.config.padded_vocab()) * C; ++i)
      if (m.params[i] != 0.0f) fuzz::finding("padded wte row ", i / C, " is not zero");
    write_llmc_model(copy.path(), m.config, m.params);
    const LlmcModel back = read_llmc_model(copy.path());
    if (!(back.config == m.config) ||
        std::memcmp(back.params.data(), m.params.data(), m.params.size() * sizeof(float)) != 0)
      fuzz::finding("write_llmc_model + read_llmc_model changed the model");
  });
  return 0;
}
