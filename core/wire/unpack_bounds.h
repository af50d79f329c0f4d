// Container and string sizes a msgpack message may declare, bounded by the message itself.
//
// msgpack-c reserves room for a container's declared elements (a msgpack::object each, 24 bytes
// here) before it reads any. Static caps alone let a few bytes of nested headers, each declaring
// the cap, reserve megabytes before the decode fails as truncated. Every element takes at least
// one byte of the message (a map entry two), so a declared size past that can never be filled:
// capped there, a message reserves at most (depth + 1) x 24 bytes per byte of its own. Strings
// and binaries are not reserved (read in place, or copied once present): only their caps apply.
#pragma once

#include <algorithm>
#include <cstddef>

#include <msgpack.hpp>

namespace modelcast::wire {

inline msgpack::unpack_limit unpack_bounds(std::size_t message_bytes, std::size_t max_array, std::size_t max_map,
                                           std::size_t max_string, std::size_t max_binary, std::size_t max_depth) {
  return msgpack::unpack_limit(std::min(max_array, message_bytes), std::min(max_map, message_bytes / 2), max_string,
                               max_binary, 0, max_depth);
}

}  // namespace modelcast::wire
