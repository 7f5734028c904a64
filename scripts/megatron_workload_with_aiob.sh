#!/bin/sh
# AICB-compatible entry: write the SimAI workload (.txt) of a Megatron job.
#   sh scripts/megatron_workload_with_aiob.sh -m 7 --world_size 64 --global_batch 128 --seq_length 4096
# Flags as AICB's script; a model size (-m) fills in only what you did not give.
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m utils.aicb_scripts megatron_workload_with_aiob "$@"
