#include "device/stats.h"

#include <cstdio>

#include "base/assert.h"

namespace uroce::engine {

namespace {

const char* qp_type_name(QpType t) {
  switch (t) {
    case QpType::kRc:
      return "RC";
    case QpType::kUc:
      return "UC";
    case QpType::kUd:
      return "UD";
    case QpType::kXrcSend:  // (the transport runs XRC QPs as RC ones)
      return "XRC_SEND";
    case QpType::kXrcRecv:
      return "XRC_RECV";
  }
  return "?";
}

std::uint64_t rx_drops(const DeviceStats& s, std::size_t reason) {
  UROCE_ASSERT(reason < wire::kDropReasonCount);
  return s.datapath.rx_drops[reason] + s.engine.rx_drops[reason];
}

void append_u64(std::string& out, std::uint64_t v) {
  char buf[24];
  const int n = std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
  UROCE_ASSERT(n > 0 && static_cast<std::size_t>(n) < sizeof buf);  // 20 digits at most
  out.append(buf, static_cast<std::size_t>(n));
}

// Device names are 1..63 characters of the configuration; escape what JSON needs.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      [[maybe_unused]] const int n =
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      UROCE_ASSERT(n == 6);  // a backslash, u and four hex digits (c < 0x20)
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_named(std::string& out, const NamedCounters& counters, bool json) {
  for (const auto& [name, value] : counters) {
    if (json) {
      out += ",\"";
      out += name;
      out += "\":";
    } else {
      out += ' ';
      out += name;
      out += ' ';
    }
    append_u64(out, value);
  }
}

std::string link_name(const DeviceStats& s) {
  return s.name + "/" + std::to_string(static_cast<unsigned>(s.port));
}

}  // namespace

// Long: a table of rxe's counter names and their sources, one line each.
NamedCounters DeviceStats::device_counters() const {
  // Destroyed QPs count too, as rxe's device counters do.
  transport::QpCounters q = destroyed_qps;
  for (const QpStats& qp : qps) q += qp.counters;
  std::uint64_t drops = 0;
  for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) drops += rx_drops(*this, r);
  const auto icrc = static_cast<std::size_t>(wire::DropReason::kBadIcrc);
  return {
      // rxe counts sent_pkts per packet handed to the network and rcvd_pkts per packet that
      // passed its header and ICRC checks (rxe_rcv): the datapath's sends and the engine's
      // valid receptions.
      {"sent_pkts", datapath.tx_packets},
      {"rcvd_pkts", engine.rx_packets},
      {"sent_bytes", datapath.tx_bytes},
      {"rcvd_bytes", engine.rx_bytes},
      {"rx_datagrams", datapath.rx_packets},
      {"duplicate_request", q.duplicate_requests},
      // uroce's QP counter counts out-of-sequence responses as well as requests.
      {"out_of_seq_request", q.out_of_sequence},
      {"rcvd_rnr_err", q.rnr_naks_received},
      {"send_rnr_err", q.rnr_naks_sent},
      {"rcvd_seq_err", q.seq_naks_received},
      {"implied_nak_seq_err", q.implied_naks},
      {"send_seq_err", q.seq_naks_sent},
      {"rcvd_other_nak", q.other_naks_received},
      {"send_other_nak", q.other_naks_sent},
      {"retry_exceeded_err", q.retry_exceeded},
      {"retry_rnr_exceeded_err", q.rnr_retry_exceeded},
      {"ack_timeouts", q.timeouts},
      {"retransmitted_pkts", q.retransmitted_packets},
      {"qp_dropped_pkts", q.dropped},
      {"qkey_violations", q.qkey_violations},
      {"ud_no_wqe_drops", q.ud_no_wqe_drops},
      {"src_addr_drops", q.src_addr_mismatch},
      {"src_port_drops", q.src_port_mismatch},
      {"unknown_qpn", engine.rx_unknown_qpn},
      {"closed_qp_acks", engine.closed_qp_acks},
      {"unknown_qpn_src_limited", engine.rx_unknown_qpn_src_limited},
      {"rx_drops", drops},
      {"icrc_err", rx_drops(*this, icrc)},
      {"icrc_id_recovered", datapath.rx_icrc_id_recovered},
      {"icrc_df_clear", datapath.rx_icrc_df_clear},
      // FLUSH packets with the kernel's Soft-RoCE's ICRC, accepted and sent (wire/icrc.h).
      {"rxe_flush_icrc", datapath.rx_rxe_flush_icrc},
      {"tx_rxe_flush_icrc", datapath.tx_rxe_flush_icrc},
      {"rx_one_pass_pkts", engine.rx_one_pass},
      {"send_err", datapath.tx_errors},
      // Batching (datapath/udp): system calls, GSO/GRO datagrams and the packets in them.
      {"tx_send_calls", datapath.tx_calls},
      {"tx_gso_datagrams", datapath.tx_gso_datagrams},
      {"tx_gso_pkts", datapath.tx_gso_packets},
      {"tx_blocked", datapath.tx_blocked},
      {"tx_snapshots", datapath.tx_snapshots},
      {"rx_recv_calls", datapath.rx_calls},
      {"rx_gro_datagrams", datapath.rx_gro_datagrams},
      {"rx_gro_pkts", datapath.rx_gro_packets},
      {"tx_backpressure", engine.tx_backpressure},
      {"timer_fires", engine.timer_fires},
      {"tx_acks_held", engine.tx_acks_held},
      {"tx_acks_held_unanswered", q.acks_held_unanswered},
      {"tx_acks_deferred", engine.tx_acks_deferred},
      {"tx_acks_deferred_unanswered", q.acks_deferred_unanswered},
      // Congestion notification (DCQCN), mlx5's names.
      {"np_ecn_marked_roce_packets", q.np_ecn_marked_roce_packets},
      {"np_cnp_sent", q.np_cnp_sent},
      {"rp_cnp_handled", q.rp_cnp_handled},
      // Loss recovery (transport/recovery.cc): no rxe or mlx5 counter has these meanings.
      {"adaptive_timeouts", q.adaptive_timeouts},
      {"tail_probes", q.tail_probes},
      {"spurious_timeouts", q.spurious_timeouts},
      // Selective repeat between uroce peers (docs/ARCHITECTURE.md).
      {"selective_retransmits", q.selective_retransmits},
      {"out_of_order_kept", q.out_of_order_kept},
      // XRC targets: requests naming no XRC SRQ of the QP's domain (NAKed Invalid Request).
      {"xrc_bad_srqn", q.xrc_bad_srqn},
      // Authenticated and encrypted packets between uroce peers (seal/sealed_datapath.h; all
      // zero with aead=off).
      {"aead_tx_pkts", seal.tx_sealed},
      {"aead_tx_errors", seal.tx_errors},
      {"aead_rx_pkts", seal.rx_opened},
      {"aead_auth_drops", seal.rx_auth_fail},
      {"aead_replay_drops", seal.rx_replay},
      {"aead_plain_drops", seal.rx_plain_dropped},
      {"aead_plain_rx", seal.rx_plain},
      {"aead_src_limited", seal.rx_src_limited},
      {"async_events_dropped", async_events_dropped},
      {"cq_events_at_arm", cq_events_at_arm},
      {"thread_wakeups", thread_wakeups},
      {"thread_rx_pkts", thread_rx_pkts},
      {"app_rounds", sched.app_rounds},
      {"thread_rounds", sched.thread_rounds},
      {"handoffs_to_app", sched.handoffs_to_app},
      {"handoffs_to_thread", sched.handoffs_to_thread},
      {"lease_expiries", sched.lease_expiries},
      {"thread_spins", sched.thread_spins},
      {"thread_sleeps", sched.thread_sleeps},
      {"wake_signals", sched.wake_signals},
      {"qps", qps.size()},
  };
}

