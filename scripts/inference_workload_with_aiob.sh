#!/bin/sh
# AICB 2.1's entry: write the SimAI inference workload (.txt) of DeepSeek-671B, Qwen3-Moe-235B or Qwen3-Next-80B.
#   sh scripts/inference_workload_with_aiob.sh -m deepseek-671B -a
#   sh scripts/inference_workload_with_aiob.sh -m qwen3-235B -c ./scripts/inference_configs/qwen3_moe_default.json \
#       -s 1024 -b 4 -w 32 -e 32 -p prefill
# Flags as AICB's script (-h lists them); further flags (--gpu_type H200, ...) go on to the generator.
# Runs from the directory it is called from (results/ lands there, as with AICB); config paths are
# resolved from there too.
SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$SCRIPT_DIR/..${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m workload_generator.inference_script "$@"
