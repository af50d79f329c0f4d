#include "core/consumer/consumer_options.h"

#include "core/model/tensor_selection.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>

#include "device/device_runtime.h"
#include "transports/delivery_path.h"
#include "modelcast/error.h"

namespace modelcast::consumer {
namespace {

std::string default_consumer_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

}  // namespace

std::uint64_t random_session() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device();
}

std::uint64_t model_size_cap(const ConsumerOptions& options) {
  std::uint64_t cap = 0;
  if (!options.caller_buffers.empty()) {
    for (auto buffer : options.caller_buffers) cap = std::max<std::uint64_t>(cap, buffer.size());
  } else {
    struct sysinfo info {};
    cap = sysinfo(&info) == 0 ? std::uint64_t{info.totalram} * info.mem_unit / 2 : std::uint64_t{1} << 40;
  }
  if (options.max_model_bytes != 0) cap = std::min<std::uint64_t>(cap, options.max_model_bytes);
  return cap;
}

ConsumerOptions checked(ConsumerOptions options) {
  if (options.producer_endpoint.empty()) throw Error(ErrorCode::kInvalidArgument, "producer_endpoint is empty");
  if (options.model_name.empty()) throw Error(ErrorCode::kInvalidArgument, "model_name is empty");
  if (options.consumer_name.empty()) options.consumer_name = default_consumer_name();
  if (options.caller_buffers.empty() && options.buffers < 2) {
    throw Error(ErrorCode::kInvalidArgument, "buffers must be >= 2, got " + std::to_string(options.buffers));
  }
  if (!options.caller_buffers.empty() && options.caller_buffers.size() < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "caller_buffers needs >= 2 buffers, got " + std::to_string(options.caller_buffers.size()));
  }
  for (const auto& spec : options.expected_layout) {
    if (spec.name.empty()) throw Error(ErrorCode::kInvalidArgument, "expected_layout has a tensor with an empty name");
  }
  TensorSelection::check(options.wants);
  if (options.memory == MemoryKind::kCuda) {
    if (!options.caller_buffers.empty()) {
      throw Error(ErrorCode::kInvalidArgument, "caller_buffers are host memory: not with memory = cuda");
    }
    auto& runtime = device::require_device_runtime("a consumer receiving into device memory");
    if (options.device < 0 || options.device >= runtime.device_count()) {
      throw Error(ErrorCode::kInvalidArgument, "device " + std::to_string(options.device) + " does not exist (" +
                                                   std::to_string(runtime.device_count()) + " devices)");
    }
  }
  if (!options.group.empty()) {
    if (options.group_size == 0) {
      throw Error(ErrorCode::kInvalidArgument, "group '" + options.group + "' needs group_size (its members, >= 1)");
    }
    // One buffer serves readers, one holds the version waiting for the group, one receives.
    const std::size_t buffers = options.caller_buffers.empty() ? options.buffers : options.caller_buffers.size();
    if (buffers < 3) {
      throw Error(ErrorCode::kInvalidArgument, "a group member needs >= 3 buffers (serving, prepared, receiving), got " +
                                                   std::to_string(buffers));
    }
  } else if (options.group_size != 0) {
    throw Error(ErrorCode::kInvalidArgument, "group_size is set but group is empty");
  }
  parse_delivery_path(options.path);  // throws kInvalidArgument listing the valid names
  if (options.transfer_timeout.count() <= 0) throw Error(ErrorCode::kInvalidArgument, "transfer_timeout must be positive");
  return options;
}

}  // namespace modelcast::consumer
