// Producers and Consumers whose last reference goes inside one of their own callbacks.
//
// Destroying one joins its service thread, which runs its callbacks, so a last reference dropped
// inside a callback (close() there, or a close() elsewhere while the callback still uses the
// object) would join that thread from itself, and std::thread aborts the process then. Dropped
// there, the object is destroyed on a thread of its own once the callback has returned; elsewhere
// at once, as before. Interpreter exit waits for those threads (an atexit hook, module.cpp):
// finalizing under them would end a thread that takes the GIL to drop a callback.
#pragma once

#include <functional>
#include <memory>

#include "py_callback.h"

namespace modelcast::python {

// Runs `destroy` on a thread of its own. Any thread; never blocks.
void destroy_later(std::function<void()> destroy);
// Blocks until every destroy_later has run. Call without the GIL (they may need it).
void wait_for_later_destructions();

// `object` owned so that its last reference, if dropped inside a library callback, is dropped
// through destroy_later.
template <typename T>
std::shared_ptr<T> destroyed_off_callback_threads(std::unique_ptr<T> object) {
  return std::shared_ptr<T>(object.release(), [](T* p) {
    if (!in_library_callback) {
      delete p;
      return;
    }
    destroy_later([p] { delete p; });
  });
}

}  // namespace modelcast::python
