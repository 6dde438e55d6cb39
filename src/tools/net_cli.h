// The command-line side of `uroce ping`, `uroce devices`, `uroce devinfo` and `uroce setup`:
// their options, registered on the `uroce` app, kept out of uroce_main.cc.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

#include "tools/devinfo_cmd.h"
#include "tools/ping_cmd.h"
#include "tools/setup_cmd.h"

namespace uroce::tools {

class NetCommands {
 public:
  void add_to(CLI::App& app);
  // The exit status of the command that was parsed, or nullopt when none of these was.
  std::optional<int> run();

 private:
  PingOptions ping_;
  DevinfoOptions devinfo_;
  SetupOptions setup_;
  CLI::App* ping_cmd_ = nullptr;
  CLI::App* devices_cmd_ = nullptr;
  CLI::App* devinfo_cmd_ = nullptr;
  CLI::App* setup_cmd_ = nullptr;
};

}  // namespace uroce::tools
