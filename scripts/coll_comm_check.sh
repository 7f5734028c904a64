#!/bin/sh
# AICB-compatible entry: a collective sweep on every GPU of the job (torchrun aicb.py --frame collective_test).
#   sh scripts/coll_comm_check.sh --test_comm all_gather --begin_size 1048576 --end_size 1073741824 --iter_num 20
# Flags as AICB's script (--iter_num, --begin_size, --end_size, --test_comm, --multi_all_reduce_enable,
# --model_name) plus torchrun's (--nnodes, --nproc_per_node, ...); defaults 4 KiB .. 8 GiB, 500 iterations.
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m utils.aicb_scripts coll_comm_check "$@"
