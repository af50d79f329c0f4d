// Element types, tensor descriptions and key pairs: the small value types both sides share.
#include <pybind11/stl.h>

#include <limits>
#include <string>

#include "bindings.h"
#include "common/shown_text.h"
#include "errors.h"
#include "modelcast/keys.h"
#include "modelcast/tensor.h"
#include "modelcast/types.h"

namespace modelcast::python {
namespace {

DType dtype_from_name(const std::string& name) {
  auto d = parse_dtype(name);
  if (!d) throw_invalid("unknown dtype " + shown_text(name) + " (expected f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool or f8e4m3)");
  return *d;
}

}  // namespace

void bind_types(py::module_& m) {
  // Arguments go through the package's own checks (modelcast._dtypes, modelcast._service), as
  // every other call's do: pybind11's casts took a shape of [True] as [1], refused NumPy and torch
  // dtypes, and raised a TypeError naming no argument.
  m.def("dtype_size", [](const py::object& dtype) {
          auto name = py::module_::import("modelcast._dtypes").attr("dtype_name")(dtype).cast<std::string>();
          return dtype_size(dtype_from_name(name));
        },
        py::arg("dtype"),
        "Bytes per element of `dtype`: a modelcast name ('f32', 'bf16', ...), a NumPy or a torch dtype. "
        "Raises InvalidArgumentError for one modelcast does not carry.");
  m.def("dtype_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i <= static_cast<int>(DType::kF8E4M3); ++i) names.emplace_back(dtype_name(static_cast<DType>(i)));
    return names;
  }, "The dtype names modelcast knows, in wire order.");

  py::class_<TensorSpec>(m, "TensorSpec", "Name, dtype (a modelcast dtype name) and shape of one tensor, and where its bytes live.")
      .def(py::init([](const py::object& name, const py::object& dtype, const py::object& shape) {
             auto service = py::module_::import("modelcast._service");
             TensorSpec s;
             s.name = service.attr("text")("TensorSpec: name", name).cast<std::string>();
             s.dtype = dtype_from_name(py::module_::import("modelcast._dtypes").attr("dtype_name")(dtype).cast<std::string>());
             // Negative extents are let through to the size check below, which names them.
             s.shape = service.attr("integers")("TensorSpec: shape of " + shown_text(s.name), shape,
                                                std::numeric_limits<std::int64_t>::min(),
                                                std::numeric_limits<std::int64_t>::max())
                           .cast<std::vector<std::int64_t>>();
             // size_bytes would otherwise wrap (a negative extent, a size past 2^64 bytes).
             if (!s.checked_size_bytes()) {
               throw Error(ErrorCode::kInvalidArgument, "TensorSpec '" + s.name +
                                                            "': a negative extent or more bytes than 64 bits can count");
             }
             return s;
           }),
           py::arg("name"), py::arg("dtype"), py::arg("shape"),
           "`dtype` as in dtype_size; `shape` a sequence of integers (not bools). Raises InvalidArgumentError "
           "for a dtype modelcast does not carry, a shape that is no sequence of integers, a negative extent "
           "or a size past 2^64 bytes.")
      .def_readonly("name", &TensorSpec::name)
      .def_property_readonly("dtype", [](const TensorSpec& s) { return std::string(dtype_name(s.dtype)); })
      .def_readonly("shape", &TensorSpec::shape)
      .def_property_readonly("size_bytes", &TensorSpec::size_bytes)
      .def_property_readonly("memory", [](const TensorSpec& s) { return std::string(memory_kind_name(s.memory)); },
                             "Where the bytes live: 'host' or 'cuda'.")
      .def_readonly("device", &TensorSpec::device, "Device ordinal when memory is 'cuda'.")
      .def("__repr__", [](const TensorSpec& s) {
        std::string r = "TensorSpec('" + s.name + "', '" + std::string(dtype_name(s.dtype)) + "', [";
        for (std::size_t i = 0; i < s.shape.size(); ++i) r += (i ? ", " : "") + std::to_string(s.shape[i]);
        return r + "])";
      });

  py::class_<KeyPair>(m, "KeyPair", "An Ed25519 key pair as Z85 text (see modelcast-keygen).")
      .def(py::init<>())
      .def(py::init([](std::string pub, std::string sec) { return KeyPair{std::move(pub), std::move(sec)}; }),
           py::arg("public_key"), py::arg("secret_key"))
      .def_readwrite("public_key", &KeyPair::public_key)
      .def_readwrite("secret_key", &KeyPair::secret_key)
      .def("__repr__", [](const KeyPair& k) { return "KeyPair(public_key='" + k.public_key + "', secret_key=<hidden>)"; });
  m.def("generate_key_pair", &generate_key_pair, "A fresh random key pair. Raises ResourceError if libsodium fails.");
  m.def("save_key_pair", &save_key_pair, py::arg("keys"), py::arg("path"), py::arg("overwrite") = false,
        "Writes `path` (mode 0600) and `path`.pub. Raises InvalidArgumentError/ResourceError naming the file.");
  m.def("load_key_pair", &load_key_pair, py::arg("path"),
        "Reads a key file. Raises InvalidArgumentError naming the file and what is malformed.");
  m.def("load_public_key", &load_public_key, py::arg("path"), "The public key (Z85) of a key or .pub file.");
}

}  // namespace modelcast::python
