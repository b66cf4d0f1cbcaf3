#include "tensor/traffic.hpp"

namespace gpt2 {

namespace {
thread_local Traffic t_traffic;
}

void count_traffic(uint64_t read, uint64_t written) {
  t_traffic.read += read;
  t_traffic.written += written;
}

Traffic traffic() { return t_traffic; }

}  // namespace gpt2
