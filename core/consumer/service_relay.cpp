// The serving side of the consumer's service: relay orders from the producer, the blocks they
// send, and what is reported back. See service.h for the threads and relay_server.h for the stage.
#include "core/consumer/service.h"

#include <algorithm>

#include "core/wire/zmq_channel.h"

namespace modelcast::consumer {

// Consumers whose buffers hold what was verified: see ConsumerOptions::serve_peers. A device
// consumer serves from the host buffers a staged route lands in; on a route that reads straight
// into device memory (CUDA IPC) it exports its installed version's device buffer instead, for a
// device consumer on the same host to read (export_region orders).
bool ConsumerService::serves_peers() const {
  // A consumer that keeps parts of the model holds only the blocks of those parts.
  const bool holds_everything = std::all_of(options_.wants.begin(), options_.wants.end(), [](const TensorWant& w) {
    return w.kind == TensorWant::Kind::kWhole;
  });
  return options_.serve_peers && holds_everything &&
         (options_.caller_buffers.empty() || options_.caller_buffers_untouched);
}

void ConsumerService::on_relay_order(const protocol::RelayOrder& order) {
  if (order.incarnation != link_.incarnation()) return;  // an earlier producer's: it is gone
  auto refuse = [&](const std::string& why) {
    relay_failed({order.incarnation, order.order_id, "version " + std::to_string(order.version) + ": " + why});
  };
  if (!serves_peers()) return refuse("this consumer does not serve peers");
  if (closing_) return refuse("this consumer is closing");
  if (order.export_region) return export_installed(order);
  // The version's buffer: the one it is arriving in, or the installed version's.
  std::shared_ptr<detail::ReceiveBuffer> buffer;
  const Manifest* manifest = nullptr;
  if (auto arriving = fetch_.receiving(order.version)) {
    buffer = arriving->first;
    manifest = arriving->second;
  }
  // Or the installed version's, or the one a group member holds verified until its group
  // switches (as good a source: every block of it was checked).
  std::shared_ptr<const detail::InstalledVersion> held;  // keeps *manifest alive below
  for (auto candidate : {store_.current(), std::shared_ptr<const detail::InstalledVersion>(prepared_)}) {
    if (buffer || !candidate || candidate->manifest.version != order.version ||
        candidate->manifest.incarnation != link_.incarnation()) {
      continue;
    }
    // A version fetched in part (the parts this consumer keeps, or those its assembler takes
    // from this producer rank) has no bytes for the other blocks: never a source for a peer.
    const auto& in_part = candidate->blocks_held;
    if (std::find(in_part.begin(), in_part.end(), false) != in_part.end()) {
      return refuse("held here only in part (the parts this consumer keeps)");
    }
    if (auto bytes = installed_host_bytes(candidate)) {
      buffer = std::move(bytes);
      held = std::move(candidate);
      manifest = &held->manifest;
    }
  }
  if (!buffer) return refuse("not held here (installed, verified for its group or arriving)");
  if (buffer->device_owned) return refuse("it arrives straight in device memory, which this consumer does not serve from");
  if (auto failed = relay_.accept(order, std::move(buffer), *manifest)) relay_failed(*failed);
  pump_relays();
}

// An export_region order: the receiver reads the version out of this consumer's device buffer,
// which stays pinned until the producer cancels the order (or this consumer joins again). The
// installed version, or the one a group member holds verified until its group switches; only
// held whole and as the producer sent it (a shaped or partial copy is not the slot's layout).
void ConsumerService::export_installed(const protocol::RelayOrder& order) {
  auto refuse = [&](const std::string& why) {
    relay_failed({order.incarnation, order.order_id, "version " + std::to_string(order.version) + ": " + why});
  };
  std::shared_ptr<const detail::InstalledVersion> version = store_.current();
  if (prepared_ && prepared_->manifest.version == order.version) version = prepared_;
  if (!version || version->manifest.version != order.version || version->manifest.incarnation != link_.incarnation()) {
    return refuse("not installed here");
  }
  const auto& held = version->blocks_held;
  if (!version->buffer || !version->buffer->device_owned ||
      std::find(held.begin(), held.end(), false) != held.end()) {
    return refuse("not held whole in a device buffer here, which is what a reader over CUDA IPC reads");
  }
  if (!link_.is_joined()) return;
  try {
    link_.send(relay_.export_buffer(order, version->buffer, version->manifest.total_bytes));
  } catch (const Error& e) {
    refuse(std::string("cannot export its buffer: ") + e.what());  // export_buffer pinned nothing
  }
}

// A peer reading an exported buffer copies out of this consumer's device memory with no word
// to it; freeing the buffer under that copy hands the reader whatever reuses the memory (on a
// GPU, at once; undefined behaviour in CUDA's terms). So a closing consumer keeps its buffers
// until the producer cancels each exported order (it does once the reader's fetch ended, however
// it ended), and meanwhile only pings, refuses orders and takes cancels: nothing that would
// install, rejoin or fetch (a producer that forgot this consumer sends no cancel, and then the
// bound ends the wait). Bounded by producer_timeout: a producer gone or a reader hung delays
// the close by no more than that.
void ConsumerService::drain_exports() {
  closing_ = true;
  if (relay_.exported() == 0 || !link_.is_joined()) return;
  const auto deadline = Clock::now() + options_.producer_timeout;
  log_.info("closing: waiting up to {} ms for {} peer(s) reading a version exported to them",
            options_.producer_timeout.count(), relay_.exported());
  while (relay_.exported() > 0 && Clock::now() < deadline) {
    auto now = Clock::now();
    if (link_.ping_due(now)) {  // or the producer drops this consumer and its readers' fetches
      link_.send(protocol::Ping{link_.incarnation()});
      link_.pinged(now);
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    zmq::pollitem_t item{link_.dealer().handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::clamp(left, std::chrono::milliseconds(1), tick()));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    while (auto parts = wire::receive(link_.dealer())) {
      if (parts->size() != 1) continue;
      auto message = decode((*parts)[0], {});
      if (!message) continue;
      if (auto* cancel = std::get_if<protocol::RelayCancel>(&*message)) on_relay_cancel(*cancel);
      if (auto* order = std::get_if<protocol::RelayOrder>(&*message)) on_relay_order(*order);  // refused
    }
  }
  if (relay_.exported() > 0) {
    log_.warn("closing with {} exported version(s) not released by the producer after {} ms: a peer still "
              "reading one may read freed memory",
              relay_.exported(), options_.producer_timeout.count());
  }
}

void ConsumerService::on_relay_cancel(const protocol::RelayCancel& cancel) {
  if (cancel.incarnation != link_.incarnation()) return;
  if (auto served = relay_.cancel(cancel.order_id, cancel.delivered)) {
    count([&](ConsumerStats& s) { s.bytes_relayed += served; });
  }
}

void ConsumerService::on_relay_sent(const RelaySent& sent) {
  auto [bytes, failed] = relay_.on_sent(sent);
  if (bytes > 0) count([&](ConsumerStats& s) { s.bytes_relayed += bytes; });
  if (failed) relay_failed(*failed);
}

// A block of an order is ready when it is in this consumer's installed version or the version a
// group member holds for its group (both verified), or in the fetch under way and verified.
// The fetch that fills a buffer ends before its version is installed or held for the group.
void ConsumerService::pump_relays() {
  if (relay_.orders() == 0) return;
  const auto current = store_.current();
  auto installed = installed_host_bytes(current);
  auto held_for_group = installed_host_bytes(prepared_);
  // A block of a version fetched in part is there only if it was fetched (blocks_held).
  const auto state = [](const detail::InstalledVersion& version, std::uint32_t block) {
    const auto& held = version.blocks_held;
    return held.empty() || (block < held.size() && held[block]) ? BlockState::kReady : BlockState::kNever;
  };
  auto failed = relay_.pump([&](const detail::ReceiveBuffer& buffer, std::uint32_t block) {
    if (installed.get() == &buffer) return state(*current, block);
    if (held_for_group.get() == &buffer) return state(*prepared_, block);
    return fetch_.block_state(buffer, block);
  });
  for (const auto& f : failed) relay_failed(f);
}

void ConsumerService::relay_failed(const protocol::RelayFailed& failed) {
  log_.warn("cannot relay as the producer asked: {}", failed.error);
  if (link_.is_joined()) link_.send(failed);
}

}  // namespace modelcast::consumer
