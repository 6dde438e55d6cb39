#include "tools/net_cli.h"

#include <cstdio>

namespace uroce::tools {

void NetCommands::add_to(CLI::App& app) {
  // ibv_rc_pingpong's options, letter for letter (rdma-core 44), plus -a, --timeout, --stats.
  ping_cmd_ = app.add_subcommand(
      "ping",
      "RC ping-pong, compatible with rdma-core's ibv_rc_pingpong (server without HOST, client "
      "with it)");
  ping_cmd_->add_option("host", ping_.server, "Connect to the server at HOST (else serve)");
  ping_cmd_->add_option("-p,--port", ping_.port, "TCP port of the address exchange")
      ->capture_default_str()
      ->check(CLI::Range(0u, 65535u));
  ping_cmd_->add_option("-d,--ib-dev", ping_.ib_dev, "Device name (default: the first configured)");
  ping_cmd_->add_option("-a,--address", ping_.address,
                        "Local IP address to serve (uroce: instead of a configured device)");
  ping_cmd_->add_option("-i,--ib-port", ping_.ib_port, "Port of the device")
      ->capture_default_str()
      ->check(CLI::Range(1, 255));
  ping_cmd_->add_option("-s,--size", ping_.size, "Message size in bytes")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  ping_cmd_->add_option("-m,--mtu", ping_.mtu, "Path MTU (256, 512, 1024, 2048, 4096)")
      ->capture_default_str();
  ping_cmd_->add_option("-r,--rx-depth", ping_.rx_depth, "Receives to post at a time")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  ping_cmd_->add_option("-n,--iters", ping_.iters, "Number of exchanges")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 30));
  ping_cmd_->add_option("-l,--sl", ping_.sl, "Service level")->check(CLI::Range(0, 15));
  ping_cmd_->add_flag("-e,--events", ping_.events, "Sleep between completions (default poll)");
  ping_cmd_
      ->add_option("-g,--gid-idx", ping_.gid_idx,
                   "Local GID index (default 0, the device's address)")
      ->check(CLI::Range(0, 255));
  ping_cmd_->add_flag("-o,--odp,-O,--iodp,-P,--prefetch", ping_.odp,
                      "On-demand paging (not supported)");
  ping_cmd_->add_flag("-t,--ts", ping_.ts, "Completion timestamps (not supported)");
  ping_cmd_->add_flag("-j,--dm", ping_.dm, "Device memory (not supported)");
  ping_cmd_->add_flag("-c,--chk", ping_.chk, "Validate received buffers");
  bool new_send = false;
  ping_cmd_->add_flag("-N,--new_send", new_send, "Use the new post send API (same on the wire)");
  ping_cmd_
      ->add_option("--timeout", ping_.timeout_s,
                   "Seconds any wait may last (connect, accept, between completions)")
      ->capture_default_str();
  ping_cmd_->add_flag("--stats", ping_.stats, "Print packet counters on stderr at the end");

  devices_cmd_ = app.add_subcommand("devices", "List the configured devices (as ibv_devices)");

  devinfo_cmd_ =
      app.add_subcommand("devinfo", "Device and port attributes, GID table (as ibv_devinfo)");
  devinfo_cmd_->add_option("-d,--ib-dev", devinfo_.ib_dev, "Only this device");
  devinfo_cmd_->add_option("-a,--address", devinfo_.address, "The device at this address");
  devinfo_cmd_->add_option("-i,--ib-port", devinfo_.ib_port, "Only this port")
      ->check(CLI::Range(1, 255));
  devinfo_cmd_->add_flag("-l,--list", devinfo_.list, "Only list the device names");
  devinfo_cmd_->add_flag("-v,--verbose", devinfo_.verbose, "Every attribute");

  setup_cmd_ = app.add_subcommand(
      "setup",
      "As root, once: /dev/infiniband/uverbsN for each device (links to /dev/null), which UCX "
      "needs to see the drop-in's devices");
  setup_cmd_->add_flag("--undo", setup_.undo, "Remove them (and the directory, if left empty)");
  setup_cmd_->add_option("--count", setup_.count, "How many (default: the configured devices)")
      ->check(CLI::Range(1, 64));
  setup_cmd_->add_option("--dir", setup_.dir, "Another directory than /dev/infiniband (tests)")
      ->capture_default_str();
}

std::optional<int> NetCommands::run() {
  if (ping_cmd_->parsed()) return ping_run(ping_, stdout, stderr);
  if (devices_cmd_->parsed()) return devices_run(stdout, stderr);
  if (devinfo_cmd_->parsed()) return devinfo_run(devinfo_, stdout, stderr);
  if (setup_cmd_->parsed()) return setup_run(setup_, stdout, stderr);
  return std::nullopt;
}

}  // namespace uroce::tools
