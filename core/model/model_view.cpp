#include "modelcast/model_view.h"

#include "core/model/installed_version.h"
#include "modelcast/error.h"

namespace modelcast {
namespace {
const detail::InstalledVersion& checked(const std::shared_ptr<const detail::InstalledVersion>& state) {
  if (!state) throw Error(ErrorCode::kState, "empty ModelView: no version installed yet");
  return *state;
}
TensorView view_of(const detail::InstalledVersion& v, std::size_t index) {
  if (!v.converted.empty() && v.converted[index]) {
    const auto& c = *v.converted[index];
    return TensorView{&c.spec, v.converted_memory->data() + c.offset, c.scales, c.scale_block};
  }
  const TensorEntry& entry = v.manifest.tensors[index];
  std::byte* base = v.device ? static_cast<std::byte*>(v.device->base) : v.buffer->memory.data();
  return TensorView{&entry.spec, base + entry.offset, {}, 0};
}
}  // namespace

ModelView::ModelView(std::shared_ptr<const detail::InstalledVersion> state) : state_(std::move(state)) {}

std::uint64_t ModelView::version() const { return checked(state_).manifest.version; }
std::int64_t ModelView::step() const { return checked(state_).manifest.step; }
std::uint64_t ModelView::producer_incarnation() const { return checked(state_).manifest.incarnation; }
const std::map<std::string, std::string>& ModelView::metadata() const { return checked(state_).manifest.metadata; }
std::chrono::nanoseconds ModelView::update_latency() const { return checked(state_).update_latency; }
std::size_t ModelView::tensor_count() const { return checked(state_).manifest.tensors.size(); }

std::vector<TensorView> ModelView::tensors() const {
  const auto& v = checked(state_);
  std::vector<TensorView> views;
  views.reserve(v.manifest.tensors.size());
  for (std::size_t i = 0; i < v.manifest.tensors.size(); ++i) views.push_back(view_of(v, i));
  return views;
}

std::optional<TensorView> ModelView::find(std::string_view name) const {
  const auto& v = checked(state_);
  for (std::size_t i = 0; i < v.manifest.tensors.size(); ++i) {
    if (v.manifest.tensors[i].spec.name == name) return view_of(v, i);
  }
  return std::nullopt;
}

TensorView ModelView::tensor(std::string_view name) const {
  if (auto view = find(name)) return *view;
  throw Error(ErrorCode::kInvalidArgument, "model version " + std::to_string(version()) + " has no tensor '" +
                                               std::string(name) + "'");
}

}  // namespace modelcast
