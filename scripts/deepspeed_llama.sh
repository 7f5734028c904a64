#!/bin/sh
# AICB-compatible entry: replay (torchrun) or, with --workload_only, generate a DeepSpeed ZeRO workload.
#   sh scripts/deepspeed_llama.sh -m 13 --stage 3 --world_size 64 --workload_only
# Flags as AICB's script (-m 7/13/30/65, --stage, bucket sizes, ...); each sets what it names, and a
# model size fills in only what you did not give.
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m utils.aicb_scripts deepspeed_llama "$@"
