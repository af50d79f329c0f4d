// A version the daemon serves to its clients: where its bytes are (a shared-memory buffer),
// what they are (the attach manifest), and what keeps the buffer from being reused.
#pragma once

#include <chrono>
#include <memory>

#include "daemon/attach/protocol.h"
#include "daemon/shm_buffer.h"
#include "modelcast/model_view.h"

namespace modelcastd {

// Immutable once made; shared by the model's "current" pointer, client holds, the repository
// writer and hooks. While any reference is alive its `view` pins the Consumer's receive buffer
// exactly as a ModelView does for an in-process reader, so the bytes do not change.
struct ServedVersion {
  std::string model;
  attach::Manifest manifest;          // hold = 0; tensor offsets are within `buffer`
  std::shared_ptr<ShmBuffer> buffer;
  // The Consumer's version whose receive buffer `buffer` is; empty for a version copied into a
  // buffer of the daemon's (shaped or assembled views) or recovered from the repository.
  modelcast::ModelView view;
  std::chrono::system_clock::time_point installed_at;  // recovered: when the repository wrote it
  std::chrono::nanoseconds update_latency{0};  // producer's publish() until installed here
  std::string repository_path;        // set when recovered from disk

  const std::byte* data(const attach::TensorEntry& t) const { return buffer->memory().data() + t.offset; }
};

using ServedPtr = std::shared_ptr<const ServedVersion>;

}  // namespace modelcastd
