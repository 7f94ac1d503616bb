# cmake -DLAUNCHER=kiln -DPROBE=dist_probe -P two_nodes.cmake: two `kiln launch --nnodes 2` (node ranks 0 and 1,
# two ranks each) started at once on this machine must form one group of 4 ranks (RANK = node_rank * 2 + local).
string(RANDOM LENGTH 4 ALPHABET 0123456789 r)
math(EXPR port "30000 + ${r} % 20000")
set(node "${LAUNCHER} launch --nnodes 2 --nproc 2 --backend env --master-port ${port}")
execute_process(
  COMMAND sh -c "${node} --node-rank 1 ${PROBE} & ${node} --node-rank 0 ${PROBE}; a=$?; wait $!; b=$?; exit $((a + b))"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
message("${out}${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "expected both launchers to succeed, got '${rc}'")
endif()
foreach(rank 0 1 2 3)
  math(EXPR local "${rank} % 2")
  string(FIND "${out}" "probe rank ${rank} of 4 local ${local} joined" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "rank ${rank} of 4 did not report joining")
  endif()
endforeach()
