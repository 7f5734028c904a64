#!/bin/sh
# AICB-compatible entry: replay (torchrun) or, with --workload_only, generate the Megatron workload.
#   sh scripts/megatron_gpt.sh -m 13 --world_size 64 --tensor_model_parallel_size 8 --sp --workload_only
# Flags as AICB's script; a model size (-m) fills in only what you did not give.
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m utils.aicb_scripts megatron_gpt "$@"
