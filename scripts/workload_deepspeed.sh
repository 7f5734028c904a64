#!/bin/sh
# The DeepSpeed workload script AICB's README names (AICB ships no such file): generate the ZeRO workload CSV,
# as deepspeed_llama.sh --workload_only does.
#   sh scripts/workload_deepspeed.sh -m 7
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m utils.aicb_scripts deepspeed_llama --workload_only "$@"
