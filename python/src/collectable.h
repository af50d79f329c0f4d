// Bound classes whose C++ objects hold Python callbacks, made visible to the garbage collector.
//
// The usual `self.consumer = Consumer(..., on_update=self.on_update)` is a cycle through the C++
// object (owner -> Consumer -> callback -> bound method -> owner). Python cannot see references
// a C++ object holds, so such a cycle was never collected: the consumer's threads, sockets and
// registration lived on, and its callbacks ran, until the process exited. With tp_traverse the
// collector sees the callbacks, and with tp_clear it breaks the cycle by dropping them (a
// library thread then finds no callback to call); the object then goes as any other, closing.
#pragma once

#include <pybind11/pybind11.h>

#include "py_callback.h"

namespace modelcast::python {

namespace detail {

// The bound C++ object of `self`, or null while it is not constructed (the collector may look
// during __init__, or after a failed one).
template <typename T>
T* constructed(PyObject* self) {
  auto* instance = reinterpret_cast<pybind11::detail::instance*>(self);
  auto holder = instance->get_value_and_holder(nullptr, false);
  return holder && holder.holder_constructed() ? static_cast<T*>(holder.value_ptr()) : nullptr;
}

}  // namespace detail

// The class option for T, whose `callbacks()` returns the PyCallbacks it holds (a container).
template <typename T>
pybind11::custom_type_setup collectable() {
  return pybind11::custom_type_setup([](PyHeapTypeObject* heap_type) {
    auto* type = &heap_type->ht_type;
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) -> int {
      Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it
      if (T* object = detail::constructed<T>(self)) {
        for (const auto& callback : object->callbacks()) Py_VISIT(callback.object());
      }
      return 0;
    };
    type->tp_clear = [](PyObject* self) -> int {
      if (T* object = detail::constructed<T>(self)) {
        for (auto& callback : object->callbacks()) callback.clear();
      }
      return 0;
    };
    // Out of the collector's sight before the object goes: the destructors close, which lets the
    // GIL go, and another thread's collection then found the half-freed object still tracked
    // and freed it a second time (the process aborted: "Tried to deallocate unregistered
    // instance"). pybind11 before 2.11 (Debian 12 ships 2.10) does not untrack in its
    // dealloc; untracking twice is harmless where it does.
    type->tp_dealloc = [](PyObject* self) {
      PyObject_GC_UnTrack(self);
      pybind11::detail::pybind11_object_dealloc(self);
    };
  });
}

}  // namespace modelcast::python