NamedCounters qp_counters(const QpStats& qp) {
  const transport::QpCounters& c = qp.counters;
  return {
      {"sent_pkts", c.packets_sent},
      {"sent_payload_bytes", c.bytes_sent},
      {"rcvd_pkts", c.packets_received},
      {"rcvd_payload_bytes", c.bytes_received},
      {"duplicate_request", c.duplicate_requests},
      {"out_of_seq_request", c.out_of_sequence},
      {"rcvd_rnr_err", c.rnr_naks_received},
      {"send_rnr_err", c.rnr_naks_sent},
      {"rcvd_seq_err", c.seq_naks_received},
      {"implied_nak_seq_err", c.implied_naks},
      {"send_seq_err", c.seq_naks_sent},
      {"rcvd_other_nak", c.other_naks_received},
      {"send_other_nak", c.other_naks_sent},
      {"retry_exceeded_err", c.retry_exceeded},
      {"retry_rnr_exceeded_err", c.rnr_retry_exceeded},
      {"ack_timeouts", c.timeouts},
      {"retransmitted_pkts", c.retransmitted_packets},
      {"dropped_pkts", c.dropped},
      {"qkey_violations", c.qkey_violations},
      {"ud_no_wqe_drops", c.ud_no_wqe_drops},
      {"src_addr_drops", c.src_addr_mismatch},
      {"src_port_drops", c.src_port_mismatch},
      {"outstanding_send_wqes", qp.outstanding_send_wqes},
      {"sq_psn", qp.sq_psn},
      {"unacked_psn", qp.unacked_psn},
      {"rq_psn", qp.rq_psn},
      {"responses_waiting", qp.responses_waiting ? 1u : 0u},
      {"engine_active", qp.active ? 1u : 0u},
      {"acks_held_unanswered", c.acks_held_unanswered},
      {"acks_deferred_unanswered", c.acks_deferred_unanswered},
      {"np_ecn_marked_roce_packets", c.np_ecn_marked_roce_packets},
      {"np_cnp_sent", c.np_cnp_sent},
      {"rp_cnp_handled", c.rp_cnp_handled},
      {"adaptive_timeouts", c.adaptive_timeouts},
      {"tail_probes", c.tail_probes},
      {"spurious_timeouts", c.spurious_timeouts},
      {"selective_retransmits", c.selective_retransmits},
      {"out_of_order_kept", c.out_of_order_kept},
      {"xrc_bad_srqn", c.xrc_bad_srqn},
      {"messages_completed", c.messages_completed},
      {"messages_executed", c.messages_executed},
      {"dest_qpn", qp.dest_qpn},
      {"srtt_ns", static_cast<std::uint64_t>(qp.srtt_ns)},
      {"min_rtt_ns", static_cast<std::uint64_t>(qp.min_rtt_ns)},
      {"rto_ns", static_cast<std::uint64_t>(qp.rto_ns)},
      {"send_window", qp.send_window},
      {"selective_repeat", qp.selective_repeat ? 1u : 0u},
      {"cc_rate_mbps", qp.cc.rate_mbps},
      {"cc_window", qp.cc.window_packets == cc::kUnlimitedWindow ? 0 : qp.cc.window_packets},
      {"cc_loss_cuts", qp.cc.loss_cuts},
      {"cc_delay_cuts", qp.cc.delay_cuts},
      {"cc_spurious_timeouts", qp.cc.spurious_timeouts},
      {"cc_competing", qp.cc.competing ? 1u : 0u},
  };
}

