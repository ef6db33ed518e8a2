#!/usr/bin/env bash
# CUDA front-end check of the rebased series (no GPU and no cuBLAS on the build host): the translation units the
# series' CUDA patches touch, compiled to PTX for sm_90 (nvcc's C++ front end, template instantiation and NVVM; no
# ptxas, nothing linked or run). cuBLAS headers from an nvidia-cublas wheel unpacked under $CUBLAS_INC.
set -u
room=${1:-/work/rooms-series31/llamafile-0.3.35}
CUBLAS_INC=${CUBLAS_INC:-/tmp/cu/cublas/nvidia/cublas/include}
cd "$room/ggml/src/ggml-cuda" || exit 2
nvcc --version | tail -2
for tu in fattn-lse-merge.cu fattn-vec-dca.cu fattn.cu ggml-cuda.cu \
          template-instances/fattn-mma-f16-instance-ncols1_1-ncols2_8.cu \
          template-instances/fattn-tile-instance-dkq128-dv128.cu \
          template-instances/fattn-vec-instance-f16-f16.cu; do
  s=$(date +%s)
  nice -n 19 nvcc -std=c++17 -O3 -arch=compute_90 --ptx -o /dev/null -I. -I.. -I../../include -I"$CUBLAS_INC" \
    -DGGML_USE_CUDA -DGGML_CUDA_NO_VMM -DGGML_SCHED_MAX_COPIES=4 -DGGML_SHARED -DGGML_BUILD \
    -DGGML_CUDA_USE_GRAPHS -DGGML_CUDA_PEER_MAX_BATCH_SIZE=128 -use_fast_math -extended-lambda -Xcompiler -Wno-pedantic "$tu" 2>&1 \
    | grep -E "error|warning" | head -20
  echo "$tu: exit ${PIPESTATUS[0]}, $(( $(date +%s) - s )) s"
done
