# The prologue of the drop-in's system tests (UCX, MPI): sourced, not run. Each exits the test:
#
#   require_programs PACKAGES PROG...   # 77 (skipped) unless every PROG is on PATH
#                                       # (PACKAGES: what to apt-get install for them)
#   require_root WHY                    # 77 unless run as root (WHY: what needs it)
#   require_setup UROCE                 # 1 unless `UROCE setup` succeeds

require_programs() {
  local packages=$1 prog
  shift
  for prog in "$@"; do
    if ! command -v "$prog" >/dev/null; then
      echo "SKIP: $prog is not installed (apt-get install $packages)"
      exit 77
    fi
  done
}

require_root() {
  if ((EUID != 0)); then
    echo "SKIP: needs root $1; CI runs as root"
    exit 77
  fi
}

require_setup() {
  if ! "$1" setup >/dev/null; then
    echo "FAIL: uroce setup"
    exit 1
  fi
}