QpStats qp_stats(const transport::Qp& qp) {
  QpStats s;
  s.qpn = qp.qpn();
  s.type = qp.type();
  s.state = qp.state();
  s.outstanding_send_wqes = qp.outstanding_send_wqes();
  s.counters = qp.counters();
  s.dest_qpn = qp.attr().dest_qp_num;
  if (qp.type() == QpType::kRc) {
    const Duration rto = qp.rto();
    s.srtt_ns = qp.srtt().count_ns();
    s.min_rtt_ns = qp.min_rtt().count_ns();
    s.rto_ns = rto.is_infinite() ? 0 : rto.count_ns();
    s.send_window = qp.send_window();
    s.selective_repeat = qp.selective_repeat();
  }
  s.cc = qp.cc_state();
  s.sq_psn = qp.requester_psn();
  s.unacked_psn = qp.completer_psn();
  s.rq_psn = qp.responder_psn();
  s.responses_waiting = qp.responses_waiting();
  return s;
}

QpStats qp_stats(const transport::Qp& qp, const Engine& engine, Instant now) {
  QpStats s = qp_stats(qp);
  const auto in_us = [now](Instant t) -> std::int64_t {
    if (t.is_never()) return -1;
    return t <= now ? 0 : (t - now).count_ns() / 1000;
  };
  s.timer_in_us = in_us(qp.poll_timeout());
  s.armed_in_us = in_us(engine.armed_at(qp.qpn()));
  s.active = engine.is_active(qp.qpn());
  return s;
}

