#include "core/consumer/consumer_options.h"

#include "core/model/tensor_selection.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "common/duration_option.h"
#include "common/shown_text.h"
#include "core/model/manifest.h"
#include "core/wire/protocol.h"
#include "core/wire/zmq_channel.h"
#include "device/device_runtime.h"
#include "transports/delivery_path.h"
#include "modelcast/error.h"

namespace modelcast::consumer {
std::string default_consumer_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

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

namespace {

// Caller buffers are written while views of the others are read: one that overlaps another
// would change a view under its reader. Each must also hold something and keep 8-byte tensors
// aligned (the producer aligns tensors to 256 bytes from the buffer's start).
void check_caller_buffers(const std::vector<std::span<std::byte>>& buffers) {
  constexpr std::uintptr_t kAlignment = 16;
  std::vector<std::pair<std::uintptr_t, std::size_t>> spans;  // start, index
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto name = "caller_buffers[" + std::to_string(i) + "]";
    if (buffers[i].empty()) throw Error(ErrorCode::kInvalidArgument, name + " is empty");
    const auto start = reinterpret_cast<std::uintptr_t>(buffers[i].data());
    if (start % kAlignment != 0) {
      throw Error(ErrorCode::kInvalidArgument, name + " starts at an address that is not a multiple of " +
                                                   std::to_string(kAlignment) + " bytes: tensors in it would be misaligned");
    }
    spans.emplace_back(start, i);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t k = 1; k < spans.size(); ++k) {
    const auto [start, i] = spans[k - 1];
    const auto [next, j] = spans[k];
    if (next - start < buffers[i].size()) {
      throw Error(ErrorCode::kInvalidArgument, "caller_buffers[" + std::to_string(i) + "] and caller_buffers[" +
                                                   std::to_string(j) + "] overlap: each buffer must be memory of its own");
    }
  }
}

}  // namespace

ConsumerOptions checked(ConsumerOptions options) {
  if (options.producer_endpoint.empty()) throw Error(ErrorCode::kInvalidArgument, "producer_endpoint is empty");
  wire::check_no_nul(options.producer_endpoint, "producer_endpoint");
  if (options.model_name.empty()) throw Error(ErrorCode::kInvalidArgument, "model_name is empty");
  // No producer could serve another name: it would be refused at the join, or never answered.
  if (auto why = name_problem(options.model_name)) throw Error(ErrorCode::kInvalidArgument, "model_name " + *why);
  if (options.consumer_name.empty()) options.consumer_name = default_consumer_name();
  // The producer refuses a join whose names it could not show in its logs: say so here.
  if (auto why = name_problem(options.consumer_name)) {
    throw Error(ErrorCode::kInvalidArgument, "consumer_name " + shown_text(options.consumer_name) + " " + *why);
  }
  if (auto why = name_problem(options.group)) {
    throw Error(ErrorCode::kInvalidArgument, "group " + shown_text(options.group) + " " + *why);
  }
  // Each buffer holds a whole version while a view holds it: more than a thousand is a typo.
  if (options.caller_buffers.empty() && (options.buffers < 2 || options.buffers > 1024)) {
    throw Error(ErrorCode::kInvalidArgument, "buffers must be between 2 and 1024, got " + std::to_string(options.buffers));
  }
  if (!options.caller_buffers.empty() && options.caller_buffers.size() < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "caller_buffers needs >= 2 buffers, got " + std::to_string(options.caller_buffers.size()));
  }
  check_caller_buffers(options.caller_buffers);
  std::set<std::string> expected;
  for (const auto& spec : options.expected_layout) {
    // As the producer checks what it registers: an unknown dtype or an unusable name was taken
    // here, and then every version was rejected ("expected unknown").
    try {
      check_spec(spec, ErrorCode::kInvalidArgument);
    } catch (const Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("expected_layout: ") + e.what());
    }
    if (!expected.insert(spec.name).second) {
      throw Error(ErrorCode::kInvalidArgument, "expected_layout lists '" + spec.name + "' twice");
    }
  }
  TensorSelection::check(options.wants);
  if (const auto bytes = protocol::fetch_request_bytes(options.wants); bytes > protocol::kMaxWantsBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                "wants: " + std::to_string(options.wants.size()) + " wants take " + std::to_string(bytes) +
                    " bytes in a request, more than the " + std::to_string(protocol::kMaxWantsBytes) +
                    " a request may give them (a producer reads requests of at most " +
                    std::to_string(protocol::kRequestLimits.max_message_bytes) +
                    " bytes): name fewer tensors (want \"*\" for the rest, or nothing of \"*\" and name the few to "
                    "keep)");
  }
  if (options.memory != MemoryKind::kHost && options.memory != MemoryKind::kCuda) {
    throw Error(ErrorCode::kInvalidArgument,
                "memory " + std::to_string(static_cast<int>(options.memory)) + " is no memory kind (host or cuda)");
  }
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
  check_duration_option("producer_timeout", options.producer_timeout);
  check_duration_option("transfer_timeout", options.transfer_timeout);
  return options;
}

}  // namespace modelcast::consumer
