# shellcheck shell=bash
# What the benchmark scripts share: the Release build (all of them), and for bench/ucx_bench.sh and
# bench/mpi_bench.sh two transports measured alternately for ROUNDS rounds over the Release
# drop-in, medians and ratios. Sourced from the repository's root.

# rounds_arg NAME VALUE: VALUE if it is a positive integer, else a message naming NAME and exit 2.
rounds_arg() {
  [[ $2 =~ ^[0-9]+$ && $2 -ge 1 ]] || {
    echo "$1: ROUNDS must be a positive integer" >&2
    exit 2
  }
  echo "$2"
}

# seconds_arg NAME VALUE: VALUE if it is a positive integer, else a message naming NAME and exit 2.
seconds_arg() {
  [[ $2 =~ ^[0-9]+$ && $2 -ge 1 ]] || {
    echo "$1: SECONDS must be a positive integer" >&2
    exit 2
  }
  echo "$2"
}

# pin_pair: sets cpu0 and cpu1, the command prefixes that pin a server to CPU 0 and a client to
# CPU 1 where the host has two CPUs and taskset (empty otherwise).
pin_pair() {
  cpu0=() cpu1=()
  if (($(nproc) >= 2)) && command -v taskset >/dev/null; then
    cpu0=(taskset -c 0) cpu1=(taskset -c 1)
  fi
}

# configure_release: build-release/ (of the current directory, the repository's root) configured
# as the benchmarks and scripts/demo have it: Release, no sanitizer, benchmarks without tests,
# the compilers as scripts/demo gives them (so that they share it), ccache where there is one.
# Twice when needed: a build-release/ configured before with other compiler paths has its cache
# deleted by the first run, which then drops the other -D values (CMAKE_BUILD_TYPE among them: an
# unoptimised build, measured at a third of the speed).
configure_release() {
  local launcher=() i
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  for i in 1 2; do
    cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DUROCE_SANITIZE=OFF \
      -DCMAKE_C_COMPILER="${CC:-gcc}" -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
      -DUROCE_BUILD_TESTS=OFF -DUROCE_BUILD_BENCH=ON -DUROCE_BUILD_FUZZ=OFF "${launcher[@]}" \
      >/dev/null
    grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' build-release/CMakeCache.txt && return 0
  done
  echo "configure_release: build-release/ is not a Release build; remove it and run again" >&2
  exit 1
}

# release_build TARGET...: build-release/ configured (configure_release) and TARGETs built there.
release_build() {
  scripts/install-deps >/dev/null
  configure_release
  ninja -C build-release "$@" >/dev/null
}

# devd_gone ADDR...: waits (up to 5 s) until the coordinators of uroce's devices on ADDRs have
# exited; they linger briefly after their last client, and the next run should start from the
# same state. Coordinators of other addresses (other users of the machine) do not count.
devd_gone() {
  local re
  re=$(printf '%s|' "$@")
  for _ in $(seq 100); do
    pgrep -f "uroce-devd --ip (${re%|}) " >/dev/null || return 0
    sleep 0.05
  done
}

# median: the median of the numbers on stdin (separated by spaces or newlines; the lower middle
# one of an even count).
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# ratio_row LABEL FORMAT UROCE_VALUES TCP_VALUES GOAL: a row of the Markdown table the benchmarks
# print: each side's median over the rounds (printf FORMAT), and their ratio.
ratio_row() {
  local u t
  u=$(median <<<"$3") t=$(median <<<"$4")
  awk -v l="$1" -v f="$2" -v u="$u" -v t="$t" -v g="$5" \
    'BEGIN { printf "| %s | " f " | " f " | %.2fx | %s |\n", l, u, t, u / t, g }'
}

# cpu_model: the first "model name" of /proc/cpuinfo.
cpu_model() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1; }

# perf_pair DIR OUT ENV... -- ARGS...: one `uroce perf ARGS` pair on loopback, the server on $SIP
# pinned by cpu0 and the client on $CIP by cpu1 (pin_pair), both under `env ENV...` ($U: the
# uroce binary). The client's JSON goes to DIR/OUT.json and is echoed as "OUT: JSON".
perf_pair() {
  local dir=$1 out=$2 envs=()
  shift 2
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  env "${envs[@]}" "${cpu0[@]}" "$U" perf "$@" --ip "$SIP" -p 18517 --json >"$dir/server.json" &
  local srv=$!
  env "${envs[@]}" "${cpu1[@]}" "$U" perf "$@" --ip "$CIP" -p 18517 --json --connect_timeout 30 \
    "$SIP" >"$dir/$out.json"
  wait $srv
  echo "$out: $(cat "$dir/$out.json")"
}
