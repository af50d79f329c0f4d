#include "core/consumer/service.h"

#include <algorithm>

#include "common/clock.h"
#include "common/host_identity.h"
#include "core/consumer/consumer_options.h"
#include "core/wire/zmq_channel.h"

namespace modelcast::consumer {
ConsumerService::ConsumerService(ConsumerOptions options)
    : options_(checked(std::move(options))),
      log_(log::get("consumer")),
      link_(options_),
      offered_(std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kConsumer)),
      store_(options_.buffers, options_.caller_buffers),
      fetch_([events = events_](const ChunkDone& done) { events->push(done); }),
      relay_([events = events_](const RelaySent& sent) { events->push(sent); }) {
  policy_.model = options_.model_name;
  policy_.limits.max_total_bytes = model_size_cap(options_);
  policy_.expected_layout = options_.expected_layout;
  policy_.producer = link_.pinned_key();
  if (options_.memory == MemoryKind::kCuda) {
    landing_ = std::make_unique<DeviceLanding>(*device::device_runtime(), options_.device, options_.buffers);
  }
  service_ = std::thread([this] { service_loop(); });
}

ConsumerService::~ConsumerService() {
  events_->push(Stop{});
  service_.join();
}

void ConsumerService::service_loop() {
  join();
  for (;;) {
    zmq::socket_t* monitor = link_.monitor();
    zmq::socket_t* subscriber = link_.subscriber();
    zmq::pollitem_t items[4] = {{link_.dealer().handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, events_->fd(), ZMQ_POLLIN, 0},
                                {monitor ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0},
                                {subscriber ? subscriber->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, subscriber ? 4 : monitor ? 3 : 2, tick());
    if (monitor && (items[2].revents & ZMQ_POLLIN)) guarded([&] { on_handshake_events(); });
    if (items[1].revents & ZMQ_POLLIN) {
      for (auto& event : events_->drain()) {
        if (std::holds_alternative<Stop>(event)) {
          abandon_fetch("consumer shutting down", false);
          return;
        }
        if (auto* sent = std::get_if<RelaySent>(&event)) {
          guarded([&] { on_relay_sent(*sent); });
        } else {
          guarded([&] { on_chunk(std::get<ChunkDone>(event)); });
        }
      }
    }
    if (items[0].revents & ZMQ_POLLIN) {
      while (auto parts = wire::receive(link_.dealer())) guarded([&] { on_reply(*parts); });
    }
    // A join reply just handled may have replaced the subscriber: poll results of the old
    // one no longer apply (and its socket is gone).
    if (subscriber && subscriber == link_.subscriber() && (items[3].revents & ZMQ_POLLIN)) {
      while (auto parts = wire::receive(*link_.subscriber())) guarded([&] { on_announce(*parts); });
    }
    guarded([&] {
      check_producer_alive();
      check_transfer_deadline();
      maybe_fetch();
      pump_relays();
    });
  }
}

std::chrono::milliseconds ConsumerService::tick() const {
  return std::clamp(options_.producer_timeout / 8, std::chrono::milliseconds(10),
                    ProducerLink::kPingInterval / 2);
}

void ConsumerService::join() {
  auto memory = options_.memory == MemoryKind::kCuda ? transport::MemoryLocation::cuda(options_.device)
                                                     : transport::MemoryLocation::host();
  link_.join({options_.model_name, options_.consumer_name, offered_->offers(true), memory,
              host_id(), process_token(), session_, parse_delivery_path(options_.path), serves_peers()},
             Clock::now());
  count([](ConsumerStats& s) { s.producer_connected = false; });
}

// After the producer died or restarted: fresh transports (a fresh UCX worker). On one host endpoints run without
// peer-failure handling (UCX offers shared memory only so), and a peer that dies there leaves
// the worker in an undefined state (seen: a UCX assertion when the next producer's data came
// in). Buffers that views or unfinished receives still hold keep the old transport alive.
void ConsumerService::rejoin_afresh(const std::string& why) {
  abandon_fetch(why, true);
  relay_.clear();
  offered_ = std::make_unique<transport::TransportSet>(options_.transports, transport::Side::kConsumer);
  join();
}

void ConsumerService::on_handshake_events() {
  auto [failures, report_text] = link_.failed_handshakes();
  count([&](ConsumerStats& s) { s.failed_handshakes += failures; });
  if (report_text) report(Error(ErrorCode::kAuthentication, *report_text));
}

void ConsumerService::check_producer_alive() {
  auto now = Clock::now();
  if (link_.join_due(now)) return join();
  if (link_.ping_due(now)) {
    link_.send(protocol::Ping{link_.incarnation()});
    link_.pinged(now);
  }
  if (link_.silent(now) && link_.subscriber()) {
    // This thread may just have been busy (allocating a large buffer takes a while): read
    // what the producer said meanwhile before judging it silent.
    while (auto parts = wire::receive(*link_.subscriber())) on_announce(*parts);
  }
  if (link_.silent(now)) {
    log_->warn("no word from the producer for {} ms; reconnecting", options_.producer_timeout.count());
    count([](ConsumerStats& s) { s.reconnects++; });
    rejoin_afresh("producer lost");
  }
}

// A transfer the producer answered that stops making progress (its lease lapsed, a sender
// hung) is given up, so the consumer asks for the newest version again instead of waiting for
// ever; one that keeps progressing is waited for however long it takes.
void ConsumerService::check_transfer_deadline() {
  if (!fetch_.transfer_stalled(Clock::now(), options_.transfer_timeout)) return;
  // A relay that stopped sending is left: the producer serves this consumer itself next time.
  const std::string relay = fetch_.relay();
  if (auto abandoned = abandon_fetch("no transfer progress within " +
                                         std::to_string(options_.transfer_timeout.count()) + " ms" +
                                         (relay.empty() ? std::string() : " from relay '" + relay + "'"),
                                     true)) {
    if (!relay.empty()) {
      count([](ConsumerStats& s) { s.relay_faults++; });
      report(Error(ErrorCode::kTransport, "relay '" + relay + "' sent nothing of version " +
                                              std::to_string(abandoned->first.version) + " for " +
                                              std::to_string(options_.transfer_timeout.count()) +
                                              " ms; fetching it from the producer"));
    }
    send_ack(abandoned->first, abandoned->second, false, "transfer timed out",
             relay.empty() ? protocol::RelayFault::kNone : protocol::RelayFault::kStalled);
  }
}

void ConsumerService::bad_message(const std::string& what) {
  log_->warn("dropped a bad control message: {}", what);
  count([](ConsumerStats& s) { s.bad_messages++; });
}

std::optional<protocol::Message> ConsumerService::decode(const zmq::message_t& frame, const protocol::DecodeLimits& limits) {
  try {
    return protocol::decode({static_cast<const std::byte*>(frame.data()), frame.size()}, limits);
  } catch (const Error& e) {
    bad_message(e.what());
    return std::nullopt;
  }
}

void ConsumerService::on_announce(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 2) return bad_message("announcement with " + std::to_string(parts.size()) + " frames");
  auto message = decode(parts[1], protocol::kAnnounceLimits);
  if (!message) return;
  auto* announce = std::get_if<protocol::Announce>(&*message);
  if (!announce) return bad_message("unexpected message type on the announcement channel");
  if (announce->incarnation != link_.incarnation()) {
    // A restarted producer: its old connection state is gone, so join it afresh.
    log_->info("producer restarted (incarnation {:016x}); joining again", announce->incarnation);
    return rejoin_afresh("producer restarted");
  }
  link_.heard(Clock::now());
  if (announce->version > newest_announced_) {
    newest_announced_ = announce->version;
    count([&](ConsumerStats& s) {
      s.last_notify_latency = std::chrono::nanoseconds(realtime_ns() - announce->publish_time_ns);
    });
  }
}

