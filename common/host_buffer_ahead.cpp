#include "common/host_buffer_ahead.h"

#include <system_error>
#include <utility>

#include "common/library_thread.h"
#include "modelcast/error.h"

namespace modelcast {

void HostBufferAhead::start(std::size_t bytes) {
  future_ = {};
  try {
    AsyncSignalsBlocked blocked;  // the thread std::async starts is the library's (library_thread.h)
    future_ = std::async(std::launch::async, [bytes] { return HostBuffer(bytes); });
    bytes_ = bytes;
  } catch (const std::system_error&) {
    // No thread to spare: the buffer is allocated when it is needed, as without this.
  }
}

std::optional<HostBuffer> HostBufferAhead::take(std::size_t bytes) {
  if (!future_.valid()) return std::nullopt;
  auto made = std::exchange(future_, {});
  if (bytes_ < bytes || bytes_ / 2 > bytes) return std::nullopt;
  try {
    return made.get();
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace modelcast
