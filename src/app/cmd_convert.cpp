// gpt2 convert --checkpoint F --out F.bin : export weights to llm.c's model file (version 3).
#include <cstdio>

#include "app/commands.hpp"
#include "formats/llmc_io.hpp"
#include "formats/model_file.hpp"

namespace gpt2::app {

Run add_convert(CLI::App& app) {
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("convert", "Export a checkpoint's weights to llm.c's model file format");
  c->add_option("--checkpoint", *in, "Our checkpoint file or folder, or an llm.c model file")->required();
  c->add_option("--out", *out, "llm.c model file to write (version 3, fp32, padded vocabulary)")->required();
  return [in, out]() -> int {
    const ModelFile m(*in, "--checkpoint");
    m.verify();
    const std::vector<float> params = m.read_all();
    write_llmc_model(*out, m.config(), params);
    std::printf("wrote %s (%s, %zu parameters)\n", out->c_str(), m.config().describe().c_str(), params.size());
    return 0;
  };
}

}  // namespace gpt2::app
