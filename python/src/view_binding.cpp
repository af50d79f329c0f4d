// ModelView for Python: metadata, and the tensors as NumPy arrays (buffer of the view, no copy)
// or as DLPack capsules (for torch, no copy). Whatever is handed out keeps a ModelView copy alive,
// so the bytes stay valid exactly as long as a Python object uses them, after newer versions
// arrive and after the Consumer is gone. A device consumer's views hold device memory: their
// DLPack capsules say kDLCUDA and the device, and NumPy access is refused (not host bytes).
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <bit>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "arguments.h"
#include "bindings.h"
#include "errors.h"
#include "modelcast/error.h"
#include "modelcast/model_view.h"

namespace modelcast::python {
namespace {

const ModelView& require_version(const ModelView& v) {
  if (v.empty()) throw Error(ErrorCode::kState, "the ModelView is empty (no version installed yet)");
  return v;
}

// The `part`-th view of `name`: a tensor the consumer keeps as several boxes (wants) has one view
// per box, in its want's order; part 0 is the first (the only one of any other tensor).
TensorView part_of(const ModelView& view, const std::string& name, std::size_t part) {
  const ModelView& v = require_version(view);
  if (part == 0) return v.tensor(name);  // names the tensor if absent
  auto parts = v.parts(name);
  if (part >= parts.size()) {
    throw Error(ErrorCode::kInvalidArgument, "tensor '" + name + "' has " + std::to_string(parts.size()) +
                                                 " part(s) in version " + std::to_string(v.version()) + ": no part " +
                                                 std::to_string(part));
  }
  return parts[part];
}

// NumPy type name for a dtype; nullptr where NumPy has none (bf16).
const char* numpy_type(DType d) {
  switch (d) {
    case DType::kF64: return "float64";
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return nullptr;  // see Bf16As
    case DType::kI64: return "int64";
    case DType::kI32: return "int32";
    case DType::kI16: return "int16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kF8E4M3: return "uint8";  // the raw codes: NumPy has no fp8
  }
  return nullptr;
}

// DLPack 0.6 has no bool code: bool travels as 8-bit unsigned, and the Python side
// reinterprets it (torch's own DLPack export of bool does the same in this version).
DLDataType dlpack_type(DType d) {
  switch (d) {
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI16: return {kDLInt, 16, 1};
    case DType::kI8: return {kDLInt, 8, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
    case DType::kBool: return {kDLUInt, 8, 1};
    case DType::kF8E4M3: return {kDLUInt, 8, 1};  // DLPack 0.6 and torch 1.13 have no fp8: the raw codes
  }
  return {kDLUInt, 8, 1};
}

// What a DLPack consumer (torch) holds: the view copy keeps the bytes alive until it calls the
// deleter, which needs no GIL (no Python object inside).
struct DlpackOwner {
  DLManagedTensor managed{};
  ModelView view;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};

void delete_dlpack_owner(DLManagedTensor* t) { delete static_cast<DlpackOwner*>(t->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumer renames it "used_dltensor".
void dlpack_capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t && t->deleter) t->deleter(t);
}

py::capsule make_dlpack(const ModelView& view, const std::string& name, std::size_t part) {
  const TensorView tv = part_of(view, name, part);
  auto owner = std::make_unique<DlpackOwner>();
  owner->view = view;
  owner->shape = tv.shape();
  owner->strides.assign(owner->shape.size(), 1);
  for (std::size_t i = owner->shape.size(); i-- > 1;) owner->strides[i - 1] = owner->strides[i] * owner->shape[i];
  DLTensor& t = owner->managed.dl_tensor;
  t.data = const_cast<void*>(tv.data);  // read-only by contract (see ModelView.tensor in Python)
  t.device = tv.spec->memory == MemoryKind::kCuda ? DLDevice{kDLCUDA, tv.spec->device} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(owner->shape.size());
  t.dtype = dlpack_type(tv.dtype());
  t.shape = owner->shape.data();
  t.strides = owner->strides.data();
  t.byte_offset = 0;
  owner->managed.manager_ctx = owner.get();
  owner->managed.deleter = &delete_dlpack_owner;
  DLManagedTensor* managed = &owner.release()->managed;
  return py::capsule(managed, "dltensor", &dlpack_capsule_destructor);
}

// What array() makes of a bf16 tensor, which NumPy has no type for: refused unless the caller
// says (a silent choice would hand out either raw bits read as integers or a copy where every
// other array is a view).
enum class Bf16As { kRefuse, kBits, kF32 };

Bf16As bf16_as(const py::object& choice, const char* where) {
  if (choice.is_none()) return Bf16As::kRefuse;
  const std::string c = text_argument(choice, std::string(where) + ": bf16");
  if (c == "bits") return Bf16As::kBits;
  if (c == "f32") return Bf16As::kF32;
  throw Error(ErrorCode::kInvalidArgument,
              std::string(where) + ": bf16 must be None, 'bits' or 'f32', not '" + c + "'");
}

// A read-only NumPy array over the tensor's bytes whose base is the Python ModelView `self`; of
// a bf16 tensor with Bf16As::kF32, an exact float32 copy (bf16 is the upper half of an f32; the
// library's converters are not exported to this module).
py::array make_array(const py::object& self, const std::string& name, std::size_t part, Bf16As bf16) {
  const TensorView tv = part_of(self.cast<const ModelView&>(), name, part);
  if (tv.spec->memory == MemoryKind::kCuda)
    throw Error(ErrorCode::kInvalidArgument,
                "tensor '" + name + "' is in device memory (cuda:" + std::to_string(tv.spec->device) +
                    "), which NumPy cannot read; use ModelView.tensor() or torch.from_dlpack(view.dlpack(name)) "
                    "for a CUDA tensor");
  std::vector<py::ssize_t> shape(tv.shape().begin(), tv.shape().end());
  const char* type = numpy_type(tv.dtype());
  if (tv.dtype() == DType::kBF16) {
    if (bf16 == Bf16As::kRefuse)
      throw Error(ErrorCode::kInvalidArgument,
                  "tensor '" + name + "' is bf16, which NumPy has no type for: pass bf16='f32' for a float32 "
                  "copy or bf16='bits' for its raw 16-bit codes, or use ModelView.tensor() for a torch tensor");
    if (bf16 == Bf16As::kF32) {
      py::array_t<float> copy(shape);
      const auto* in = static_cast<const std::uint16_t*>(tv.data);
      float* out = copy.mutable_data();
      const auto n = static_cast<std::size_t>(copy.size());
      for (std::size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in[i]) << 16);
      copy.attr("setflags")(py::arg("write") = false);
      return copy;
    }
    type = "uint16";
  }
  if (!type)
    throw Error(ErrorCode::kInvalidArgument,
                "tensor '" + name + "' is " + std::string(dtype_name(tv.dtype())) +
                    ", which NumPy has no type for; use ModelView.tensor() for a torch tensor");
  py::array a(py::dtype(type), shape, {}, tv.data, self);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

// A torch tensor over the tensor's bytes (DLPack, no copy); imports torch on first use.
py::object make_torch_tensor(const ModelView& view, const std::string& name, std::size_t part) {
  const DType dtype = part_of(view, name, part).dtype();
  py::object t = py::module_::import("torch.utils.dlpack").attr("from_dlpack")(make_dlpack(view, name, part));
  if (dtype == DType::kBool) t = t.attr("view")(py::module_::import("torch").attr("bool"));
  return t;
}

// (DLPack device type, device id) of a tensor, as __dlpack_device__ returns them.
py::tuple dlpack_device(const ModelView& view, const std::string& name, std::size_t part) {
  const TensorSpec& spec = *part_of(view, name, part).spec;
  if (spec.memory == MemoryKind::kCuda) return py::make_tuple(static_cast<int>(kDLCUDA), spec.device);
  return py::make_tuple(static_cast<int>(kDLCPU), 0);
}

// One tensor of a view as a DLPack producer (__dlpack__ / __dlpack_device__), the protocol
// torch.from_dlpack and other array libraries take; holds the view, so the bytes stay valid.
struct ViewTensor {
  ModelView view;
  std::string name;
  std::size_t part = 0;
};

// The (name, part) arguments of a ModelView method, checked by us (arguments.h says why).
struct TensorAt {
  std::string name;
  std::size_t part;
};

TensorAt tensor_at(const py::handle& name, const py::handle& part, const char* method) {
  const std::string prefix = std::string("ModelView.") + method + "(): ";
  return {text_argument(name, prefix + "name"), index_argument(part, prefix + "part")};
}

// (offset, whole_shape) of a part, or None for a whole tensor.
py::object box_of(const TensorView& t) {
  if (!t.is_part()) return py::none();
  return py::make_tuple(py::tuple(py::cast(std::vector<std::int64_t>(t.box_offset.begin(), t.box_offset.end()))),
                        py::tuple(py::cast(std::vector<std::int64_t>(t.whole_shape.begin(), t.whole_shape.end()))));
}

// The DLPack protocol's keywords: an exporter that cannot honour copy=True or another dl_device
// must raise BufferError, not hand out an alias of the shared version (a caller asking for a
// copy then wrote into the version every reader sees).
void check_dlpack_keywords(const ViewTensor& t, const py::kwargs& keywords) {
  for (const auto& [key, value] : keywords) {
    const auto name = py::str(key).cast<std::string>();
    if (name == "max_version") continue;
    if (name == "copy") {
      if (!value.is_none() && !py::isinstance<py::bool_>(value)) {
        throw py::type_error("__dlpack__(copy=...) takes True, False or None, not " +
                             py::str(py::type::of(value).attr("__name__")).cast<std::string>());
      }
      if (!value.is_none() && value.cast<bool>()) {
        throw py::buffer_error("__dlpack__(copy=True): a ModelView's tensors are shared with every reader "
                               "and never copied here; take them without a copy and copy the result");
      }
      continue;
    }
    if (name == "dl_device") {
      if (value.is_none()) continue;
      py::tuple own = dlpack_device(t.view, t.name, t.part);
      // A (type, id) pair, as a tuple or any sequence.
      const bool pair = py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value);
      if (!pair || !py::tuple(py::reinterpret_borrow<py::object>(value)).equal(own)) {
        throw py::buffer_error("__dlpack__(dl_device=" + py::repr(value).cast<std::string>() + "): tensor '" + t.name +
                               "' is on " + py::repr(own).cast<std::string>() + " and is not copied elsewhere here");
      }
      continue;
    }
    throw py::type_error("__dlpack__() got an unexpected keyword argument '" + name + "'");
  }
}

}  // namespace

void bind_view(py::module_& m) {
  py::class_<ViewTensor>(m, "ViewTensor",
                         "One tensor of a ModelView as a DLPack producer: torch.from_dlpack(t) (or any array "
                         "library's from_dlpack) shares its bytes without a copy, on the host or on the device "
                         "of a Consumer with memory='cuda'. Holds the version alive.")
      .def("__dlpack__", [](const ViewTensor& t, const py::object& stream, const py::kwargs& keywords) {
        // A version becomes visible only after its bytes are complete and checked on the device,
        // so there is no pending work for the consumer's stream to wait for.
        (void)stream;
        check_dlpack_keywords(t, keywords);
        return make_dlpack(t.view, t.name, t.part);
      }, py::arg("stream") = py::none(),
           "A DLPack capsule over the tensor (no copy). `stream` is accepted and needs no ordering: "
           "the version's bytes are complete before the version is visible. `max_version` is "
           "accepted (the capsule is unversioned, as the protocol allows); `copy=True` and a "
           "`dl_device` other than the tensor's raise BufferError (a view's bytes are shared, "
           "never copied here: copy the result).")
      .def("__dlpack_device__", [](const ViewTensor& t) { return dlpack_device(t.view, t.name, t.part); },
           "(device type, device id): (1, 0) for host memory (kDLCPU), (2, N) for cuda:N (kDLCUDA).")
      .def_property_readonly("name", [](const ViewTensor& t) { return t.name; })
      .def_property_readonly("spec", [](const ViewTensor& t) { return *part_of(t.view, t.name, t.part).spec; })
      .def_property_readonly("data_ptr", [](const ViewTensor& t) {
        return reinterpret_cast<std::uintptr_t>(part_of(t.view, t.name, t.part).data);
      }, "Address of the bytes (a device pointer for device memory).")
      .def("__repr__", [](const ViewTensor& t) {
        const TensorSpec& spec = *part_of(t.view, t.name, t.part).spec;
        return "ViewTensor('" + t.name + "', version=" + std::to_string(t.view.version()) + ", " +
               (spec.memory == MemoryKind::kCuda ? "cuda:" + std::to_string(spec.device) : std::string("host")) + ")";
      });

  py::class_<ModelView>(m, "ModelView",
                        "One immutable version of the model. Holding it (or any array or tensor taken "
                        "from it) keeps its bytes valid and unchanged. Thread-safe; no GIL needed to hold.")
      .def_property_readonly("version", [](const ModelView& v) { return require_version(v).version(); })
      .def_property_readonly("step", [](const ModelView& v) { return require_version(v).step(); })
      .def_property_readonly("producer_incarnation",
                             [](const ModelView& v) { return require_version(v).producer_incarnation(); })
      .def_property_readonly("metadata", [](const ModelView& v) { return require_version(v).metadata(); })
      .def_property_readonly("update_latency_s", [](const ModelView& v) {
        return std::chrono::duration<double>(require_version(v).update_latency()).count();
      }, "Seconds from the producer's publish() call until this consumer installed the version.")
      .def("__len__", [](const ModelView& v) { return v.empty() ? std::size_t{0} : v.tensor_count(); },
           "The number of tensor views, as specs() lists them: a tensor kept in several boxes (parts()) "
           "counts once per box; 0 for an empty view.")
      .def("__contains__", [](const ModelView& v, const py::object& name) {
        // As a dict answers for a key of another type: not there (tensor names are str).
        // A str UTF-8 cannot encode (a lone surrogate) names no tensor either.
        if (!py::isinstance<py::str>(name) || v.empty()) return false;
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(name.ptr(), &size);
        if (utf8 == nullptr) {
          PyErr_Clear();
          return false;
        }
        return v.find(std::string_view(utf8, static_cast<std::size_t>(size))).has_value();
      })
      .def("specs", [](const ModelView& v) {
        std::vector<TensorSpec> specs;
        for (const auto& t : require_version(v).tensors()) specs.push_back(*t.spec);
        return specs;
      }, "TensorSpec of every tensor, in the producer's registration order.")
      .def("scales", [](const ModelView& v, const py::object& name, const py::object& part) {
        const auto at = tensor_at(name, part, "scales");
        auto t = part_of(v, at.name, at.part);
        return py::make_tuple(std::vector<float>(t.scales.begin(), t.scales.end()), t.scale_block);
      }, py::arg("name"), py::arg("part") = 0,
           "(scales, scale_block) of an f8e4m3 tensor the consumer converted: element i is its code's value "
           "times scales[i // scale_block] (scales[0] when scale_block is 0); ([], 0) for other tensors.")
      .def("box", [](const ModelView& v, const py::object& name, const py::object& part) {
             const auto at = tensor_at(name, part, "box");
             return box_of(part_of(v, at.name, at.part));
           },
           py::arg("name"), py::arg("part") = 0,
           "(offset, whole_shape) of a tensor this consumer keeps a part of (its `wants`): where the part "
           "starts in the whole tensor, per dimension, and the whole tensor's shape; the view's own shape "
           "is the part's. None for a whole tensor. `part` picks one of several boxes (see parts()).")
      .def("parts", [](const ModelView& v, const py::object& name) {
        py::list boxes;
        const std::string tensor = text_argument(name, "ModelView.parts(): name");
        for (const auto& t : require_version(v).parts(tensor)) boxes.append(box_of(t));
        return boxes;
      }, py::arg("name"),
           "The box of each view of `name`, in its want's order: one per box the consumer keeps (index them "
           "with the `part` argument of array(), tensor(), box(), scales(), dlpack()), [None] for a whole "
           "tensor, [] for one it does not keep.")
      .def("spec", [](const ModelView& v, const py::object& name, const py::object& part) {
        const auto at = tensor_at(name, part, "spec");
        return *part_of(v, at.name, at.part).spec;
      }, py::arg("name"), py::arg("part") = 0, "TensorSpec of `name`; InvalidArgumentError naming it if absent.")
      .def("array", [](const py::object& self, const py::object& name, const py::object& part,
                       const py::object& bf16) {
             const auto at = tensor_at(name, part, "array");
             return make_array(self, at.name, at.part, bf16_as(bf16, "ModelView.array()"));
           }, py::arg("name"), py::arg("part") = 0, py::kw_only(), py::arg("bf16") = py::none(),
           "A read-only NumPy array over the tensor's bytes in this version, no copy. Its base is this "
           "view, so it stays valid while the array lives. An f8e4m3 tensor gives its raw codes (uint8). "
           "A bf16 tensor, which NumPy has no type for, needs `bf16`: 'f32' for an exact float32 copy, "
           "'bits' for its raw codes (uint16, no copy). InvalidArgumentError if `name` is absent, if "
           "the tensor is bf16 and `bf16` is None, or if it is in device memory (Consumer with memory='cuda').")
      .def("data_ptr", [](const ModelView& v, const py::object& name, const py::object& part) {
        const auto at = tensor_at(name, part, "data_ptr");
        return reinterpret_cast<std::uintptr_t>(part_of(v, at.name, at.part).data);
      }, py::arg("name"), py::arg("part") = 0, "Address of the tensor's bytes inside this version (for zero-copy checks).")
      .def("tensor", [](const ModelView& v, const py::object& name, const py::object& part) {
             const auto at = tensor_at(name, part, "tensor");
             return make_torch_tensor(v, at.name, at.part);
           }, py::arg("name"), py::arg("part") = 0,
           "A torch tensor over the tensor's bytes in this version, no copy (DLPack); it keeps a copy of "
           "this view alive until torch frees it. Treat it as read-only: writing into it changes what "
           "every reader of this version sees (torch has no read-only tensors), and the later versions "
           "this consumer builds on it (a delta copies unchanged blocks from it). InvalidArgumentError if "
           "`name` is absent; ImportError without torch. For a Consumer with memory='cuda' it is a CUDA "
           "tensor (torch needs CUDA for that).")
      .def("names", [](const ModelView& v) {
        std::vector<std::string> names;
        std::set<std::string> seen;  // a tensor kept as several boxes has a view per box
        for (const auto& t : require_version(v).tensors()) {
          if (seen.insert(t.name()).second) names.push_back(t.name());
        }
        return names;
      }, "Tensor names, each once, in the order of the views (the producer's registration order); "
         "a tensor kept as several boxes is listed once (its boxes: parts(name)).")
      .def("arrays", [](const py::object& self, const py::object& bf16) {
        const Bf16As as = bf16_as(bf16, "ModelView.arrays()");
        py::dict d;
        for (const auto& t : require_version(self.cast<const ModelView&>()).tensors()) d[py::str(t.name())] = make_array(self, t.name(), 0, as);
        return d;
      }, py::kw_only(), py::arg("bf16") = py::none(),
         "{name: read-only NumPy array} for every tensor (see array(), and its `bf16` for bf16 tensors); "
         "of a tensor kept as several boxes, its first part (the others: array(name, part)).")
      .def("state_dict", [](const ModelView& v) {
        py::dict d;
        for (const auto& t : require_version(v).tensors()) d[py::str(t.name())] = make_torch_tensor(v, t.name(), 0);
        return d;
      }, "{name: torch tensor} for every tensor, no copy (see tensor()); suits Module.load_state_dict, "
         "which copies into the module's own parameters. Of a tensor kept as several boxes, its first "
         "part (the others: tensor(name, part)).")
      .def("dlpack", [](const ModelView& v, const py::object& name, const py::object& part) {
        auto at = tensor_at(name, part, "dlpack");
        part_of(v, at.name, at.part);  // InvalidArgumentError now for an absent name or part
        return ViewTensor{v, std::move(at.name), at.part};
      }, py::arg("name"), py::arg("part") = 0,
           "The tensor as a DLPack producer (a ViewTensor with __dlpack__ and __dlpack_device__), e.g. for "
           "torch.from_dlpack: no copy; kDLCUDA and the device for a Consumer with memory='cuda'. A bool "
           "tensor arrives as uint8 there (this DLPack version has no bool type): tensor() gives torch.bool.")
      .def("_dlpack", [](const ModelView& v, const py::object& name, const py::object& part) {
             const auto at = tensor_at(name, part, "_dlpack");
             return make_dlpack(v, at.name, at.part);
           }, py::arg("name"), py::arg("part") = 0,
           "A DLPack capsule over the tensor (owns a view copy until the consumer's deleter runs).")
      .def("__repr__", [](const ModelView& v) {
        if (v.empty()) return std::string("ModelView(empty)");
        return "ModelView(version=" + std::to_string(v.version()) + ", step=" + std::to_string(v.step()) +
               ", tensors=" + std::to_string(v.tensor_count()) + ")";
      });
}

}  // namespace modelcast::python
