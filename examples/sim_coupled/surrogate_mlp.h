// The surrogate network (a small residual MLP: next state = state + MLP(state)) in the two forms
// the workflow needs: a torch::nn module the trainer optimises, and a functional forward over
// named tensors that the inference server runs on a ModelView's memory. Both use the parameter
// names of the module ("l0.weight", ...), which are also the tensor names on the wire.
#pragma once

#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>

namespace sim_coupled {

struct SurrogateImpl : torch::nn::Module {
  explicit SurrogateImpl(int hidden)
      : l0(register_module("l0", torch::nn::Linear(3, hidden))),
        l1(register_module("l1", torch::nn::Linear(hidden, hidden))),
        l2(register_module("l2", torch::nn::Linear(hidden, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + l2(torch::tanh(l1(torch::tanh(l0(x))))); }
  torch::nn::Linear l0, l1, l2;
};
TORCH_MODULE(Surrogate);

// The same computation on parameters given by name (e.g. tensors over a received version).
// Throws std::runtime_error naming a missing parameter.
inline torch::Tensor surrogate_forward(const std::map<std::string, torch::Tensor>& p, const torch::Tensor& x) {
  auto get = [&p](const std::string& name) -> const torch::Tensor& {
    auto it = p.find(name);
    if (it == p.end()) throw std::runtime_error("surrogate parameter missing from the model: " + name);
    return it->second;
  };
  auto layer = [&get](const std::string& l, const torch::Tensor& in) {
    return torch::nn::functional::linear(in, get(l + ".weight"), get(l + ".bias"));
  };
  return x + layer("l2", torch::tanh(layer("l1", torch::tanh(layer("l0", x)))));
}

}  // namespace sim_coupled
