#include "transports/transport.h"

#include "modelcast/error.h"

namespace modelcast::transport {

void check_range(const char* what, std::size_t offset, std::size_t length, std::size_t size) {
  if (offset > size || length > size - offset) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " range [" + std::to_string(offset) + ", +" +
                                                 std::to_string(length) + ") lies outside a region of " +
                                                 std::to_string(size) + " bytes");
  }
}

}  // namespace modelcast::transport
