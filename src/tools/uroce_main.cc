// The `uroce` command.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "tools/pcap_cmd.h"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (check->parsed()) return uroce::tools::pcap_check(check_files, stdout, stderr);
  if (dump->parsed()) return uroce::tools::pcap_dump(dump_file, stdout, stderr);
  return 2;
}
