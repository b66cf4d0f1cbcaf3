#include "tensor/device_work.hpp"

namespace gpt2 {

namespace {
DeviceWorkHook g_hook = nullptr;
}

void set_device_work_hook(DeviceWorkHook hook) { g_hook = hook; }

void device_work() {
  if (g_hook) g_hook();
}

}  // namespace gpt2
