#!/usr/bin/env python3
"""rdma-core's own pyverbs test suite over the drop-in libibverbs.so.1 (issue 41).

Debian's python3-pyverbs (rdma-core 44) installs the suite of its release, run_tests.py and
tests/, under /usr/share/doc/rdma-core/tests, its larger modules gzip-compressed as Debian
compresses documentation. This script copies that folder to a temporary one, unpacks it, and
runs the named modules (or every module) on one uroce device, with the drop-in first on
LD_LIBRARY_PATH, in a child process that reports each test as it starts and ends (a crash
still names its test).

    pyverbs_suite.py --lib BUILD/compat [--address ADDR] [--allow FILE] [--all | MODULE...]

MODULE: a module of the suite (test_qp) or a test in it (test_qp.QPTest.test_modify_qp).
It prints one line per test that did not pass and a table per module (passed, skipped,
failed), then exits 0 when no test failed or erred and every skip is in the allow-list
(pyverbs_skips.txt beside this script: `TEST-ID-GLOB :: REASON-GLOB` lines, each with a
comment saying why the skip is expected), 1 otherwise, 77 when python3-pyverbs is not
installed. UROCE_TEST_PRELOAD: the sanitizer runtime to preload into the Python that loads
a sanitizer build of the drop-in.
"""
import argparse
import fnmatch
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

SUITE = "/usr/share/doc/rdma-core/tests"
HERE = os.path.dirname(os.path.abspath(__file__))
# python3-pyverbs installs into Debian's Python, which need not be the python3 first on PATH.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def unpack_suite(src, dst):
    """Copies the suite to dst, gunzipping the modules Debian compressed."""
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if name.endswith(".gz"):
            with gzip.open(path, "rb") as f, open(os.path.join(dst, name[:-3]), "wb") as out:
                shutil.copyfileobj(f, out)
        elif os.path.isfile(path):
            shutil.copy(path, dst)


def run_child(out_path, suite_dir, dev, names):
    """In the child: loads the suite as run_tests.py does and runs names, one JSON line per
    test start and outcome in out_path."""
    import unittest
    from importlib.machinery import SourceFileLoader

    sys.path.insert(0, suite_dir)
    sys.argv = ["run_tests.py", "--dev", dev, "--gid", "0"]
    from args_parser import parser

    parser.parse_args()
    tests = SourceFileLoader("tests", os.path.join(suite_dir, "__init__.py")).load_module()
    out = open(out_path, "a", buffering=1)

    def emit(test, outcome, why=""):
        out.write(json.dumps({"id": test.id(), "outcome": outcome, "why": why}) + "\n")

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            emit(test, "start")
            super().startTest(test)

        def addSuccess(self, test):
            emit(test, "pass")
            super().addSuccess(test)

        def addSkip(self, test, reason):
            emit(test, "skip", reason)
            super().addSkip(test, reason)

        def addFailure(self, test, err):
            emit(test, "fail", self._exc_info_to_string(err, test))
            super().addFailure(test, err)

        def addError(self, test, err):
            emit(test, "error", self._exc_info_to_string(err, test))
            super().addError(test, err)

        def addExpectedFailure(self, test, err):
            emit(test, "pass")
            super().addExpectedFailure(test, err)

        def addUnexpectedSuccess(self, test):
            emit(test, "fail", "unexpected success")
            super().addUnexpectedSuccess(test)

    if names == ["ALL"]:
        suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    else:
        suite = unittest.defaultTestLoader.loadTestsFromNames(names, tests)
    unittest.TextTestRunner(resultclass=Result, verbosity=2, stream=sys.stdout).run(suite)
    return 0


def read_allow(path):
    """The allow-list: (id glob, reason glob) pairs."""
    rules = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                test, _, why = line.partition("::")
                rules.append((test.strip(), why.strip() or "*"))
    return rules


def allowed(rules, test_id, why):
    return any(fnmatch.fnmatchcase(test_id, t) and fnmatch.fnmatchcase(why, w) for t, w in rules)


