#include "device/device_runtime.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

#include "modelcast/error.h"

namespace modelcast::device {
namespace {

// Parsed once per process: the device a process uses cannot change under its live buffers.
DeviceRuntime* select() {
  const char* env = std::getenv("MODELCAST_DEVICE");
  std::string_view choice = env ? env : "";
  if (choice == "none") return nullptr;
  if (choice == "simulated") return make_simulated_runtime().release();
  if (choice == "cuda" || choice.empty()) {
    auto cuda = make_cuda_runtime();
    if (!cuda && choice == "cuda") {
      throw Error(ErrorCode::kInvalidArgument,
                  "MODELCAST_DEVICE=cuda but this build has no CUDA or this machine no CUDA device");
    }
    return cuda.release();
  }
  throw Error(ErrorCode::kInvalidArgument,
              "MODELCAST_DEVICE='" + std::string(choice) + "': expected simulated, cuda or none");
}

}  // namespace

DeviceRuntime* device_runtime() {
  // Leaked on purpose (see the header); call_once so a throwing select() is retried next call.
  static std::once_flag once;
  static DeviceRuntime* runtime = nullptr;
  std::call_once(once, [] { runtime = select(); });
  return runtime;
}

DeviceRuntime& require_device_runtime(const std::string& why) {
  if (auto* runtime = device_runtime()) return *runtime;
  throw Error(ErrorCode::kState, why + " needs a device: this build has no CUDA or this machine no CUDA device "
                                       "(MODELCAST_DEVICE=simulated runs the device paths in host memory, for tests)");
}

}  // namespace modelcast::device
