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
  if (v.shapes_views) {
    const auto& t = v.shaped[index];
    const std::byte* base = t.in_receive_buffer ? (v.device ? static_cast<const std::byte*>(v.device->base)
                                                             : v.buffer->memory.data())
                            : v.shaped_device ? static_cast<const std::byte*>(v.shaped_device->base)
                                              : v.shaped_memory->data();
    TensorView view{&t.spec, base + t.offset, t.scales, t.scale_block};
    view.box_offset = t.box_offset;
    view.whole_shape = t.whole_shape;
    return view;
  }
  const TensorEntry& entry = v.manifest.tensors[index];
  std::byte* base = v.device ? static_cast<std::byte*>(v.device->base) : v.buffer->memory.data();
  return TensorView{&entry.spec, base + entry.offset, {}, 0};
}
std::size_t count_of(const detail::InstalledVersion& v) {
  return v.shapes_views ? v.shaped.size() : v.manifest.tensors.size();
}
const std::string& name_of(const detail::InstalledVersion& v, std::size_t index) {
  return v.shapes_views ? v.shaped[index].spec.name : v.manifest.tensors[index].spec.name;
}
}  // namespace

ModelView::ModelView(std::shared_ptr<const detail::InstalledVersion> state) : state_(std::move(state)) {}

std::uint64_t ModelView::version() const { return checked(state_).manifest.version; }
std::int64_t ModelView::step() const { return checked(state_).manifest.step; }
std::uint64_t ModelView::producer_incarnation() const { return checked(state_).manifest.incarnation; }
const std::map<std::string, std::string>& ModelView::metadata() const { return checked(state_).manifest.metadata; }
std::chrono::nanoseconds ModelView::update_latency() const { return checked(state_).update_latency; }
std::size_t ModelView::tensor_count() const { return count_of(checked(state_)); }

std::vector<TensorView> ModelView::tensors() const {
  const auto& v = checked(state_);
  std::vector<TensorView> views;
  views.reserve(count_of(v));
  for (std::size_t i = 0; i < count_of(v); ++i) views.push_back(view_of(v, i));
  return views;
}

namespace {
// The positions of the views called `name`, in order; nullptr for none.
const std::vector<std::size_t>* positions_of(const detail::InstalledVersion& v, std::string_view name) {
  auto& index = *v.names;
  std::call_once(index.made, [&] {
    // Made apart and moved in: a bad_alloc part-way leaves the index empty for the next try.
    std::unordered_map<std::string_view, std::vector<std::size_t>> at;
    at.reserve(count_of(v));
    for (std::size_t i = 0; i < count_of(v); ++i) at[name_of(v, i)].push_back(i);
    index.at = std::move(at);
  });
  auto it = index.at.find(name);
  return it == index.at.end() ? nullptr : &it->second;
}
}  // namespace

std::vector<TensorView> ModelView::parts(std::string_view name) const {
  const auto& v = checked(state_);
  std::vector<TensorView> views;
  if (const auto* at = positions_of(v, name)) {
    for (std::size_t i : *at) views.push_back(view_of(v, i));
  }
  return views;
}

std::optional<TensorView> ModelView::find(std::string_view name) const {
  const auto& v = checked(state_);
  if (const auto* at = positions_of(v, name)) return view_of(v, at->front());
  return std::nullopt;
}

TensorView ModelView::tensor(std::string_view name) const {
  if (auto view = find(name)) return *view;
  throw Error(ErrorCode::kInvalidArgument, "model version " + std::to_string(version()) + " has no tensor '" +
                                               std::string(name) + "'");
}

}  // namespace modelcast
