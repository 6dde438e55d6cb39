#include "tools/faults_cmd.h"

#include <algorithm>
#include <vector>

#include "fault/fault.h"
#include "tools/stats_cmd.h"

namespace uroce::tools {

int faults_run(const FaultsCommand& cmd, std::FILE* out, std::FILE* err) {
  std::string request;
  if (cmd.action == "show" || cmd.action == "clear") {
    if (!cmd.spec.empty()) {
      std::fprintf(err, "uroce faults: %s takes no spec\n", cmd.action.c_str());
      return kFaultsExitUsage;
    }
    request = "faults " + cmd.action;
  } else if (cmd.action == "set") {
    auto spec = fault::FaultSpec::parse(cmd.spec);
    if (!spec.ok()) {
      std::fprintf(err, "uroce faults: %s\n", spec.error().c_str());
      return kFaultsExitUsage;
    }
    if (spec->empty()) {
      std::fprintf(err, "uroce faults: set needs a spec (clear removes the faults)\n");
      return kFaultsExitUsage;
    }
    request = "faults set " + spec->to_string();
  } else {
    std::fprintf(err, "uroce faults: unknown action '%s' (show, set SPEC or clear)\n",
                 cmd.action.c_str());
    return kFaultsExitUsage;
  }
  std::vector<StatsEndpoint> eps = find_stats_endpoints(cmd.proc_net_unix);
  std::erase_if(eps, [&](const StatsEndpoint& e) {
    return e.device != cmd.device || (cmd.pid != 0 && e.pid != cmd.pid);
  });
  if (eps.empty()) {
    std::fprintf(err, "uroce faults: no running uroce device named %s%s\n", cmd.device.c_str(),
                 cmd.pid != 0 ? (" in pid " + std::to_string(cmd.pid)).c_str() : "");
    return kFaultsExitNoDevice;
  }
  int status = kFaultsExitOk;
  for (const StatsEndpoint& e : eps) {
    auto answer = query_stats_endpoint(e.socket_name, request, cmd.timeout);
    if (!answer.ok()) {
      std::fprintf(err, "uroce faults: %s (pid %d): %s\n", e.device.c_str(), e.pid,
                   answer.error().c_str());
      status = kFaultsExitFailed;
      continue;
    }
    std::string a = answer.value();
    while (!a.empty() && a.back() == '\n') a.pop_back();
    if (!a.starts_with("ok")) {
      std::fprintf(err, "uroce faults: %s (pid %d): %s\n", e.device.c_str(), e.pid, a.c_str());
      status = kFaultsExitFailed;
      continue;
    }
    const std::string spec = a.size() > 3 ? a.substr(3) : std::string();
    std::fprintf(out, "%s pid %d: %s\n", e.device.c_str(), e.pid,
                 spec.empty() ? "(no faults)" : spec.c_str());
  }
  return status;
}

}  // namespace uroce::tools
