#include "train/nonfinite.hpp"

#include <cmath>

namespace gpt2 {

std::string nonfinite_values(double loss, double grad_norm) {
  auto show = [](const char* what, double x) {
    return std::string(what) + " (" + (std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf") + ")";
  };
  std::string out;
  if (!std::isfinite(loss)) out = show("loss", loss);
  if (!std::isfinite(grad_norm)) out += (out.empty() ? "" : " and ") + show("gradient norm", grad_norm);
  return out;
}

}  // namespace gpt2
