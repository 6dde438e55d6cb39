# Loopback tests of uroce_verbs_check over uroce's drop-in libibverbs.so.1: server and client are
# two processes, each on its own device (127.77.200.1 and .2), TCP ports 18900-18919. They need
# neither root nor the VM (the rxe side runs in tests/interop's harness).
if(NOT TARGET uroce_ibverbs)
  return()
endif()

set(VC_LIBDIR ${PROJECT_BINARY_DIR}/compat)

set(vc_next_port 18900)
# verbs_check_pair(NAME TIMEOUT SERVER_RC CLIENT_RC REGEX [CAPTURE] [PCAP_EXPECT REGEX] ARGS...
#                  [--client CLIENT_ONLY_ARGS...])
# CAPTURE: the server side captures every packet; the capture must pass `uroce pcap check` (and
# its dump match PCAP_EXPECT). Not with RDMA READ: the capture of a READ response the server sent
# can show the bytes the server wrote into its buffer after the client's completion (the datapath
# copies a sent frame into the capture after sendmmsg returns, from the registered memory), so
# its ICRC does not match; the packet on the wire (the client's capture) is right.
function(verbs_check_pair name limit src crc regex)
  cmake_parse_arguments(VC "CAPTURE" "PCAP_EXPECT" "" ${ARGN})
  set(tool "")
  if(VC_CAPTURE OR VC_PCAP_EXPECT)
    set(tool $<TARGET_FILE:uroce>)
  endif()
  add_test(NAME compat.verbs_check_${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/verbs_check_pair.sh $<TARGET_FILE:uroce_verbs_check>
                   ${VC_LIBDIR} ${vc_next_port} 127.77.200.1 127.77.200.2 ${limit} ${src} ${crc}
                   ${regex} -- ${VC_UNPARSED_ARGUMENTS})
  math(EXPR t "${limit} + 30")
  set_tests_properties(compat.verbs_check_${name} PROPERTIES
                       ENVIRONMENT
                       "UROCE_TEST_PRELOAD=${UROCE_SANITIZER_PRELOAD};VC_UROCE=${tool};VC_PCAP_EXPECT=${VC_PCAP_EXPECT}"
                       TIMEOUT ${t} LABELS compat
                       # Same devices for every case; like the other compat pairs, run alone.
                       RUN_SERIAL TRUE)
  math(EXPR p "${vc_next_port} + 1")
  set(vc_next_port ${p} PARENT_SCOPE)
endfunction()

set(VC_PASS "^uroce_verbs_check: PASS [1-9][0-9]* checks$")
# Every op (RC SEND, SEND with Immediate, WRITE, WRITE with Immediate, READ, CAS, FAA, UD) at
# every default size, each iteration's data, guards, completions and immediates verified.
verbs_check_pair(all_ops 240 0 0 "${VC_PASS}")
# The same at RC path MTU 1024 (the MTU of rxe on a 1500-byte Ethernet), so messages of 1025+
# bytes are segmented differently than at the loopback's 4096.
verbs_check_pair(all_ops_mtu1024 240 0 0 "${VC_PASS}" -m 1024)
# Receiver Not Ready: every receive is posted only after the message was, so every SEND, SEND
# with Immediate and WRITE with Immediate first meets an empty receive queue and must be retried;
# the capture shows the responder's RNR NAKs.
verbs_check_pair(rnr 240 0 0 "rnr: [1-9][0-9]* RNR-delayed messages sent"
                 PCAP_EXPECT "RNR NAK" --rnr
                 -o send,send_imm,write_imm -s 1,1024,4097,65536 -n 5)
# UD alone: data, byte_len, src_qp, IBV_WC_GRH and the IPv4 header in the GRH area.
verbs_check_pair(ud 120 0 0 "ud size 4096: 20 iterations ok" CAPTURE -o ud)
# A type 2 memory window (-o mw): bound, written through, invalidated by SEND with Invalidate,
# at every size; the server's capture must pass `uroce pcap check`.
verbs_check_pair(mw 240 0 0 "${VC_PASS}" CAPTURE -o mw)
# IBTA 1.5: ATOMIC WRITE (the 8-byte word checked after each) and a WRITE plus a FLUSH of its
# range at every size, the server's capture checked packet by packet.
verbs_check_pair(ibta15 240 0 0 "${VC_PASS}" CAPTURE PCAP_EXPECT "FLUSH" -o atomic_write,flush
                 -s 1,4096,65536 -n 5)
# Every op but READ, with the server's capture checked packet by packet (ICRC, structure).
verbs_check_pair(captured 240 0 0 "${VC_PASS}" CAPTURE
                 -o send,send_imm,write,write_imm,cas,faa,ud -m 1024)
# A lost UD message (--drop-ud, a self-test option: the client skips the first attempt of every
# other one) is asked for again by the server and the run passes, as in the matrix's loss cases.
verbs_check_pair(ud_lost_messages_asked_again 120 0 0 "ud: 4 UD messages sent again"
                 -o ud -s 64,1024 -n 3 --client --drop-ud)
# A copy of the previous UD message in the current one's receive (--dup-ud, a self-test option)
# is set aside by the server (else its data check would fail) and the run passes.
verbs_check_pair(ud_copies_set_aside 120 0 0 "ud: 4 copies of earlier UD messages set aside"
                 -o ud -s 64,1024 -n 3 --client --dup-ud)
# The checks can fail: a client that flips one bit of what it writes (--corrupt, a self-test
# option) is caught by the server, for a WRITE and for a SEND with Immediate; both sides exit 1.
verbs_check_pair(detects_corrupt_write 120 1 1
                 "FAIL: the peer failed: written data: data: 1 of 1 bytes differ, the first at offset 0"
                 -o write --client --corrupt)
verbs_check_pair(detects_corrupt_send_imm 120 1 1
                 "FAIL: the peer failed: received message: data: 1 of 4096 bytes differ, the first at offset 2048"
                 -o send_imm -s 4096 --client --corrupt)
# UD: the receiver's data check; WRITE with Immediate: its immediate check (--corrupt=imm).
verbs_check_pair(detects_corrupt_ud 120 1 1
                 "FAIL: the peer failed: received UD message: data: 1 of 64 bytes differ, the first at offset 32"
                 -o ud -s 64 --client --corrupt)
verbs_check_pair(detects_corrupt_imm 120 1 1
                 "FAIL: the peer failed: receive completion: expected imm_data 0x[0-9a-f]+, got 0x[0-9a-f]+"
                 -o write_imm -s 1025 --client --corrupt=imm)
# Different options on the two sides: both refuse with exit 2 before any traffic.
verbs_check_pair(option_mismatch 120 2 2 "the two sides were given different options" -n 20
                 --client -n 10)

# Bad arguments: a usage error, exit 2. No peer: bounded by --timeout, exit 1, says which step.
add_test(NAME compat.verbs_check_bad_arguments
         COMMAND sh -c "\"$0\" -o send,bogus 2>&1; test $? -eq 2"
                 $<TARGET_FILE:uroce_verbs_check>)
set_tests_properties(compat.verbs_check_bad_arguments PROPERTIES LABELS compat TIMEOUT 30
                     PASS_REGULAR_EXPRESSION "unknown operation 'bogus' in -o")
add_test(NAME compat.verbs_check_no_client_times_out
         COMMAND sh -c "\"$0\" -p 18918 --timeout 1 2>&1; test $? -eq 1"
                 $<TARGET_FILE:uroce_verbs_check>)
set_tests_properties(compat.verbs_check_no_client_times_out PROPERTIES LABELS compat TIMEOUT 30
    PASS_REGULAR_EXPRESSION "FAIL: timed out after 1 s waiting for a client on TCP port 18918")
add_test(NAME compat.verbs_check_no_server_times_out
         COMMAND sh -c "\"$0\" -p 18919 --timeout 1 127.0.0.1 2>&1; test $? -eq 1"
                 $<TARGET_FILE:uroce_verbs_check>)
set_tests_properties(compat.verbs_check_no_server_times_out PROPERTIES LABELS compat TIMEOUT 30
    PASS_REGULAR_EXPRESSION "FAIL: timed out after 1 s waiting for the server 127.0.0.1 port 18919")

# Every op under faults that both processes' devices inject (UROCE_FAULTS, issue 15), the data of
# every iteration still verified; tests/compat/faults_pair.sh checks the counters (each
# corruption caught by the receiver's ICRC check, losses retransmitted).
foreach(f tx loss5)
  if(f STREQUAL "tx")
    set(spec "dir=tx,loss=1%,dup=1%,reorder=1%$<SEMICOLON>dir=rx,corrupt=0.1%,seed=25")
    set(checks loss,dup,reorder)
  else()
    set(spec "loss=5%,seed=26")
    set(checks loss)
  endif()
  add_test(NAME compat.faults.${f}.verbs_check
           COMMAND ${PROJECT_SOURCE_DIR}/tests/compat/faults_pair.sh ${spec} ${checks}
                   ${CMAKE_CURRENT_SOURCE_DIR}/verbs_check_pair.sh
                   $<TARGET_FILE:uroce_verbs_check> ${VC_LIBDIR} ${vc_next_port} 127.77.201.1
                   127.77.201.2 300 0 0 "${VC_PASS}" -- -m 1024 -n 5)
  set_tests_properties(compat.faults.${f}.verbs_check PROPERTIES
                       ENVIRONMENT "UROCE_TEST_PRELOAD=${UROCE_SANITIZER_PRELOAD}" TIMEOUT 330
                       LABELS "compat;faults" RUN_SERIAL TRUE)
  math(EXPR vc_next_port "${vc_next_port} + 1")
endforeach()
