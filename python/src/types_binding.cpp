// Element types, tensor descriptions and key pairs: the small value types both sides share.
#include <pybind11/stl.h>

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
  m.def("dtype_size", [](const std::string& name) { return dtype_size(dtype_from_name(name)); },
        "Bytes per element of the dtype named `name` ('f32', 'bf16', ...). Raises InvalidArgumentError "
        "for an unknown name.");
  m.def("dtype_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i <= static_cast<int>(DType::kF8E4M3); ++i) names.emplace_back(dtype_name(static_cast<DType>(i)));
    return names;
  }, "The dtype names modelcast knows, in wire order.");

  py::class_<TensorSpec>(m, "TensorSpec", "Name, dtype (a modelcast dtype name) and shape of one tensor, and where its bytes live.")
      .def(py::init([](std::string name, const std::string& dtype, std::vector<std::int64_t> shape) {
             TensorSpec s;
             s.name = std::move(name);
             s.dtype = dtype_from_name(dtype);
             s.shape = std::move(shape);
             // size_bytes would otherwise wrap (a negative extent, a size past 2^64 bytes).
             if (!s.checked_size_bytes()) {
               throw Error(ErrorCode::kInvalidArgument, "TensorSpec '" + s.name +
                                                            "': a negative extent or more bytes than 64 bits can count");
             }
             return s;
           }),
           py::arg("name"), py::arg("dtype"), py::arg("shape"),
           "Raises InvalidArgumentError for an unknown dtype name, a negative extent or a size past 2^64 bytes.")
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
