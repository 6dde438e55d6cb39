#!/usr/bin/env python3
"""Tests for scripts/check-core-purity, scripts/check-rooms, scripts/check-edge, scripts/check-format,
scripts/check-function-length and scripts/check-assertions: each is run on small trees made
in a temporary directory, with and without planted problems, and must pass or fail as expected.

Run one test with `check_scripts_test.py CorePurityTest.test_planted_violations`; ctest
registers each test separately (tests/scripts/CMakeLists.txt).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
PURITY = os.path.join(REPO, "scripts", "check-core-purity")
FORMAT = os.path.join(REPO, "scripts", "check-format")
ROOMS = os.path.join(REPO, "scripts", "check-rooms")
EDGE = os.path.join(REPO, "scripts", "check-edge")
LENGTH = os.path.join(REPO, "scripts", "check-function-length")
ASSERTIONS = os.path.join(REPO, "scripts", "check-assertions")


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip("\n"))


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def reported_locations(stdout):
    """The set of `path:line` that the purity checker reported."""
    return {m.group(1) for m in re.finditer(r"^(\S+:\d+): ", stdout, re.MULTILINE)}


class TreeTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="uroce-scripts-test-")
        self.addCleanup(shutil.rmtree, self.root)


class CorePurityTest(TreeTest):
    def purity(self):
        return run([PURITY, self.root])

    def test_clean_tree_passes(self):
        write_tree(self.root, {
            "src/wire/psn.h": """
                #pragma once
                #include <cstdint>
                #include <span>
                inline uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & 0xffffff; }
                """,
            "src/wire/psn.cc": '#include "wire/psn.h"\n',
        })
        result = self.purity()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("2 files in src/wire", result.stdout)

    def test_planted_violations(self):
        write_tree(self.root, {
            "src/wire/bad.cc": """
                #include <cstdint>
                #include <thread>
                #include <chrono>
                #include <sys/socket.h>
                #include <netinet/in.h>
                #include <atomic>
                #include <random>
                // A clean line between violations.
                void f() {
                  auto t0 = std::chrono::steady_clock::now();
                  struct timespec ts;
                  clock_gettime(CLOCK_MONOTONIC, &ts);
                  std::random_device rd;
                  int r = rand();
                  srand(7);
                  long s = time(nullptr);
                  unsigned long long c = __rdtsc();
                  std::thread worker([] {});
                  pthread_create(nullptr, nullptr, nullptr, nullptr);
                  int fd = ::socket(2, 1, 0);
                  gettimeofday(nullptr, nullptr);
                  getrandom(nullptr, 0, 0);
                  std::mt19937 rng(42);
                }
                """,
            "src/cc/dcqcn.cc": """
                #include <cstdint>
                #include <ctime>
                long ticks() { return std::clock(); }
                """,
            "src/transport/qp.h": """
                #pragma once
                #include <mutex>
                """,
            "src/verbs/mr.cc": """
                #include <cstddef>
                void g() { std::this_thread::yield(); }
                """,
        })
        result = self.purity()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        expected = {f"src/wire/bad.cc:{n}" for n in (2, 3, 4, 5, 6, 10, 12, 13, 14, 15, 16, 17,
                                                     18, 19, 20, 21, 22)}
        expected |= {"src/cc/dcqcn.cc:2", "src/cc/dcqcn.cc:3", "src/transport/qp.h:2", "src/verbs/mr.cc:2"}
        self.assertEqual(reported_locations(result.stdout), expected, result.stdout)
        # Each line names what was found.
        for needle in ("src/wire/bad.cc:2: includes <thread>",
                       "src/wire/bad.cc:3: includes <chrono>",
                       "src/wire/bad.cc:4: includes <sys/socket.h>",
                       "src/wire/bad.cc:6: includes <atomic>",
                       "src/wire/bad.cc:10: steady_clock",
                       "src/wire/bad.cc:12: clock_gettime",
                       "src/wire/bad.cc:13: random_device",
                       "src/wire/bad.cc:14: rand()",
                       "src/wire/bad.cc:15: srand()",
                       "src/wire/bad.cc:16: time()",
                       "src/wire/bad.cc:17: __rdtsc",
                       "src/wire/bad.cc:18: std::thread",
                       "src/wire/bad.cc:19: pthread_create",
                       "src/wire/bad.cc:20: socket()",
                       "src/wire/bad.cc:21: gettimeofday",
                       "src/wire/bad.cc:22: getrandom",
                       "src/cc/dcqcn.cc:2: includes <ctime>",
                       "src/cc/dcqcn.cc:3: clock()",
                       "src/transport/qp.h:2: includes <mutex>",
                       "src/verbs/mr.cc:2: std::this_thread"):
            self.assertIn(needle, result.stdout)

    def test_comments_strings_members_and_declarations_do_not_trigger(self):
        write_tree(self.root, {
            "src/transport/timers.h": r'''
                #pragma once
                #include <cstdint>
                #include <random>  // seeded engines only; no <chrono> here
                // std::thread, time(nullptr) and steady_clock::now() are the engine's job.
                /* rand(); #include <thread>
                   clock_gettime(CLOCK_MONOTONIC, &ts); */
                struct Instant { int64_t ns; };
                struct Timer {
                  Instant time() const;
                  int random() const;
                };
                inline const char* kWhy = "socket() and time() are not called here";
                inline const char* kRaw = R"x(std::random_device rd; time(0))x";
                inline constexpr int64_t kAckTimeoutNs = 1'000'000;
                inline char kQuote = '\'';
                inline int64_t handle_timeout(const Timer& t, std::mt19937& rng) {
                  return t.time().ns + t.random() + static_cast<int64_t>(rng());
                }
                ''',
        })
        result = self.purity()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_headers_included_from_outside_the_core_are_checked(self):
        write_tree(self.root, {
            "src/wire/packet.h": """
                #pragma once
                #include "base/bytes.h"
                #include "base/clock.h"
                """,
            "src/base/bytes.h": "#pragma once\n#include <cstddef>\n",
            "src/base/clock.h": """
                #pragma once
                #include <chrono>
                inline long now_ns() {
                  return std::chrono::steady_clock::now().time_since_epoch().count();
                }
                """,
            # Not included by the core: base may use threads.
            "src/base/pool.cc": "#include <thread>\n",
        })
        result = self.purity()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout),
                         {"src/base/clock.h:2", "src/base/clock.h:4"}, result.stdout)
        self.assertIn("(included from src/wire/packet.h:3)", result.stdout)

    def test_connection_manager_is_core(self):
        write_tree(self.root, {
            "src/wire/psn.h": "#pragma once\n",
            "src/cm/cm.cc": """
                #include <chrono>
                auto t() { return std::chrono::steady_clock::now(); }
                """,
        })
        result = self.purity()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout), {"src/cm/cm.cc:1", "src/cm/cm.cc:2"})

    def test_fault_stage_is_core(self):
        write_tree(self.root, {
            "src/wire/psn.h": "#pragma once\n",
            "src/fault/fault.cc": """
                #include <sys/socket.h>
                int s() { return ::socket(2, 2, 0); }
                """,
        })
        result = self.purity()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout),
                         {"src/fault/fault.cc:1", "src/fault/fault.cc:2"})

    def test_root_without_core_is_an_error(self):
        write_tree(self.root, {"src/base/bytes.h": "#pragma once\n"})
        result = self.purity()
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)


@unittest.skipIf(shutil.which("git") is None, "git is not installed")
class RoomsTest(TreeTest):
    def rooms(self):
        return run([ROOMS, self.root])

    def test_layered_tree_passes(self):
        write_tree(self.root, {
            "src/engine/engine.h": '#pragma once\n#include "datapath/datapath.h"\n',
            "src/datapath/datapath.h": '#pragma once\n#include "wire/packet.h"\n',
            "src/wire/packet.h": "#pragma once\n",
            "src/device/udp_device.h": '#pragma once\n#include "engine/engine.h"\n'
                                       '#include "proto/devd_protocol.h"\n',
            "src/device/device_config.h": "#pragma once\n",
            "src/device/udp_device.cc": '#include "device/udp_device.h"\n'
                                        '#include "device/device_config.h"\n',
            "src/proto/devd_protocol.h": "#pragma once\n",
            "src/devd/coordinator.cc": '#include "proto/devd_protocol.h"\n'
                                       '#include "datapath/udp.h"\n',
            "src/datapath/udp.h": "#pragma once\n",
            "src/tools/main.cc": '#include "devd/coordinator.h"\n#include "device/udp_device.h"\n',
        })
        result = self.rooms()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_planted_violations(self):
        write_tree(self.root, {
            # The device includes the coordinator: the rooms talk through proto/ only.
            "src/device/shared_port.cc": '#include "devd/coordinator.h"\n',
            "src/devd/coordinator.h": "#pragma once\n",
            # The engine takes a concrete datapath instead of the interface.
            "src/engine/engine.cc": '#include "datapath/datapath.h"\n#include "datapath/udp.h"\n',
            "src/datapath/datapath.h": "#pragma once\n",
            "src/datapath/udp.h": "#pragma once\n",
            # A lower layer includes a higher one.
            "src/wire/packet.cc": '#include "transport/qp.h"\n',
            "src/transport/qp.h": "#pragma once\n",
            # A back-arrow between modules: config.h includes dev.h, dev.cc includes config.h.
            "src/device/config.h": '#pragma once\n#include "device/dev.h"\n',
            "src/device/dev.h": "#pragma once\n",
            "src/device/dev.cc": '#include "device/dev.h"\n#include "device/config.h"\n',
            # A folder in no room.
            "src/newroom/x.h": "#pragma once\n",
        })
        result = self.rooms()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout), {
            "src/device/shared_port.cc:1", "src/engine/engine.cc:2", "src/wire/packet.cc:1",
            "src/device/dev.cc:2", "src/newroom/x.h:1"}, result.stdout)
        self.assertIn("include cycle: src/device/config -> src/device/dev -> src/device/config",
                      result.stdout)

    def test_root_without_src_is_an_error(self):
        self.assertEqual(self.rooms().returncode, 2)


def function_of(name, body_lines, signature="void {}() {{"):
    """A function whose signature, body and closing brace take 2 + body_lines lines."""
    body = "".join(f"  x += {i};\n" for i in range(body_lines))
    return signature.format(name) + "\n" + body + "}\n"


class FunctionLengthTest(TreeTest):
    def length(self, *args):
        return run([LENGTH, *args, self.root])

    def test_functions_up_to_the_limit_pass(self):
        write_tree(self.root, {
            "src/a/a.cc": "int x = 0;\n// Long: a test's reason.\n" + function_of("at_limit", 118) +
                          function_of("short", 3),
            # Braces in comments and literals, a brace-initialized member and a class body
            # are not functions of their own.
            "src/a/b.h": "struct S {\n  S() : v_{1}, w_{2} {}\n  int f() const { return 0; }\n"
                         "  int v_, w_;\n};\n// {{{\nconst char* s = \"}}}\";\n",
        })
        result = self.length()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_a_longer_function_fails_and_is_named(self):
        lam = "void outer() {\n  auto f = [&] {\n" + "    x += 1;\n" * 118 + "  };\n}\n"
        write_tree(self.root, {
            "src/a/a.cc": "int x = 0;\n" + function_of("over_limit", 119) +
                          "// Long: a test's reason.\n" + function_of("at_limit", 118),
            # A lambda's lines count towards the function that holds it.
            "src/b/b.cc": "int x = 0;\n" + lam,
            "src/c/c.cc": "int x = 0;\n" + function_of("C::long_method", 200,
                                                       "int {}(int a) const {{"),
        })
        result = self.length()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout),
                         {"src/a/a.cc:2", "src/b/b.cc:2", "src/c/c.cc:2"}, result.stdout)
        self.assertIn("over_limit is 121 lines (limit 120)", result.stdout)
        self.assertIn("C::long_method is 202 lines", result.stdout)
        self.assertEqual(self.length("--max", "300", "--reason-over", "300").returncode, 0)

    def test_a_function_over_70_lines_needs_a_reason(self):
        write_tree(self.root, {
            "src/a/a.cc": "int x = 0;\n" + function_of("no_reason", 69) +  # 71 lines
                          "// What it does.\n" + function_of("other_comment", 69) +
                          "// Long: kept whole because ...\n\n" + function_of("detached", 69) +
                          function_of("seventy", 68),
            "src/b/b.cc": "int x = 0;\n// What it does,\n//  Long: one table, one line each.\n"
                          "// More.\ntemplate <int N>\n" + function_of("reasoned", 100) +
                          "// Long:\n" + function_of("empty_reason", 69),
        })
        result = self.length()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout),
                         {"src/a/a.cc:2", "src/a/a.cc:74", "src/a/a.cc:147", "src/b/b.cc:109"},
                         result.stdout)
        self.assertIn("no_reason is 71 lines, over 70 without a // Long: reason", result.stdout)
        self.assertEqual(self.length("--reason-over", "71").returncode, 0)

    def test_root_without_src_is_an_error(self):
        self.assertEqual(self.length().returncode, 2)


def lines_with_asserts(asserts, lines):
    """A file of `lines` lines of which `asserts` assert."""
    return "void f() {\n" + "  UROCE_ASSERT(x);\n" * asserts + "  g();\n" * (lines - asserts - 2) + \
        "}\n"


class AssertionsTest(TreeTest):
    def assertions(self):
        return run([ASSERTIONS, self.root])

    def test_rooms_at_or_above_wire_pass(self):
        write_tree(self.root, {
            "src/wire/a.cc": lines_with_asserts(1, 100),        # 10 per 1000
            # Both files of the room count: 3 in 202 lines, 14.9 per 1000.
            "src/transport/a.cc": lines_with_asserts(2, 200),
            "src/transport/b.h": "UROCE_CHECK(y);\n\n",
            "src/engine/a.cc": lines_with_asserts(1, 100),  # equal to wire's passes
            "src/device/a.cc": lines_with_asserts(3, 100),
        })
        result = self.assertions()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("transport      3 assertion lines in    202 lines:  14.9 per 1000",
                      result.stdout)

    def test_a_room_below_wire_fails_and_comments_do_not_count(self):
        write_tree(self.root, {
            "src/wire/a.cc": lines_with_asserts(2, 100),
            "src/transport/a.cc": lines_with_asserts(2, 100),
            # Only the subfolder's file asserts: not counted, nor are comments.
            "src/engine/a.cc": "// UROCE_ASSERT(x) in a comment\n" + lines_with_asserts(0, 99),
            "src/engine/sub/b.cc": lines_with_asserts(50, 100),
            "src/device/a.cc": lines_with_asserts(3, 100),
        })
        result = self.assertions()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("src/engine: 0.0 assertions per 1000 lines, below src/wire's 20.0",
                      result.stdout)
        self.assertNotIn("src/transport:", result.stdout)
        self.assertNotIn("src/device:", result.stdout)

    def test_root_without_a_room_is_an_error(self):
        write_tree(self.root, {"src/wire/a.cc": "int x;\n"})
        self.assertEqual(self.assertions().returncode, 2)


class EdgeTest(TreeTest):
    def edge(self):
        return run([EDGE, self.root])

    def test_reads_at_the_edge_pass_and_are_listed(self):
        write_tree(self.root, {
            "src/tools/main.cc": 'int f() { return std::getenv("UROCE_X") != nullptr; }\n',
            "src/compat/ibverbs/lib.cc": 'int g() { return ::secure_getenv("Y") != nullptr; }\n',
            "src/edge/env.cc": 'const char* h() { return getenv ("Z"); }\n',
            # Comments that name getenv are not sites.
            "src/engine/engine.cc": "// the engine never calls getenv(3)\n"
                                    "/* nor getenv(\"A\")\n   getenv(\"B\") */ int x;\n",
        })
        result = self.edge()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(reported_locations(result.stdout), {
            "src/tools/main.cc:1", "src/compat/ibverbs/lib.cc:1", "src/edge/env.cc:1"},
            result.stdout)

    def test_planted_reads_below_the_edge_fail(self):
        write_tree(self.root, {
            "src/tools/main.cc": 'int f() { return std::getenv("UROCE_X") != nullptr; }\n',
            "src/engine/engine.cc": 'int x;\nbool y = std::getenv("UROCE_Y");  // below\n',
            "src/devd/coordinator.h": 'inline auto z() { return ::secure_getenv("Z"); }\n',
            "src/wire/packet.cc": '/* ok */ auto w = getenv("W");\n',
        })
        result = self.edge()
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        violations = {line.split(": ")[0] for line in result.stdout.splitlines()
                      if "below the edge (" in line}
        self.assertEqual(violations, {"src/engine/engine.cc:2", "src/devd/coordinator.h:1",
                                      "src/wire/packet.cc:1"}, result.stdout)
        self.assertIn("src/tools/main.cc:1: edge:", result.stdout)
        self.assertIn("src/engine/engine.cc:2: VIOLATION:", result.stdout)

    def test_root_without_src_is_an_error(self):
        self.assertEqual(self.edge().returncode, 2)


class CheckFormatTest(TreeTest):
    def setUp(self):
        super().setUp()
        shutil.copy(os.path.join(REPO, ".clang-format"), self.root)
        write_tree(self.root, {
            "src/wire/good.cc": "int answer() { return 42; }\n",
            "tests/wire/good_test.cc": "int main() { return 0; }\n",
        })

    def git_add_all(self):
        result = run(["git", "-C", self.root, "add", "-A"])
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_formatted_tree_passes(self):
        run(["git", "init", "-q", self.root])
        self.git_add_all()
        result = run([FORMAT, self.root])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("2 files", result.stdout)

    def test_unformatted_tracked_file_fails_and_is_named(self):
        run(["git", "init", "-q", self.root])
        write_tree(self.root, {"src/wire/bad.h": "int  f( ){return 1;}\n"})
        self.git_add_all()
        result = run([FORMAT, self.root])
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("src/wire/bad.h: not formatted", result.stdout)
        self.assertNotIn("good.cc: not formatted", result.stdout)

    def test_untracked_files_are_ignored(self):
        run(["git", "init", "-q", self.root])
        self.git_add_all()
        write_tree(self.root, {"src/wire/scratch.cc": "int  f( ){return 1;}\n"})
        result = run([FORMAT, self.root])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv, verbosity=2)