void ConsumerService::on_reply(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 1) return bad_message("reply with " + std::to_string(parts.size()) + " frames");
  auto message = decode(parts[0], {});
  if (!message) return;
  if (auto* join = std::get_if<protocol::JoinReply>(&*message)) return on_join_reply(*join);
  if (auto* fetch = std::get_if<protocol::FetchReply>(&*message)) return on_fetch_reply(*fetch);
  if (auto* order = std::get_if<protocol::RelayOrder>(&*message)) return on_relay_order(*order);
  if (auto* cancel = std::get_if<protocol::RelayCancel>(&*message)) {
    if (cancel->incarnation == link_.incarnation()) relay_.cancel(cancel->order_id);
    return;
  }
  if (auto* digests = std::get_if<protocol::Digests>(&*message)) {
    try {
      return finish(fetch_.on_digests(*digests));
    } catch (const Error& e) {
      return bad_message(e.what());
    }
  }
  bad_message("unexpected message type on the request channel");
}

void ConsumerService::on_join_reply(const protocol::JoinReply& reply) {
  if (!reply.ok) {
    link_.refused();
    return report(Error(ErrorCode::kState, "producer refused to join: " + reply.error));
  }
  auto chosen = offered_->find(reply.transport);
  if (!chosen) {
    link_.refused();
    return report(Error(ErrorCode::kTransport, "producer chose transport '" + reply.transport +
                                                   "', which this consumer did not offer (" + offered_->names() + ")"));
  }
  // A one-sided device route reads straight into device buffers; every other route lands in
  // host buffers (a device consumer then copies each version to the device: DeviceLanding).
  bool into_device = reply.path == DeliveryPath::kCudaIpc && options_.memory == MemoryKind::kCuda;
  store_.use_transport(offered_->shared(*chosen), into_device ? transport::MemoryLocation::cuda(options_.device)
                                                              : transport::MemoryLocation::host());
  count([&](ConsumerStats& s) {
    s.transport = reply.transport;
    s.path = std::string(delivery_path_name(reply.path));
  });
  bool new_producer = reply.incarnation != link_.incarnation();
  link_.joined(reply, Clock::now());
  count([](ConsumerStats& s) { s.producer_connected = true; });
  if (new_producer) {  // version numbers restart with a new producer
    rejected_.clear();
    rejections_in_a_row_ = 0;
  }
  newest_announced_ = reply.latest_version;
  log_->info("joined model '{}' at {} over {} ({}; latest version {})", options_.model_name,
             options_.producer_endpoint, reply.transport, delivery_path_name(reply.path), reply.latest_version);
}

void ConsumerService::report(const Error& error) {
  log_->error("{}", error.what());
  count([&](ConsumerStats& s) { s.last_error = error.what(); });
  if (options_.on_error) options_.on_error(error);
}

}  // namespace modelcast::consumer
