// Consumer: see include/modelcast/consumer.h; the work is in ConsumerService (service.h).
#include "modelcast/consumer.h"

#include "core/consumer/service.h"

namespace modelcast {

class Consumer::Impl : public consumer::ConsumerService {
 public:
  using ConsumerService::ConsumerService;
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
ModelView Consumer::acquire() const { return impl_->acquire(); }
ModelView Consumer::wait_for_version(std::uint64_t version, std::chrono::milliseconds timeout) const {
  return impl_->wait_for_version(version, timeout);
}
ConsumerStats Consumer::stats() const { return impl_->stats(); }

}  // namespace modelcast
