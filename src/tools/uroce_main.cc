// The `uroce` command.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fault/fault.h"
#include "tools/demo_cmd.h"
#include "tools/faults_cmd.h"
#include "tools/incast_cmd.h"
#include "tools/net_cli.h"
#include "tools/pcap_cmd.h"
#include "tools/perf_cmd.h"
#include "tools/sim_cmd.h"
#include "tools/stats_cmd.h"

int main(int argc, char** argv) {
  CLI::App app{"uroce: RoCEv2 in user space"};
  app.set_version_flag("--version", "uroce 0.1.0");
  app.require_subcommand(1);

  CLI::App* pcap = app.add_subcommand("pcap", "Check and decode RoCEv2 packet captures");
  pcap->require_subcommand(1);

  std::vector<std::string> check_files;
  CLI::App* check = pcap->add_subcommand(
      "check", "Verify the ICRC and structure of every RoCEv2 packet; exit 1 if any is invalid");
  // Unreadable files are reported by the command itself (exit 2), not as usage errors.
  check->add_option("files", check_files, "pcap or pcapng files")->required();

  std::string dump_file;
  CLI::App* dump = pcap->add_subcommand("dump", "Decode every packet of a capture");
  dump->add_option("file", dump_file, "pcap or pcapng file")->required();

  uroce::tools::SimCommand sim_cmd;
  CLI::App* sim = app.add_subcommand(
      "sim", "Run the deterministic network simulation (one seed or a swarm of seeds)");
  sim->add_option("--seed", sim_cmd.cluster.seed, "First seed")->capture_default_str();
  sim->add_option("--swarm", sim_cmd.swarm, "Number of seeds to run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{100'000'000}));
  sim->add_option("--hosts", sim_cmd.cluster.hosts, "Hosts")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  sim->add_option("--rc", sim_cmd.cluster.rc_pairs, "RC QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  sim->add_option("--uc", sim_cmd.cluster.uc_pairs, "UC QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sim->add_option("--ud", sim_cmd.cluster.ud_pairs, "UD QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sim->add_option("--ops", sim_cmd.cluster.ops_per_qp, "Operations per QP")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sim->add_option("--max-msg", sim_cmd.cluster.max_message_bytes,
                  "Largest message in bytes (0: up to 3 path MTUs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16384));
  sim->add_option("--idle-qps", sim_cmd.cluster.idle_qps_per_host, "Idle QPs per host")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  bool no_faults = false;
  CLI::Option* no_faults_flag =
      sim->add_flag("--no-faults", no_faults, "No loss, duplication, reordering, corruption");
  std::string fault_spec;
  CLI::Option* faults_opt = sim->add_option(
      "--faults", fault_spec,
      "Every link's faults in UROCE_FAULTS' grammar (one rule, no match keys but dir=tx), "
      "instead of the seed's: e.g. 'loss=2%,dup=1%,reorder=1%,reorder_by=50us'");
  faults_opt->excludes(no_faults_flag);
  sim->add_option("--aim-corruption", sim_cmd.cluster.aimed_corruption_per_mille,
                  "Frames per 1000 received in the fault phase with a bit flipped in a header "
                  "field that places data (opcode, QPN, PSN, pad, RETH) or in the payload")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  bool no_hold_acks = false;
  bool no_defer_acks = false;
  sim->add_flag("--no-hold-acks", no_hold_acks,
                "Hosts send every ACK at once (a device's UROCE_HOLD_ACKS=0)");
  sim->add_flag("--no-defer-acks", no_defer_acks,
                "Hosts hold ACKs but never defer one behind a request (UROCE_DEFER_ACKS=0)");
  sim->add_option("--selective-repeat", sim_cmd.cluster.selective_repeat_percent,
                  "Percent of RC pairs (drawn from the seed) that run selective repeat")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  sim->add_option("--pcap", sim_cmd.cluster.pcap_path, "Write every frame sent to this pcap");
  sim->add_flag("-v,--verbose", sim_cmd.verbose, "A line per seed");
  uroce::tools::IncastCommand incast_cmd;
  CLI::App* incast = sim->add_subcommand(
      "incast",
      "N senders into one receiver through a switch port with ECN marking, DCQCN or no CC");
  uroce::tools::add_incast_options(*incast, incast_cmd);

  uroce::tools::NetCommands net_cmds;
  net_cmds.add_to(app);
  uroce::tools::StatsCommand stats_cmd;
  CLI::App* stats = app.add_subcommand(
      "stats",
      "Counters of the running uroce devices (exit 1: none running, 2: one did not answer)");
  stats->add_option("-d,--dev", stats_cmd.device, "Only this device");
  stats->add_flag("--qp", stats_cmd.qp, "A line per QP too");
  stats->add_flag("--json", stats_cmd.json, "One JSON array");

  uroce::tools::FaultsCommand faults_cmd;
  CLI::App* faults = app.add_subcommand(
      "faults",
      "A running device's faults, live: `faults -d DEV show`, `set SPEC` (the UROCE_FAULTS "
      "grammar), `clear`");
  faults->add_option("-d,--dev", faults_cmd.device, "The device")->required();
  faults->add_option("-p,--pid", faults_cmd.pid, "Only this process's");
  faults->add_option("action", faults_cmd.action, "show, set or clear")->required();
  faults->add_option("spec", faults_cmd.spec, "For set: the faults (see README)");

  uroce::tools::PerfOptions perf_opt;
  CLI::App* perf = app.add_subcommand(
      "perf",
      "RDMA benchmarks as perftest's ib_* tools: `perf TEST` (server), `perf TEST ADDRESS`");
  uroce::tools::add_perf_options(*perf, perf_opt);
  uroce::tools::DemoOptions demo_opt;
  CLI::App* demo = app.add_subcommand(
      "demo", "Two uroce processes on loopback: every RDMA operation checked, then perf numbers");
  uroce::tools::add_demo_options(*demo, demo_opt);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (auto rc = net_cmds.run()) return *rc;
  if (check->parsed()) return uroce::tools::pcap_check(check_files, stdout, stderr);
  if (dump->parsed()) return uroce::tools::pcap_dump(dump_file, stdout, stderr);
  if (stats->parsed()) return uroce::tools::stats_run(stats_cmd, stdout, stderr);
  if (faults->parsed()) return uroce::tools::faults_run(faults_cmd, stdout, stderr);
  if (incast->parsed()) return uroce::tools::incast_run(incast_cmd, stdout);
  if (sim->parsed()) {
    sim_cmd.cluster.faults = !no_faults;
    sim_cmd.cluster.hold_acks = !no_hold_acks;
    sim_cmd.cluster.defer_acks = !no_defer_acks;
    if (faults_opt->count() > 0) {
      auto spec = uroce::fault::FaultSpec::parse(fault_spec);
      if (!spec.ok()) {
        std::fprintf(stderr, "uroce sim --faults: %s\n", spec.error().c_str());
        return 2;
      }
      sim_cmd.cluster.fault_spec = std::move(spec.value());
    }
    if (auto why = uroce::tools::sim_check(sim_cmd)) {
      std::fprintf(stderr, "uroce sim --faults: %s\n", why->c_str());
      return 2;
    }
    return uroce::tools::sim_run(sim_cmd, stdout);
  }
  if (perf->parsed()) return uroce::tools::perf_run(perf_opt, stdout, stderr);
  if (demo->parsed()) return uroce::tools::demo_run(demo_opt, stdout, stderr);
  return 2;
}
