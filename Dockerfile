# GPU image: NVIDIA's PyTorch container (CUDA, NCCL, torch, apex and flash-attn preinstalled), plus
# grouped_gemm for MoE expert GEMMs and this toolkit.  CPU-only machines do not need this image:
# `python3 make.py demo` sets up a virtual environment instead.
#
#   docker build -t aicb-toolkit .
#   docker run --gpus all --ipc=host --net=host -it aicb-toolkit \
#       torchrun --nproc_per_node 8 aicb.py --frame Megatron --model_name gpt_13B --world_size 8 \
#       --tensor_model_parallel_size 8 --global_batch 16 --micro_batch 1 --seq_length 2048
FROM nvcr.io/nvidia/pytorch:24.10-py3

# Optional GPU packages (used when importable; plain torch fallbacks otherwise):
#   apex        fused LayerNorm/RMSNorm      (ships with the base image)
#   flash-attn  attention kernels            (ships with the base image; reinstalled if missing)
#   grouped_gemm  one kernel for all local experts' GEMMs (MoE)
RUN python -c "import apex" && \
    (python -c "import flash_attn" || pip install --no-cache-dir flash-attn --no-build-isolation) && \
    TORCH_CUDA_ARCH_LIST="8.0 9.0" pip install --no-cache-dir git+https://github.com/fanshiqing/grouped_gemm@v1.1.4

WORKDIR /workspace/aicb-toolkit
COPY . .
# The container's torch is kept: the core package needs only numpy, pandas and matplotlib.
RUN pip install --no-cache-dir -e ".[test]"
