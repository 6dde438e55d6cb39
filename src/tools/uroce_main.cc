// The `uroce` command.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fault/fault.h"
#include "tools/demo_cmd.h"
#include "tools/doctor_cmd.h"
#include "tools/faults_cmd.h"
#include "tools/incast_cmd.h"
#include "tools/net_cli.h"
#include "tools/pcap_cmd.h"
#include "tools/perf_cmd.h"
#include "tools/run_cmd.h"
#include "tools/sim_cmd.h"
#include "tools/stats_cmd.h"

namespace {

// `uroce pcap check FILES` and `uroce pcap dump FILE`.
struct PcapCli {
  std::vector<std::string> check_files;
  std::string dump_file;
  std::string psk;  // --psk: verify (and decrypt) sealed packets with this key
  CLI::App* check = nullptr;
  CLI::App* dump = nullptr;
};

void add_pcap(CLI::App& app, PcapCli& c) {
  CLI::App* pcap = app.add_subcommand("pcap", "Check and decode RoCEv2 packet captures");
  pcap->require_subcommand(1);
  c.check = pcap->add_subcommand(
      "check", "Verify the ICRC and structure of every RoCEv2 packet; exit 1 if any is invalid");
  // Unreadable files are reported by the command itself (exit 2), not as usage errors.
  c.check->add_option("files", c.check_files, "pcap or pcapng files")->required();
  c.dump = pcap->add_subcommand("dump", "Decode every packet of a capture");
  c.dump->add_option("file", c.dump_file, "pcap or pcapng file")->required();
  for (CLI::App* sub : {c.check, c.dump}) {
    sub->add_option("--psk", c.psk,
                    "The devices' pre-shared key (32 or 64 hex digits, the config file's psk=): "
                    "verify sealed packets' tags and decrypt encrypted payloads");
  }
}

// The pcap command that was parsed.
int run_pcap(const PcapCli& c) {
  std::optional<uroce::seal::Key> key;
  if (!c.psk.empty()) {
    auto k = uroce::seal::parse_key_hex(c.psk);
    if (!k.ok()) {
      std::fprintf(stderr, "uroce pcap: --psk: %s\n", k.error().c_str());
      return uroce::tools::kExitFileError;
    }
    key = k.value();
  }
  const uroce::seal::Key* kp = key ? &*key : nullptr;
  if (c.check->parsed()) return uroce::tools::pcap_check(c.check_files, stdout, stderr, kp);
  return uroce::tools::pcap_dump(c.dump_file, stdout, stderr, kp);
}

// `uroce sim` and its `incast` subcommand. The flags that negate a setting are read into
// cmd.cluster by sim_run_cli.
struct SimCli {
  uroce::tools::SimCommand cmd;
  bool no_faults = false;
  bool no_hold_acks = false;
  bool no_defer_acks = false;
  std::string fault_spec;
  CLI::Option* faults_opt = nullptr;
  CLI::App* sim = nullptr;
  uroce::tools::IncastCommand incast_cmd;
  CLI::App* incast = nullptr;
};

// The cluster's shape: hosts, QP pairs, operations, messages.
void add_sim_shape(CLI::App& sim, uroce::tools::SimCommand& cmd) {
  sim.add_option("--seed", cmd.cluster.seed, "First seed")->capture_default_str();
  sim.add_option("--swarm", cmd.swarm, "Number of seeds to run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{100'000'000}));
  sim.add_option("--hosts", cmd.cluster.hosts, "Hosts")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  sim.add_option("--rc", cmd.cluster.rc_pairs, "RC QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  sim.add_option("--uc", cmd.cluster.uc_pairs, "UC QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sim.add_option("--ud", cmd.cluster.ud_pairs, "UD QP pairs")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sim.add_option("--xrc", cmd.cluster.xrc_pairs,
                 "XRC initiator/target pairs (each target with an XRC SRQ)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sim.add_option("--ops", cmd.cluster.ops_per_qp, "Operations per QP")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sim.add_option("--max-msg", cmd.cluster.max_message_bytes,
                 "Largest message in bytes (0: up to 3 path MTUs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16384));
  sim.add_option("--idle-qps", cmd.cluster.idle_qps_per_host, "Idle QPs per host")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
}

// Faults, ACK policy, selective repeat, capture and output.
void add_sim_behaviour(CLI::App& sim, SimCli& c) {
  CLI::Option* no_faults_flag =
      sim.add_flag("--no-faults", c.no_faults, "No loss, duplication, reordering, corruption");
  c.faults_opt = sim.add_option(
      "--faults", c.fault_spec,
      "Every link's faults in UROCE_FAULTS' grammar (one rule, no match keys but dir=tx), "
      "instead of the seed's: e.g. 'loss=2%,dup=1%,reorder=1%,reorder_by=50us'");
  c.faults_opt->excludes(no_faults_flag);
  sim.add_option("--aim-corruption", c.cmd.cluster.aimed_corruption_per_mille,
                 "Frames per 1000 received in the fault phase with a bit flipped in a header "
                 "field that places data (opcode, QPN, PSN, pad, RETH) or in the payload")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sim.add_flag("--no-hold-acks", c.no_hold_acks,
               "Hosts send every ACK at once (a device's UROCE_HOLD_ACKS=0)");
  sim.add_flag("--no-defer-acks", c.no_defer_acks,
               "Hosts hold ACKs but never defer one behind a request (UROCE_DEFER_ACKS=0)");
  sim.add_option("--selective-repeat", c.cmd.cluster.selective_repeat_percent,
                 "Percent of RC pairs (drawn from the seed) that run selective repeat")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  sim.add_option("--pcap", c.cmd.cluster.pcap_path, "Write every frame sent to this pcap");
  sim.add_flag("-v,--verbose", c.cmd.verbose, "A line per seed");
}

void add_sim(CLI::App& app, SimCli& c) {
  c.sim = app.add_subcommand(
      "sim", "Run the deterministic network simulation (one seed or a swarm of seeds)");
  add_sim_shape(*c.sim, c.cmd);
  add_sim_behaviour(*c.sim, c);
  c.incast = c.sim->add_subcommand(
      "incast",
      "N senders into one receiver through a switch port with ECN marking, with a device's "
      "congestion control (dcqcn-aimd) or --cc's");
  uroce::tools::add_incast_options(*c.incast, c.incast_cmd);
}

int sim_run_cli(SimCli& c) {
  c.cmd.cluster.faults = !c.no_faults;
  c.cmd.cluster.acks.hold = !c.no_hold_acks;
  c.cmd.cluster.acks.defer = !c.no_defer_acks;
  if (c.faults_opt->count() > 0) {
    auto spec = uroce::fault::FaultSpec::parse(c.fault_spec);
    if (!spec.ok()) {
      std::fprintf(stderr, "uroce sim --faults: %s\n", spec.error().c_str());
      return 2;
    }
    c.cmd.cluster.fault_spec = std::move(spec.value());
  }
  if (auto why = uroce::tools::sim_check(c.cmd)) {
    std::fprintf(stderr, "uroce sim --faults: %s\n", why->c_str());
    return 2;
  }
  return uroce::tools::sim_run(c.cmd, stdout);
}

CLI::App* add_stats(CLI::App& app, uroce::tools::StatsCommand& cmd) {
  CLI::App* stats = app.add_subcommand(
      "stats",
      "Counters of the running uroce devices (exit 1: none running, 2: one did not answer)");
  stats->add_option("-d,--dev", cmd.device, "Only this device");
  stats->add_flag("--qp", cmd.qp, "A line per QP too");
  stats->add_flag("--json", cmd.json, "One JSON array");
  return stats;
}

CLI::App* add_faults(CLI::App& app, uroce::tools::FaultsCommand& cmd) {
  CLI::App* faults = app.add_subcommand(
      "faults",
      "A running device's faults, live: `faults -d DEV show`, `set SPEC` (the UROCE_FAULTS "
      "grammar), `clear`");
  faults->add_option("-d,--dev", cmd.device, "The device")->required();
  faults->add_option("-p,--pid", cmd.pid, "Only this process's");
  faults->add_option("action", cmd.action, "show, set or clear")->required();
  faults->add_option("spec", cmd.spec, "For set: the faults (see README)");
  return faults;
}

}  // namespace

// The subcommands' options, the parse, then the one subcommand that was given.
int main(int argc, char** argv) {
  // `uroce run` takes everything from PROGRAM on as the program's (run_cmd.h).
  if (argc >= 2 && std::string(argv[1]) == "run") {
    uroce::tools::RunOptions run_opt;
    if (auto why =
            uroce::tools::parse_run_args({argv + 2, static_cast<std::size_t>(argc - 2)}, run_opt)) {
      std::fprintf(stderr, "uroce run: %s\n%s", why->c_str(), uroce::tools::kRunUsage);
      return 2;
    }
    return uroce::tools::run_run(run_opt, stderr);
  }
  CLI::App app{"uroce: RoCEv2 in user space"};
  app.set_version_flag("--version", "uroce " UROCE_VERSION);
  app.require_subcommand(1);
  // Listed for --help only: main() runs it before CLI11 parses anything.
  app.add_subcommand("run",
                     "Run an unmodified RDMA program over uroce's drop-ins: `run [-d DEV|"
                     "--ip ADDR] [--faults SPEC] -- PROGRAM ARGS...` (run --help)");

  PcapCli pcap;
  add_pcap(app, pcap);
  SimCli sim;
  add_sim(app, sim);
  uroce::tools::NetCommands net_cmds;
  net_cmds.add_to(app);
  uroce::tools::StatsCommand stats_cmd;
  CLI::App* stats = add_stats(app, stats_cmd);
  uroce::tools::FaultsCommand faults_cmd;
  CLI::App* faults = add_faults(app, faults_cmd);
  uroce::tools::PerfOptions perf_opt;
  CLI::App* perf = app.add_subcommand(
      "perf",
      "RDMA benchmarks as perftest's ib_* tools: `perf TEST` (server), `perf TEST ADDRESS`");
  uroce::tools::add_perf_options(*perf, perf_opt);
  uroce::tools::DemoOptions demo_opt;
  CLI::App* demo = app.add_subcommand(
      "demo", "Two uroce processes on loopback: every RDMA operation checked, then perf numbers");
  uroce::tools::add_demo_options(*demo, demo_opt);

  uroce::tools::DoctorOptions doctor_opt;
  CLI::App* doctor = app.add_subcommand(
      "doctor", "Check this host for uroce and explain each problem with its fix (exit 1: any)");
  uroce::tools::add_doctor_options(*doctor, doctor_opt);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (auto rc = net_cmds.run()) return *rc;
  if (pcap.check->parsed() || pcap.dump->parsed()) return run_pcap(pcap);
  if (stats->parsed()) return uroce::tools::stats_run(stats_cmd, stdout, stderr);
  if (faults->parsed()) return uroce::tools::faults_run(faults_cmd, stdout, stderr);
  if (sim.incast->parsed()) return uroce::tools::incast_run(sim.incast_cmd, stdout);
  if (sim.sim->parsed()) return sim_run_cli(sim);
  if (perf->parsed()) return uroce::tools::perf_run(perf_opt, stdout, stderr);
  if (demo->parsed()) return uroce::tools::demo_run(demo_opt, stdout, stderr);
  if (doctor->parsed()) return uroce::tools::doctor_run(doctor_opt, stdout);
  return 2;
}