def collect(out_path, child_rc):
    """The outcome of every test the child reported: a test started but never ended (the child
    crashed or was killed in it) is an error."""
    results, running = {}, None
    with open(out_path) as f:
        for line in f:
            r = json.loads(line)
            if r["outcome"] == "start":
                running = r["id"]
                continue
            # setUpClass errors and the like come without a start.
            results[r["id"]] = (r["outcome"], r["why"])
            running = None if running == r["id"] else running
    if running is not None and running not in results:
        results[running] = ("error", f"the child exited ({child_rc}) inside this test")
    return results


def module_of(test_id):
    parts = test_id.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tests" else parts[0]


def report(results, rules):
    """Prints every test that did not pass and the per-module table; returns the failures."""
    bad = 0
    table = {}
    for test_id, (outcome, why) in sorted(results.items()):
        row = table.setdefault(module_of(test_id), [0, 0, 0])
        one_line = why.strip().splitlines()[-1] if why.strip() else ""
        if outcome == "pass":
            row[0] += 1
        elif outcome == "skip":
            row[1] += 1
            ok = allowed(rules, test_id, why)
            bad += 0 if ok else 1
            print(f"SKIP {'(allowed)' if ok else '(NOT ALLOWED)'} {test_id}: {why}")
        else:
            row[2] += 1
            bad += 1
            print(f"{outcome.upper()} {test_id}: {one_line}")
            if "-v" in sys.argv or "--verbose" in sys.argv:
                print(why)
    print(f"{'module':28} passed skipped failed")
    for mod, (p, s, f) in sorted(table.items()):
        print(f"{mod:28} {p:6} {s:7} {f:6}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="the folder of the drop-in libibverbs.so.1")
    ap.add_argument("--address", default="127.77.141.1", help="the device's address")
    ap.add_argument("--allow", default=os.path.join(HERE, "pyverbs_skips.txt"))
    ap.add_argument("--suite", default=SUITE, help="rdma-core's tests/ folder")
    ap.add_argument("--timeout", type=int, default=1800, help="for the whole run, seconds")
    ap.add_argument("--all", action="store_true", help="every module of the suite")
    ap.add_argument("-v", "--verbose", action="store_true", help="tracebacks of failures")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("modules", nargs="*")
    args = ap.parse_args()
    if args.child:
        return run_child(args.child[0], args.child[1], args.child[2], args.child[3:])

    try:
        subprocess.run([PYTHON, "-c", "import pyverbs.device"], check=True,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    except subprocess.CalledProcessError:
        print("SKIP: pyverbs is not installed (apt-get install python3-pyverbs)")
        return 77
    if not os.path.isfile(os.path.join(args.suite, "run_tests.py")):
        print(f"SKIP: no rdma-core test suite in {args.suite} (python3-pyverbs ships it)")
        return 77
    if not args.lib or not (args.all or args.modules):
        ap.error("--lib and --all or modules are required")

    env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(args.lib), UROCE_DEVICES=args.address)
    lib = os.path.join(args.lib, "libibverbs.so.1")
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    if re.search(r"libasan|libtsan", needed):
        env["LD_PRELOAD"] = os.environ.get("UROCE_TEST_PRELOAD", "")
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    with tempfile.TemporaryDirectory(prefix="pyverbs.") as tmp:
        suite_dir = os.path.join(tmp, "tests")
        os.mkdir(suite_dir)
        unpack_suite(args.suite, suite_dir)
        out_path = os.path.join(tmp, "results.jsonl")
        open(out_path, "w").close()
        names = ["ALL"] if args.all else args.modules
        cmd = [PYTHON, os.path.abspath(__file__), "--child", out_path, suite_dir, "uroce0"]
        # Its own session, so that a timeout ends the forked helpers of the tests too.
        child = subprocess.Popen(cmd + names, env=env, cwd=tmp, start_new_session=True)
        try:
            rc = child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            rc = f"killed after {args.timeout} s"
        results = collect(out_path, rc)
    if not results:
        print(f"FAIL: the suite ran no test (child exit {rc})")
        return 1
    bad = report(results, read_allow(args.allow))
    if rc != 0:
        print(f"FAIL: the child exited {rc}")
        bad += 1
    print("pyverbs_suite: PASS" if bad == 0 else f"pyverbs_suite: FAIL ({bad} not accepted)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
