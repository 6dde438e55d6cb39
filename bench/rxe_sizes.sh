#!/usr/bin/env bash
# What the kernel's Soft-RoCE allocates per QP and per MR (issue 43: uroce's memory per QP and MR
# "beside what rxe's structures take"), from the type information (BTF) of the very rdma_rxe
# module the interop VM runs: Debian 12's kernel package, as tests/interop/build-vm-image.sh
# unpacks it into its cache. Prints the structure sizes; docs/PERFORMANCE.md ("Many QPs in one
# process") adds them up with rxe's allocation rules.
#
#   bench/rxe_sizes.sh [CACHE_DIR]     # default $UROCE_INTEROP_CACHE or /var/cache/uroce-interop
#
# Needs bpftool (Debian package bpftool) and an unpacked tree (run the interop image build once).
set -euo pipefail
cache=${1:-${UROCE_INTEROP_CACHE:-/var/cache/uroce-interop}}
command -v bpftool > /dev/null || { echo "rxe_sizes: needs bpftool (apt-get install bpftool)" >&2; exit 2; }
tree=$(ls -d "$cache"/tree-*/ 2> /dev/null | grep -v '\.debs/$' | head -1 || true)
[[ -n $tree ]] || { echo "rxe_sizes: no unpacked kernel tree in $cache (build the interop image)" >&2; exit 2; }
vmlinuz=$(ls "$tree"boot/vmlinuz-* | head -1)
rxe=$(find "$tree"lib/modules -name 'rdma_rxe.ko*' | head -1)
uverbs=$(find "$tree"lib/modules -name 'ib_uverbs.ko*' | head -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The module's BTF is split against the kernel's own, which sits in the compressed vmlinux
# inside vmlinuz (Debian compresses it with xz).
python3 - "$vmlinuz" "$work/vmlinux" << 'EOF'
import lzma, sys
data = open(sys.argv[1], 'rb').read()
at = data.find(b'\xfd7zXZ\x00')
if at < 0:
    sys.exit('rxe_sizes: vmlinuz is not xz-compressed')
open(sys.argv[2], 'wb').write(lzma.LZMADecompressor().decompress(data[at:]))
EOF
for m in "$rxe" "$uverbs"; do
  name=$(basename "$m" .xz)
  case $m in
    *.xz) xz -dc "$m" > "$work/$name" ;;
    *) cp "$m" "$work/$name" ;;
  esac
done
echo "kernel: $(basename "$vmlinuz" | sed 's/^vmlinuz-//')"
{
  bpftool btf dump file "$work/rdma_rxe.ko" -B "$work/vmlinux"
  bpftool btf dump file "$work/ib_uverbs.ko" -B "$work/vmlinux"
  bpftool btf dump file "$work/vmlinux"
} | awk '
  match($0, /STRUCT \x27[a-z_]+\x27 size=[0-9]+/) {
    split(substr($0, RSTART, RLENGTH), f, /[\x27=]/)
    want["rxe_qp"]; want["rxe_send_wqe"]; want["rxe_recv_wqe"]; want["rxe_queue"]
    want["rxe_queue_buf"]; want["rxe_mmap_info"]; want["rxe_mr"]; want["rxe_map"]
    want["rxe_phys_buf"]; want["ib_umem"]; want["ib_uobject"]; want["ib_uqp_object"]
    want["socket_alloc"]; want["udp_sock"]; want["vm_struct"]; want["vmap_area"]
    want["scatterlist"]
    if ((f[2] in want) && !(f[2] in seen)) { seen[f[2]]; printf "%-16s %6d\n", f[2], f[4] }
  }'
