#include "core/consumer/relay_server.h"

#include <algorithm>

#include "modelcast/error.h"

namespace modelcast::consumer {

RelayServer::~RelayServer() { clear(); }

protocol::RelayFailed RelayServer::failure(const Order& order, std::string why) const {
  return protocol::RelayFailed{order.incarnation, order.order_id, std::move(why)};
}

std::map<std::uint64_t, RelayServer::Order>::iterator RelayServer::find_order(std::uint64_t order_id) {
  return std::find_if(orders_.begin(), orders_.end(), [&](const auto& entry) { return entry.second.order_id == order_id; });
}

std::optional<protocol::RelayFailed> RelayServer::accept(const protocol::RelayOrder& order,
                                                         std::shared_ptr<detail::ReceiveBuffer> buffer,
                                                         const Manifest& manifest) {
  Order placed;
  placed.order_id = order.order_id;
  placed.incarnation = order.incarnation;
  placed.fetch_id = order.fetch_id;
  placed.plan = {manifest.total_bytes, order.block_bytes};
  auto refuse = [&](const std::string& why) {
    return protocol::RelayFailed{order.incarnation, order.order_id,
                                 "version " + std::to_string(order.version) + ": " + why};
  };
  if (order.block_bytes == 0 || order.block_bytes != manifest.block_bytes) {
    return refuse("blocks of " + std::to_string(order.block_bytes) + " bytes asked for, the version has blocks of " +
                  std::to_string(manifest.block_bytes));
  }
  for (auto block : order.blocks) {
    if (block >= placed.plan.count()) return refuse("block " + std::to_string(block) + " is beyond the version");
  }
  if (find_order(order.order_id) != orders_.end()) {
    return refuse("order " + std::to_string(order.order_id) + " is already served");
  }
  auto& transport = *buffer->transport;
  auto key = std::make_pair(static_cast<const transport::Transport*>(&transport), order.peer_address);
  auto known = peers_.find(key);
  if (known == peers_.end()) {
    try {
      // A receiver that dies fails the sends to it, which ends the order: nothing to do here.
      auto peer = transport.connect(order.peer_address, order.detect_failure, [](transport::PeerId, const std::string&) {});
      known = peers_.emplace(key, Receiver{peer, 0, order.detect_failure}).first;
      if (std::find(transports_.begin(), transports_.end(), buffer->transport) == transports_.end()) {
        transports_.push_back(buffer->transport);
      }
    } catch (const Error& e) {
      return refuse(std::string("cannot reach the receiver: ") + e.what());
    }
  }
  placed.peer = known->second.peer;
  placed.blocks = order.blocks;
  placed.buffer = std::move(buffer);
  known->second.last_serial = next_serial_;
  orders_.emplace(next_serial_++, std::move(placed));
  close_idle_receivers();
  return std::nullopt;
}

void RelayServer::close_idle_receivers() {
  const auto in_use = [&](const transport::Transport* transport, transport::PeerId peer) {
    const auto uses = [&](const auto& entry) {
      return entry.second.peer == peer && entry.second.buffer->transport.get() == transport;
    };
    return std::any_of(orders_.begin(), orders_.end(), uses) || std::any_of(draining_.begin(), draining_.end(), uses);
  };
  const auto closable = [](const auto& entry) { return entry.second.detect_failure; };
  while (static_cast<std::size_t>(std::count_if(peers_.begin(), peers_.end(), closable)) > kKeptReceivers) {
    auto oldest = peers_.end();
    for (auto p = peers_.begin(); p != peers_.end(); ++p) {
      if (!closable(*p) || in_use(p->first.first, p->second.peer)) continue;
      if (oldest == peers_.end() || p->second.last_serial < oldest->second.last_serial) oldest = p;
    }
    if (oldest == peers_.end()) break;  // every one carries an order
    for (const auto& t : transports_) {
      if (t.get() == oldest->first.first) t->disconnect(oldest->second.peer);
    }
    peers_.erase(oldest);
  }
  // A transport no kept connection is on is not this server's to hold (a replaced one retires).
  std::erase_if(transports_, [&](const auto& t) {
    return std::none_of(peers_.begin(), peers_.end(), [&](const auto& p) { return p.first.first == t.get(); });
  });
}

std::vector<protocol::RelayFailed> RelayServer::pump(const Readiness& ready) {
  std::vector<protocol::RelayFailed> failed;
  for (auto it = orders_.begin(); it != orders_.end();) {
    Order& order = it->second;
    auto& transport = *order.buffer->transport;
    std::string why;
    // In the order's sequence: a block not yet in holds back the ones after it, so each
    // receiver sees blocks in the order the producer would have sent them.
    while (order.next < order.blocks.size()) {
      const std::uint32_t block = order.blocks[order.next];
      const BlockState state = ready(*order.buffer, block);
      if (state == BlockState::kNotYet) break;
      if (state == BlockState::kNever) {
        why = "block " + std::to_string(block) + " will not arrive here (this consumer's own fetch of it ended)";
        break;
      }
      const std::uint64_t id = it->first, length = order.plan.length(block);
      try {
        order.transfers.push_back(transport.post_send(
            order.peer, *order.buffer->region, order.plan.offset(block), length,
            protocol::chunk_tag(order.fetch_id, block),
            [done = on_sent_, id, length](const transport::TransferResult& r) { done({id, length, r.ok, r.error}); }));
      } catch (const Error& e) {
        why = std::string("a block could not be sent: ") + e.what();
        break;
      }
      order.pending++;
      order.next++;
    }
    if (!why.empty()) {
      failed.push_back(failure(order, why));
      auto ended = it++;
      end(ended);
    } else if (order.next == order.blocks.size() && order.pending == 0) {
      // Nothing left to send or to wait for. An order of no blocks (the receiver's delta
      // changed none) ends here: no send completes it in on_sent, and it holds its buffer.
      it = orders_.erase(it);
    } else {
      ++it;
    }
  }
  return failed;
}

std::pair<std::uint64_t, std::optional<protocol::RelayFailed>> RelayServer::on_sent(const RelaySent& sent) {
  if (auto it = draining_.find(sent.serial); it != draining_.end()) {
    // A send failed after its order was cancelled: the connection may be what failed, as below,
    // or the cancel itself (a transport may end a cancelled send so): let go of the connection
    // only where no live order uses it, else that order's own sends tell.
    const bool shared = std::any_of(orders_.begin(), orders_.end(), [&](const auto& live) {
      return live.second.peer == it->second.peer && live.second.buffer->transport == it->second.buffer->transport;
    });
    if (!sent.ok && !shared) forget_peer(it->second);
    if (--it->second.pending == 0) draining_.erase(it);
    return {sent.ok ? sent.bytes : 0, std::nullopt};
  }
  auto it = orders_.find(sent.serial);
  if (it == orders_.end()) return {0, std::nullopt};
  Order& order = it->second;
  order.pending--;
  if (!sent.ok) {
    auto report = failure(order, "a send to the receiver failed: " + sent.error);
    forget_peer(order);
    end(it);
    return {0, report};
  }
  if (order.pending == 0 && order.next == order.blocks.size()) orders_.erase(it);  // all sent
  return {sent.bytes, std::nullopt};
}

void RelayServer::forget_peer(const Order& order) {
  for (auto p = peers_.begin(); p != peers_.end(); ++p) {
    if (p->second.peer == order.peer && p->first.first == order.buffer->transport.get()) {
      order.buffer->transport->disconnect(p->second.peer);
      peers_.erase(p);
      return;
    }
  }
}

protocol::RelayOffer RelayServer::export_buffer(const protocol::RelayOrder& order,
                                                std::shared_ptr<detail::ReceiveBuffer> buffer, std::uint64_t bytes) {
  if (exported_.count(order.order_id) || find_order(order.order_id) != orders_.end()) {
    throw Error(ErrorCode::kProtocol, "order " + std::to_string(order.order_id) + " is already served");
  }
  if (!buffer->transport || !buffer->region) {
    throw Error(ErrorCode::kState, "its buffer is not registered with a transport");
  }
  // Throws for memory the transport cannot export (cuda_ipc exports device memory only).
  protocol::RelayOffer offer{order.incarnation, order.order_id, buffer->transport->export_region(*buffer->region)};
  exported_.emplace(order.order_id, Exported{std::move(buffer), bytes});
  return offer;
}

std::uint64_t RelayServer::cancel(std::uint64_t order_id, bool delivered) {
  if (auto it = find_order(order_id); it != orders_.end()) end(it);
  auto it = exported_.find(order_id);
  if (it == exported_.end()) return 0;
  const std::uint64_t bytes = delivered ? it->second.bytes : 0;
  exported_.erase(it);
  return bytes;
}

void RelayServer::end(std::map<std::uint64_t, Order>::iterator it) {
  Order& order = it->second;
  for (auto id : order.transfers) order.buffer->transport->cancel(id);
  if (order.pending > 0) {
    order.ended = std::chrono::steady_clock::now();
    draining_.emplace(it->first, std::move(order));
  }
  orders_.erase(it);
}

std::vector<std::shared_ptr<detail::ReceiveBuffer>> RelayServer::give_up_stuck(
    std::chrono::steady_clock::time_point ended_before) {
  std::vector<std::shared_ptr<detail::ReceiveBuffer>> given_up;
  for (auto it = draining_.begin(); it != draining_.end();) {
    if (it->second.ended >= ended_before) {
      ++it;
      continue;
    }
    it->second.buffer->sends_given_up += it->second.pending;
    given_up.push_back(it->second.buffer);
    it = draining_.erase(it);  // a completion that still comes finds no order (on_sent)
  }
  return given_up;
}

void RelayServer::clear() {
  while (!orders_.empty()) end(orders_.begin());
  exported_.clear();
  for (const auto& [key, receiver] : peers_) {
    for (const auto& t : transports_) {
      if (t.get() == key.first) t->disconnect(receiver.peer);
    }
  }
  peers_.clear();
  transports_.clear();
}

}  // namespace modelcast::consumer