std::string format_stats_text(const DeviceStats& s, bool with_qps) {
  std::string out = "link " + link_name(s) + " pid " + std::to_string(s.pid);
  append_named(out, s.device_counters(), false);
  // Drops by reason: only the reasons that occurred, to keep the line readable.
  for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
    const std::uint64_t n = rx_drops(s, r);
    if (n == 0) continue;
    out += " drop_";
    out += wire::drop_reason_name(static_cast<wire::DropReason>(r));
    out += ' ';
    append_u64(out, n);
  }
  out += '\n';
  if (!s.faults.spec.empty()) {
    out += "faults " + link_name(s) + " pid " + std::to_string(s.pid) + " seed ";
    append_u64(out, s.faults.seed);
    out += " spec \"" + s.faults.spec + "\"";
    for (const auto& [dir, c] : {std::pair{"tx", &s.faults.tx}, std::pair{"rx", &s.faults.rx}}) {
      out += std::string(" ") + dir + "_packets ";
      append_u64(out, c->packets);
      for (std::size_t k = 0; k < fault::kInjectedCount; ++k) {
        out += std::string(" ") + dir + "_" +
               std::string(fault::to_string(static_cast<fault::Injected>(k))) + " ";
        append_u64(out, c->injected[k]);
      }
    }
    out += '\n';
  }
  UROCE_ASSERT(out.back() == '\n');  // whole lines: a stats file appends them (stats_file)
  if (!with_qps) return out;
  for (const QpStats& qp : s.qps) {
    out += "qp " + link_name(s) + " pid " + std::to_string(s.pid) + " lqpn " +
           std::to_string(qp.qpn) + " type " + qp_type_name(qp.type) + " state " +
           qp_state_name(qp.state);
    append_named(out, qp_counters(qp), false);
    out += " timer_in_us " + std::to_string(qp.timer_in_us) + " armed_in_us " +
           std::to_string(qp.armed_in_us);
    out += '\n';
  }
  for (const CqStats& cq : s.cqs) {
    out += "cq " + link_name(s) + " pid " + std::to_string(s.pid) + " cq " + std::to_string(cq.cq);
    append_named(out,
                 {{"queued", cq.queued},
                  {"capacity", cq.capacity},
                  {"arm", cq.arm},
                  {"error", cq.error ? 1u : 0u},
                  {"events", cq.events},
                  {"channel", cq.has_channel ? 1u : 0u},
                  {"channel_waiting", cq.channel_waiting},
                  {"channel_unacked", cq.channel_unacked},
                  {"channel_readable", cq.channel_readable ? 1u : 0u}},
                 false);
    out += '\n';
  }
  return out;
}

std::string format_stats_json(const DeviceStats& s, bool with_qps) {
  std::string out = "{\"ifname\":";
  append_json_string(out, s.name);
  out += ",\"port\":" + std::to_string(static_cast<unsigned>(s.port)) +
         ",\"pid\":" + std::to_string(s.pid);
  append_named(out, s.device_counters(), true);
  out += ",\"drops\":{";
  for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
    if (r != 0) out += ',';
    append_json_string(out, wire::drop_reason_name(static_cast<wire::DropReason>(r)));
    out += ':';
    append_u64(out, rx_drops(s, r));
  }
  out += '}';
  if (!s.faults.spec.empty()) {
    out += ",\"faults\":{\"spec\":";
    append_json_string(out, s.faults.spec);
    out += ",\"seed\":";
    append_u64(out, s.faults.seed);
    for (const auto& [dir, c] : {std::pair{"tx", &s.faults.tx}, std::pair{"rx", &s.faults.rx}}) {
      out += std::string(",\"") + dir + "\":{\"packets\":";
      append_u64(out, c->packets);
      for (std::size_t k = 0; k < fault::kInjectedCount; ++k) {
        out += ',';
        append_json_string(out, fault::to_string(static_cast<fault::Injected>(k)));
        out += ':';
        append_u64(out, c->injected[k]);
      }
      out += '}';
    }
    out += '}';
  }
  if (with_qps) {
    out += ",\"qps\":[";
    bool first = true;
    for (const QpStats& qp : s.qps) {
      if (!first) out += ',';
      first = false;
      out += "{\"lqpn\":" + std::to_string(qp.qpn) + ",\"type\":\"" + qp_type_name(qp.type) +
             "\",\"state\":\"" + qp_state_name(qp.state) + '"';
      append_named(out, qp_counters(qp), true);
      out += ",\"timer_in_us\":" + std::to_string(qp.timer_in_us) +
             ",\"armed_in_us\":" + std::to_string(qp.armed_in_us);
      out += '}';
    }
    out += ']';
  }
  out += '}';
  return out;
}

}  // namespace uroce::engine
